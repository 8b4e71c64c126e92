#!/usr/bin/env python3
"""Markdown summary of one sitting of the peers benchmark (benches/peers/run.sh).

    python3 benches/peers/summary.py benches/peers/results/<sitting>.jsonl

Prints the sitting (machine, versions, load per round), a headline table like issue 32's
and the full table: for every target, policy setting and connection count, the minimum,
median and maximum over the rounds of req/s, p50, p99 and CPU per 1,000 calls, and the
highest peak RSS. A failed run (errors or wrong answers) is counted as failed and left out
of the figures, never averaged in.
"""

import json
import statistics
import sys
from collections import defaultdict

TARGET_ORDER = ["direct", "toolgate-mcp", "toolgate-v1", "toolgate-mcp-base", "toolgate-v1-base",
                "direct-2026", "toolgate-mcp-2026", "toolgate-mcp-2026-base",
                "mcp-proxy", "fastmcp", "contextforge"]
LABELS = {
    "direct": "direct to the upstream",
    "toolgate-mcp": "toolgate `/mcp`",
    "toolgate-v1": "toolgate `/v1`",
    "toolgate-mcp-base": "toolgate `/mcp`, baseline build",
    "toolgate-v1-base": "toolgate `/v1`, baseline build",
    "direct-2026": "direct to the upstream, a 2026-07-28 client",
    "toolgate-mcp-2026": "toolgate `/mcp`, a 2026-07-28 client",
    "toolgate-mcp-2026-base": "toolgate `/mcp`, a 2026-07-28 client, baseline build",
    "mcp-proxy": "mcp-proxy",
    "fastmcp": "FastMCP proxy",
    "contextforge": "ContextForge",
}


def load(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not a JSON line ({e}); is this a results file of run.sh?")
    return rows


def spread(values, fmt):
    """min / median / max, or the one value."""
    if not values:
        return "—"
    if len(values) == 1:
        return fmt.format(values[0])
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def median(values):
    return statistics.median(values) if values else None


def order(target):
    return TARGET_ORDER.index(target) if target in TARGET_ORDER else len(TARGET_ORDER)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summary.py RESULTS.jsonl (one file of benches/peers/results/)")
    rows = load(sys.argv[1])
    sitting = next((r for r in rows if r.get("kind") == "sitting"), None)
    if sitting is None:
        sys.exit(f"{sys.argv[1]} has no sitting row: not a results file of run.sh")
    runs = [r for r in rows if r.get("kind") == "run"]
    ok = [r for r in runs if r.get("status") == "ok"]

    s = sitting
    print(f"Sitting {s['file']}, started {s['started_utc']}: {s['rounds']} rounds, "
          f"{s['seconds_per_run']} s per run after {s['warm_seconds']} s of warm-up, "
          f"wrk {s['wrk']}, one MCP session per connection.")
    print(f"Machine: {s['machine']}, {s['cpus']} CPUs, {s['memory_gib']} GiB, Linux {s['kernel']}, "
          f"Python {s['python']}.")
    print(f"Versions: toolgate {s['toolgate_commit']} (binary sha256 {s['toolgate_bin_sha256']}…), "
          f"mcp-proxy {s['mcp_proxy']}, FastMCP {s['fastmcp']}, ContextForge {s['contextforge']}.")
    rounds = defaultdict(dict)
    for r in rows:
        if r.get("kind") == "round":
            rounds[r["round"]][r["event"]] = r["load"]
    loads = "; ".join(f"round {n}: {v.get('start', '?')} → {v.get('end', '?')}"
                      for n, v in sorted(rounds.items()))
    print(f"Load average (1, 5, 15 min) at the start and end of each round: {loads}.")
    for r in rows:
        if r.get("kind") == "skipped":
            print(f"Left out: {r['target']}: {r['reason']}")
    failed = [r for r in runs if r.get("status") != "ok"]
    for r in failed:
        print(f"Failed run: round {r['round']}, {r['target']} policies {r['policies']}, "
              f"{r.get('connections', '?')} connection(s): {r.get('error') or ''}"
              f"errors {r.get('errors', '?')}, wrong answers {r.get('wrong', '?')} of {r.get('requests', '?')}")
    audits = [r for r in rows if r.get("kind") == "audit"]
    if audits:
        per_target = defaultdict(lambda: [0, 0])
        for r in audits:
            per_target[r["target"]][0] += r["audit_records"]
            per_target[r["target"]][1] += r["calls"]
        print("Audit records written with policies on (records / calls answered): " + "; ".join(
            f"{t} {a} / {c}" for t, (a, c) in sorted(per_target.items(), key=lambda kv: order(kv[0]))) + ".")
    print()

    groups = defaultdict(list)
    for r in ok:
        groups[(r["target"], r["policies"], r["connections"])].append(r)
    targets = sorted({r["target"] for r in runs}, key=order)

    # p50 added at 1 connection: target minus direct in the same round, median over rounds;
    # a target whose client speaks 2026-07-28 against the upstream called the same way.
    def reference(target):
        return "direct-2026" if "-2026" in target else "direct"

    direct_p50 = {(r["target"], r["round"]): r["p50_ms"] for r in ok
                  if r["target"] in ("direct", "direct-2026") and r["connections"] == 1}

    def added_p50(target, policy):
        key = reference(target)
        diffs = [r["p50_ms"] - direct_p50[(key, r["round"])] for r in groups[(target, policy, 1)]
                 if (key, r["round"]) in direct_p50]
        return diffs

    print("| 16 connections, medians | req/s policies off | req/s policies on "
          "| added p50 at 1 connection, off / on | CPU s / 1,000 calls, off / on | peak RSS, off / on |")
    print("|---|---:|---:|---:|---:|---:|")
    for t in targets:
        cells = [LABELS.get(t, t)]
        for p in ("off", "on"):
            v = median([r["rps"] for r in groups[(t, p, 16)]])
            cells.append("—" if v is None else f"{v:,.0f}")
        pair = []
        for p in ("off", "on"):
            d = median(added_p50(t, p))
            pair.append("—" if d is None or t == reference(t) else f"{d:+.2f} ms")
        cells.append(" / ".join(pair))
        pair = []
        for p in ("off", "on"):
            v = median([r["cpu_s_per_1000"] for r in groups[(t, p, 16)]])
            pair.append("—" if v is None else f"{v:.2f}")
        cells.append(" / ".join(pair))
        pair = []
        for p in ("off", "on"):
            v = [r["peak_rss_kb"] for c in (1, 16) for r in groups[(t, p, c)]]
            pair.append("—" if not v else f"{max(v) / 1024:.0f} MB")
        cells.append(" / ".join(pair))
        print("| " + " | ".join(cells) + " |")
    print()

    print("| target | policies | conns | runs ok | req/s min / median / max | p50 ms | p99 ms "
          "| CPU s / 1,000 calls | peak RSS MB (max) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    keys = sorted({(r["target"], r["policies"], r.get("connections", 0)) for r in runs},
                  key=lambda k: (order(k[0]), k[1] != "off", k[2]))
    for t, p, c in keys:
        g = groups[(t, p, c)]
        total = sum(1 for r in runs if (r["target"], r["policies"], r.get("connections", 0)) == (t, p, c))
        rss = max((r["peak_rss_kb"] for r in g), default=None)
        print(f"| {LABELS.get(t, t)} | {p} | {c} | {len(g)} of {total} "
              f"| {spread([r['rps'] for r in g], '{:,.0f}')} "
              f"| {spread([r['p50_ms'] for r in g], '{:.2f}')} "
              f"| {spread([r['p99_ms'] for r in g], '{:.2f}')} "
              f"| {spread([r['cpu_s_per_1000'] for r in g], '{:.3f}')} "
              f"| {'—' if rss is None else f'{rss / 1024:.0f}'} |")


if __name__ == "__main__":
    main()
