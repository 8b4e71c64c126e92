#!/usr/bin/env python3
"""Check that each crate of the workspace declares a `rust-version` its locked dependencies allow.

Usage: scripts/msrv.py             (reads `cargo metadata --locked` in the repository root)
       scripts/msrv.py --self-test (proves on a made-up graph that it finds a low declaration)

A crate's `rust-version` is a promise: this crate builds with that Rust or newer. With the
repository's Cargo.lock, it builds only where every crate it depends on (normal and build
dependencies, transitively; not dev-dependencies) builds too, so each workspace crate must
declare at least the highest `rust-version` among them. This script prints, for each
workspace crate, what it declares and what its locked dependencies need, and exits with
status 1 when a crate declares less (or nothing), naming the dependency that needs more.

It does not prove that the declared version compiles the crate's own code: only a build
with that toolchain does. What it catches is the drift a `cargo update` brings, which no
build on a newer toolchain shows. No dependencies beyond Python 3.8 and cargo.
"""

import json
import os
import subprocess
import sys


def version(text):
    """`1.89` or `1.89.0` as a comparable tuple of two numbers."""
    parts = [int(part) for part in text.split(".")]
    return tuple((parts + [0, 0])[:2])


def shown(numbers):
    return ".".join(str(n) for n in numbers)


def closure(nodes, root):
    """Every package `root` needs to build: normal and build dependencies, transitively."""
    seen, stack = set(), [root]
    while stack:
        package = stack.pop()
        if package in seen:
            continue
        seen.add(package)
        for dependency in nodes[package]["deps"]:
            if any(kind["kind"] in (None, "build") for kind in dependency["dep_kinds"]):
                stack.append(dependency["pkg"])
    return seen


def findings(metadata):
    """For each workspace crate: (name, declared or None, needed, the crate needing it)."""
    packages = {package["id"]: package for package in metadata["packages"]}
    nodes = {node["id"]: node for node in metadata["resolve"]["nodes"]}
    rows = []
    for member in metadata["workspace_members"]:
        needed, by = (0, 0), None
        for package in sorted(closure(nodes, member) - {member}):
            wanted = packages[package].get("rust_version")
            if wanted and version(wanted) > needed:
                needed = version(wanted)
                by = "%s %s" % (packages[package]["name"], packages[package]["version"])
        declared = packages[member].get("rust_version")
        rows.append((packages[member]["name"], declared and version(declared), needed, by))
    return sorted(rows)


def report(rows, say=print):
    """Says the table line by line (`say`); returns how many crates declare too little."""
    low = 0
    for name, declared, needed, by in rows:
        if declared is None or declared < needed:
            low += 1
            say(
                "%s declares %s but its locked dependencies need Rust %s (%s): raise its "
                "rust-version to %s, or pin that dependency lower in Cargo.lock"
                % (name, shown(declared) if declared else "no rust-version", shown(needed),
                   by, shown(needed))
            )
        else:
            say("%s: declares %s, its locked dependencies need %s%s"
                  % (name, shown(declared), shown(needed), " (%s)" % by if by else ""))
    return low


def self_test():
    def package(name, rust_version):
        return {"id": name, "name": name, "version": "1.0.0", "rust_version": rust_version}

    def node(name, *deps, kind=None):
        return {"id": name, "deps": [{"pkg": d, "dep_kinds": [{"kind": kind}]} for d in deps]}

    metadata = {
        "workspace_members": ["app", "lib"],
        "packages": [package("app", "1.88"), package("lib", "1.90"), package("uuid", "1.89.0"),
                     package("old", "1.60"), package("bench", "1.99")],
        "resolve": {"nodes": [node("app", "lib", "old"), node("uuid"), node("old"),
                              node("bench"),
                              {"id": "lib", "deps": [
                                  {"pkg": "uuid", "dep_kinds": [{"kind": None}]},
                                  {"pkg": "bench", "dep_kinds": [{"kind": "dev"}]}]}]},
    }
    rows = {row[0]: row for row in findings(metadata)}
    # `app` needs what `lib` declares (1.90), through it; `lib` needs uuid's 1.89, not
    # its dev-dependency's 1.99.
    assert rows["app"][2:] == ((1, 90), "lib 1.0.0"), rows["app"]
    assert rows["lib"][2:] == ((1, 89), "uuid 1.0.0"), rows["lib"]
    said = []
    assert report(list(rows.values()), said.append) == 1
    assert said[0].startswith("app declares 1.88 but its locked dependencies need Rust 1.90"), said
    print("self-test passed")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    output = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        cwd=root, check=True, stdout=subprocess.PIPE,
    ).stdout
    return 1 if report(findings(json.loads(output))) else 0


if __name__ == "__main__":
    sys.exit(main())
