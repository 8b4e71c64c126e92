"""Reads the per-check results of a conformance run for run.sh.

    results.py score REQUIREMENTS RESULTS               "N/M": scored scenarios passed / scored
    results.py baseline REQUIREMENTS RESULTS WHAT       an expected-failures file of the failures
                                                        (WHAT: "through the gateway", …)
    results.py failures REQUIREMENTS RESULTS [BASELINE] the failing checks BASELINE does not list
    results.py stale REQUIREMENTS RESULTS BASELINE      the entries of BASELINE that no longer fail

REQUIREMENTS is the suite's frozen requirement set of a revision (its `server:` list names
the scenarios that count; the suite runs others, such as the tasks extension, for
visibility only, and they cannot fail a run). RESULTS is the suite's `-o` directory: one
`server-SCENARIO-TIMESTAMP/checks.json` per scenario.

A scenario passes when none of its checks has status FAILURE, as the suite's summary
counts. A baseline also lists the WARNINGs (a SHOULD not met), because the suite holds
those against `--expected-failures` too.

`stale` is stricter than the suite, which forgives a listed check that did not run at all
(a scenario may stop before it). A scenario that starts working can stop emitting its
catch-all failure check (`elicitation-sep1034-general`) and emit its real ones instead;
the suite then says nothing, and only `stale` tells that the baseline is out of date.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys

RESULT_DIR = re.compile(r"^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")


def scored_scenarios(requirements: str) -> list[str]:
    """The `server:` list of a requirement set (a flat YAML list; no YAML library needed)."""
    names, in_server = [], False
    for line in open(requirements, encoding="utf-8"):
        if not line.startswith((" ", "#", "\n")):
            in_server = line.rstrip() == "server:"
        elif in_server and (match := re.match(r"^\s+-\s+(\S+)\s*$", line)):
            names.append(match[1])
    if not names:
        sys.exit(f"results.py: no server scenarios in {requirements}")
    return names


def checks(requirements: str, results: str) -> dict[str, list[dict]]:
    """The checks of each scored scenario; a scenario that left no results has none."""
    found: dict[str, list[dict]] = {name: [] for name in scored_scenarios(requirements)}
    for path in glob.glob(os.path.join(results, "server-*", "checks.json")):
        match = RESULT_DIR.match(os.path.basename(os.path.dirname(path)))
        if match is not None and match[1] in found:
            found[match[1]] = json.load(open(path, encoding="utf-8"))
    return found


def failing(requirements: str, results: str) -> dict[str, str]:
    """`scenario:check` → status and message, for each FAILURE and WARNING."""
    out = {}
    for scenario, its_checks in checks(requirements, results).items():
        for check in its_checks:
            if check.get("status") in ("FAILURE", "WARNING"):
                message = " ".join((check.get("errorMessage") or "").split())
                out[f"{scenario}:{check['id']}"] = f"{check['status']}: {message}"
    return out


def listed(baseline: str) -> set[str]:
    """The entries of an expected-failures file (`scenario` or `scenario:check`)."""
    entries = set()
    for line in open(baseline, encoding="utf-8"):
        if (match := re.match(r"^\s*-\s+(\S+)", line)) is not None:
            entries.add(match[1])
    return entries


def main(argv: list[str]) -> None:
    match argv:
        case ["score", requirements, results]:
            outcome = checks(requirements, results)
            passed = sum(1 for c in outcome.values() if c and all(x.get("status") != "FAILURE" for x in c))
            print(f"{passed}/{len(outcome)}")
        case ["baseline", requirements, results, what]:
            era = os.path.basename(requirements).removesuffix(".yaml")
            print(f"# What fails {what} at {era}, one `scenario:check` per line: the")
            print("# expected-failures baseline of run.sh. A failure not listed here, or a listed check")
            print("# that passes, fails the run. Rewritten by `run.sh --update-baselines` (README.md).")
            entries = sorted(failing(requirements, results))
            # The suite wants a list, even an empty one.
            print("server:" if entries else "server: []")
            for entry in entries:
                print(f"  - {entry}")
        case ["failures", requirements, results, *baseline]:
            known = listed(baseline[0]) if baseline else set()
            for entry, message in sorted(failing(requirements, results).items()):
                if entry not in known and entry.split(":", 1)[0] not in known:
                    print(f"  {entry}  {message[:300]}")
        case ["stale", requirements, results, baseline]:
            now = failing(requirements, results)
            failing_scenarios = {entry.split(":", 1)[0] for entry in now}
            for entry in sorted(listed(baseline)):
                if entry not in now and entry not in failing_scenarios:
                    print(f"  {entry}")
        case _:
            sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
