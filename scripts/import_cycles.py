#!/usr/bin/env python3
"""Report import cycles between the source files of each crate in the workspace.

Usage: scripts/import_cycles.py [ROOT]      (ROOT defaults to the repository root)
       scripts/import_cycles.py --self-test  (proves on a made-up crate that it finds cycles)

For every crate (the root package and each `crates/*`), this reads the module tree from
`src/lib.rs`, `src/main.rs` and `src/bin/*.rs` by following `mod name;` declarations, then
finds every path a file names with `crate::`, `super::` or `self::` (in `use` trees and in
code) and resolves it to the module file it lands in. A file that names a module below its
own (a parent declaring, re-exporting or routing to its children) is the module tree, not
an import, so that edge is left out; every other edge counts. Each strongly connected
component of more than one file (Tarjan's algorithm) is an import cycle: it is printed with
the imports that form it, and the script exits with status 1.

There is no cycle today. Should one ever have to stay for a while, list it in
`scripts/import_cycles.allow` (absent today), one a line: `<crate dir>: <file> <file> …`,
paths from the crate dir. A listed cycle is reported but does not fail; a line that no
longer matches a cycle fails, so the list can only shrink.

Comments, doc comments, string literals and `pub(in …)` visibilities are ignored, and so
are `$crate` paths inside macros. No dependencies beyond Python 3.8.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_code(text):
    """Blank out comments, string and char literals, keeping offsets and newlines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (c == "r" or c == "b") and re.match(r'b?r(#*)"', text[i:i + 80]) and (
                i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * m.end())
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d, self}}` -> [['a','b'], ['a','c','d'], ['a','c']]."""
    tokens = re.findall(r"::|\{|\}|,|\*|" + IDENT, tree)
    pos = 0

    def parse(prefix):
        nonlocal pos
        paths = []
        path = list(prefix)
        while pos < len(tokens):
            tok = tokens[pos]
            if tok == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    if tokens[pos] == ",":
                        pos += 1
                        continue
                    paths.extend(parse(path))
                pos += 1
                return paths
            if tok in (",", "}"):
                break
            if tok == "::":
                pos += 1
                continue
            if tok == "as":
                pos += 2
                continue
            if tok == "*":
                pos += 1
                continue
            if tok == "self" and path:
                # `a::{self, b}`: `self` is `a` itself.
                pos += 1
                continue
            path.append(tok)
            pos += 1
        paths.append(path)
        return paths

    result = []
    while pos < len(tokens):
        if tokens[pos] == ",":
            pos += 1
            continue
        before = pos
        result.extend(parse([]))
        if pos == before:
            pos += 1
    return result


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of names from the crate root
        self.file = file  # the file that holds it (inline modules share their parent's)


def child_file(dir_, name):
    for candidate in (os.path.join(dir_, name + ".rs"), os.path.join(dir_, name, "mod.rs")):
        if os.path.isfile(candidate):
            return candidate
    return None


def load_tree(root_file):
    """Follow `mod` declarations from a crate root: module path -> Module, file -> code."""
    modules, code = {}, {}

    def visit(file, mod_path, dir_):
        with open(file, encoding="utf-8") as f:
            text = strip_code(f.read())
        text = re.sub(r"\bpub\s*\(\s*in\s+[^)]*\)", lambda m: " " * len(m.group(0)), text)
        code[file] = (mod_path, text)
        modules[mod_path] = Module(mod_path, file)
        # Inline modules: track `mod name {` against brace depth.
        stack = []  # (name, depth at which it opened)
        depth = 0
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*(;|\{)|\{|\}", text):
            tok = m.group(0)
            inline = [name for name, _ in stack]
            if m.group(1):
                name = m.group(1)
                sub = mod_path + tuple(inline) + (name,)
                if m.group(2) == "{":
                    modules[sub] = Module(sub, file)
                    depth += 1
                    stack.append((name, depth))
                else:
                    sub_dir = os.path.join(dir_, *inline)
                    target = child_file(sub_dir, name)
                    if target is None:
                        print(f"warning: {file}: no file for `mod {name};`", file=sys.stderr)
                        continue
                    if target.endswith("mod.rs"):
                        next_dir = os.path.dirname(target)
                    else:
                        next_dir = os.path.join(sub_dir, name)
                    visit(target, sub, next_dir)
            elif tok == "{":
                depth += 1
            else:
                if stack and stack[-1][1] == depth:
                    stack.pop()
                depth -= 1
        return modules

    visit(root_file, (), os.path.dirname(root_file))
    return modules, code


def module_at(text, mod_path, offset):
    """The module (with inline modules) at an offset of a file."""
    stack, depth = [], 0
    for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{|\{|\}", text[:offset]):
        if m.group(1):
            depth += 1
            stack.append((m.group(1), depth))
        elif m.group(0) == "{":
            depth += 1
        else:
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
    return mod_path + tuple(name for name, _ in stack)


def resolve(segments, here, modules):
    """The module a `crate::`/`super::`/`self::` path lands in, or None."""
    if not segments:
        return None
    if segments[0] == "crate":
        base, rest = (), segments[1:]
    elif segments[0] in ("super", "self"):
        base, rest = here, segments
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if not base:
                    return None
                base = base[:-1]
            rest = rest[1:]
    else:
        return None
    for name in rest:
        if base + (name,) in modules:
            base = base + (name,)
        else:
            break
    return base


def imports(modules, code):
    """Yield (from file, to file, line, path text) for each counted import."""
    path_re = re.compile(r"(?<![\w$:])((?:crate|super|self)(?:\s*::\s*" + IDENT + r")+)")
    use_re = re.compile(r"\buse\s+([^;]+);")
    for file, (mod_path, text) in code.items():
        found = []
        for m in use_re.finditer(text):
            tree = m.group(1)
            for segs in expand_use_tree(tree):
                if segs and segs[0] in ("crate", "super", "self"):
                    found.append((m.start(), segs, "::".join(segs)))
        blanked = use_re.sub(lambda m: " " * len(m.group(0)), text)
        for m in path_re.finditer(blanked):
            segs = re.findall(IDENT, m.group(1))
            found.append((m.start(), segs, "::".join(segs)))
        for offset, segs, shown in found:
            here = module_at(text, mod_path, offset)
            target = resolve(segs, here, modules)
            if target is None:
                continue
            to = modules[target].file
            if to == file:
                continue
            # A module naming one below itself is the module tree, not an import.
            if target[: len(mod_path)] == mod_path:
                continue
            line = text.count("\n", 0, offset) + 1
            yield file, to, line, shown


def tarjan(nodes, edges):
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            result.append(sorted(component))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return result


def crate_roots(repo):
    dirs = [repo] + sorted(
        os.path.join(repo, "crates", d) for d in os.listdir(os.path.join(repo, "crates"))
    )
    for d in dirs:
        src = os.path.join(d, "src")
        if not os.path.isfile(os.path.join(d, "Cargo.toml")) or not os.path.isdir(src):
            continue
        roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs")]
        bin_dir = os.path.join(src, "bin")
        if os.path.isdir(bin_dir):
            for f in sorted(os.listdir(bin_dir)):
                path = os.path.join(bin_dir, f)
                roots.append(path if f.endswith(".rs") else os.path.join(path, "main.rs"))
        yield d, [r for r in roots if os.path.isfile(r)]


def find_cycles(repo):
    """Every import cycle: (crate dir relative to repo, [files relative to the crate], lines)."""
    found, files_seen = [], 0
    for crate_dir, roots in crate_roots(repo):
        name = os.path.relpath(crate_dir, repo)
        rel = lambda p: os.path.relpath(p, crate_dir)
        for root in roots:
            modules, code = load_tree(root)
            files_seen += len(code)
            edges, why = {}, {}
            for src, dst, line, shown in imports(modules, code):
                edges.setdefault(src, set()).add(dst)
                why.setdefault((src, dst), []).append((line, shown))
            for component in tarjan(code.keys(), edges):
                if len(component) < 2:
                    continue
                members, lines = set(component), []
                for src in component:
                    for dst in sorted(edges.get(src, ()) & members):
                        line, shown = why[(src, dst)][0]
                        more = len(why[(src, dst)]) - 1
                        extra = f" (+{more} more)" if more else ""
                        lines.append(f"    {rel(src)}:{line} -> {rel(dst)}   {shown}{extra}")
                found.append((name, sorted(rel(f) for f in component), lines))
    return found, files_seen


def read_allowed(path):
    allowed = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if line:
                    crate, _, files = line.partition(":")
                    allowed[(crate.strip(), tuple(sorted(files.split())))] = number
    return allowed


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    allow_path = os.path.join(repo, "scripts", "import_cycles.allow")
    allowed = read_allowed(allow_path)
    found, files_seen = find_cycles(repo)
    failed = 0
    for crate, files, lines in found:
        key = (crate, tuple(files))
        listed = key in allowed
        allowed.pop(key, None)
        failed += not listed
        tag = " (listed in scripts/import_cycles.allow)" if listed else ""
        print(f"import cycle in {crate} ({len(files)} files){tag}: " + " ".join(files))
        print("\n".join(lines))
        print()
    for (crate, files), number in sorted(allowed.items(), key=lambda kv: kv[1]):
        failed += 1
        print(f"scripts/import_cycles.allow:{number}: no such cycle any more in {crate} "
              f"({' '.join(files)}): delete the line, or list the cycle as it is now")
    if failed:
        print(f"{failed} problem(s) above. Cut each new cycle: move what the files share into a "
              "module below them, so that imports point one way.")
        return 1
    print(f"no import cycle in {files_seen} files" +
          (f" beyond the {len(found)} listed in scripts/import_cycles.allow" if found else ""))
    return 0


SELF_TEST = {
    "Cargo.toml": "[package]\nname = \"fixture\"\n",
    "src/lib.rs": "mod a;\nmod b;\nmod c;\nmod tree;\npub use a::A;\n",
    # a -> b through a use tree, b -> a through a path in code: a cycle.
    "src/a.rs": "use crate::{b::{self, B}, c::C};\npub struct A;\n",
    "src/b.rs": "pub struct B;\nfn f() { let _ = crate::a::A; }\n",
    # c names a and b only in a comment, a string and a macro's $crate: no edge.
    "src/c.rs": "// crate::a::A\npub struct C;\nconst S: &str = \"crate::b::B\";\n"
                "macro_rules! m { () => { $crate::a::A } }\n",
    # A parent naming its child is the module tree; super:: in an inline test module
    # names the file itself.
    "src/tree/mod.rs": "mod leaf;\npub use self::leaf::Leaf;\npub struct Root;\n",
    "src/tree/leaf.rs": "use super::Root;\npub struct Leaf(Root);\n"
                        "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
}


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as repo:
        os.mkdir(os.path.join(repo, "crates"))
        for path, text in SELF_TEST.items():
            full = os.path.join(repo, "crates", "fixture", path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)
        found, _ = find_cycles(repo)
        got = [(crate, files) for crate, files, _ in found]
        want = [("crates/fixture", ["src/a.rs", "src/b.rs"])]
        if got != want:
            print(f"self-test failed: found {got}, expected {want}")
            return 1
    print("self-test passed: the cycle a.rs <-> b.rs is found, and nothing else")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else main())
