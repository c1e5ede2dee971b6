"""Score `vramctl explain-oom` on a folder of labelled logs.

    python scripts/eval_oom.py DIR [--select all|divisible:3|not-divisible:3] [--cli] [--json]

DIR holds `index.yaml` (`cases:` with `id`, `root_cause` (a cause label, `not-oom` or `no-failure`), `phase`,
`confidence` (high / medium / low: how sure the label is from the thread), `source`) and one `<id>.log` per
case (a `log:` key may name another file). Each log is diagnosed by the library call behind the command
(`vramctl.diagnose.classify.diagnose`, imported from whatever `vramctl` is on the path: set PYTHONPATH to score
another checkout) or, with `--cli`, by `python -m vramctl explain-oom --json` (exit 3 = no failure).

Reported (a table, or one JSON object with `--json`):
- cause right: the predicted cause equals the label, over cases labelled with high or medium confidence;
- phase right: over real failures labelled with high or medium confidence whose label gives a phase;
- real failures reported as `no-failure` (exit 3): a CI gate keyed on the exit code would pass them;
- negatives right: a `not-oom` / `no-failure` label answered with `not-oom` or `no-failure` (and exactly);
- a fix with a flag and a number: over real failures, at least one fix has a flag and a value with a digit;
- values with thousands separators (`205,728`): fix values that cannot be pasted;
- calibration: per confidence level the tool gave, the count and the share with the right cause.
Per-case rows are printed only with `--cases` (never share them for a frozen set).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NEGATIVE_LABELS = frozenset({"not-oom", "no-failure"})
TRUSTED = frozenset({"high", "medium"})
LEVELS = ("high", "medium", "low")
_SEPARATED = re.compile(r"\d,\d{3}(?!\d)")
_DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class Case:
    id: str
    log: Path
    cause: str
    phase: str | None
    confidence: str
    source: str


@dataclass(frozen=True)
class Answer:
    cause: str
    phase: str
    confidence: str
    fixes: tuple[tuple[str | None, object], ...]
    error: str | None = None


def load_cases(folder: Path, select: str) -> list[Case]:
    index = yaml.safe_load((folder / "index.yaml").read_text(encoding="utf-8"))
    raw_cases = index.get("cases") if isinstance(index, Mapping) else None
    if not isinstance(raw_cases, list):
        raise SystemExit(f"{folder / 'index.yaml'}: expected a `cases:` list")
    cases: list[Case] = []
    for raw in raw_cases:
        case_id = str(raw["id"])
        if not _selected(case_id, select):
            continue
        source = raw.get("source")
        url = source.get("url", "") if isinstance(source, Mapping) else str(source or "")
        phase = raw.get("phase")
        cases.append(
            Case(
                id=case_id,
                log=folder / str(raw.get("log") or f"{case_id}.log"),
                cause=str(raw["root_cause"]),
                phase=None if phase in (None, "", "unknown") else str(phase),
                confidence=str(raw.get("confidence", "medium")).lower(),
                source=str(url),
            )
        )
    return cases


def _selected(case_id: str, select: str) -> bool:
    if select == "all":
        return True
    kind, _, number = select.partition(":")
    digits = re.sub(r"\D", "", case_id)
    if kind not in ("divisible", "not-divisible") or not number.isdigit() or not digits:
        raise SystemExit(f"--select {select!r}: use all, divisible:N or not-divisible:N")
    divisible = int(digits) % int(number) == 0
    return divisible if kind == "divisible" else not divisible


def _answer(data: Mapping[str, Any]) -> Answer:
    fixes = tuple(
        (fix.get("flag"), fix.get("value")) for fix in data.get("fixes") or () if isinstance(fix, Mapping)
    )
    return Answer(
        cause=str(data.get("cause")),
        phase=str(data.get("phase")),
        confidence=str(data.get("confidence")),
        fixes=fixes,
    )


def diagnose_library(path: Path) -> Answer:
    from vramctl.diagnose.classify import diagnose

    try:
        return _answer(diagnose(str(path)).to_json())
    except Exception as exc:
        return Answer("error", "unknown", "none", (), error=f"{type(exc).__name__}: {exc}")


def diagnose_cli(path: Path) -> Answer:
    cmd = [sys.executable, "-m", "vramctl", "explain-oom", "--json", str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode not in (0, 3):
        return Answer("error", "unknown", "none", (), error=(done.stderr.strip().splitlines() or ["?"])[-1])
    answer = _answer(json.loads(done.stdout))
    if done.returncode == 3:
        return Answer("no-failure", answer.phase, answer.confidence, answer.fixes)
    return answer


def _share(right: int, total: int) -> dict[str, Any]:
    return {"right": right, "n": total, "share": round(right / total, 3) if total else None}


def score(cases: Sequence[Case], answers: Sequence[Answer]) -> dict[str, Any]:
    pairs = list(zip(cases, answers, strict=True))
    trusted = [(c, a) for c, a in pairs if c.confidence in TRUSTED]
    failures = [(c, a) for c, a in pairs if c.cause not in NEGATIVE_LABELS]
    negatives = [(c, a) for c, a in pairs if c.cause in NEGATIVE_LABELS]
    phased = [(c, a) for c, a in trusted if c.cause not in NEGATIVE_LABELS and c.phase is not None]
    numeric = [
        (c, a)
        for c, a in failures
        if any(flag and value is not None and _DIGIT.search(str(value)) for flag, value in a.fixes)
    ]
    separated = [
        (c, a)
        for c, a in pairs
        if any(value is not None and _SEPARATED.search(str(value)) for _, value in a.fixes)
    ]
    calibration: dict[str, Any] = {}
    for level in LEVELS:
        at = [(c, a) for c, a in trusted if a.confidence == level]
        calibration[level] = _share(sum(c.cause == a.cause for c, a in at), len(at))
    both = sum(c.cause == a.cause and c.phase == a.phase for c, a in phased)
    return {
        "logs": len(pairs),
        "failures": len(failures),
        "negatives": len(negatives),
        "cause_right": _share(sum(c.cause == a.cause for c, a in trusted), len(trusted)),
        "cause_right_all": _share(sum(c.cause == a.cause for c, a in pairs), len(pairs)),
        "phase_right": _share(sum(c.phase == a.phase for c, a in phased), len(phased)),
        "cause_and_phase_right": _share(both, len(phased)),
        "failures_reported_no_failure": sum(a.cause == "no-failure" for _, a in failures),
        "failures_reported_not_oom": sum(a.cause == "not-oom" for _, a in failures),
        "failure_cause_right": _share(sum(c.cause == a.cause for c, a in failures), len(failures)),
        "negatives_right": _share(sum(a.cause in NEGATIVE_LABELS for _, a in negatives), len(negatives)),
        "negatives_exact": _share(sum(a.cause == c.cause for c, a in negatives), len(negatives)),
        "fix_with_flag_and_number": _share(len(numeric), len(failures)),
        "values_with_separators": len(separated),
        "errors": sum(a.error is not None for a in answers),
        "calibration": calibration,
    }


def _pct(item: Mapping[str, Any]) -> str:
    if not item["n"]:
        return "-"
    return f"{item['right']}/{item['n']} ({100 * item['right'] / item['n']:.0f} %)"


def table(name: str, result: Mapping[str, Any]) -> str:
    rows = [
        ("logs (failures / negatives)", f"{result['logs']} ({result['failures']} / {result['negatives']})"),
        ("cause right (high/medium labels)", _pct(result["cause_right"])),
        ("cause right (all labels)", _pct(result["cause_right_all"])),
        ("phase right (failures, high/medium)", _pct(result["phase_right"])),
        ("cause and phase right", _pct(result["cause_and_phase_right"])),
        ("real failures reported no-failure (exit 3)", str(result["failures_reported_no_failure"])),
        ("real failures reported not-oom", str(result["failures_reported_not_oom"])),
        ("negatives right (not-oom / no-failure)", _pct(result["negatives_right"])),
        ("negatives exactly right", _pct(result["negatives_exact"])),
        ("fix with a flag and a number (failures)", _pct(result["fix_with_flag_and_number"])),
        ("logs with a value with thousands separators", str(result["values_with_separators"])),
        ("crashes", str(result["errors"])),
    ]
    for level in LEVELS:
        rows.append((f"calibration: '{level}' right", _pct(result["calibration"][level])))
    width = max(len(r[0]) for r in rows)
    lines = [f"## {name}", "", f"| {'measure':{width}} | value |", f"| {'-' * width} | --- |"]
    lines += [f"| {label:{width}} | {value} |" for label, value in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a folder with index.yaml and the logs")
    parser.add_argument(
        "--select", default="all", help="all (default), divisible:N or not-divisible:N (case ids)"
    )
    parser.add_argument(
        "--cli", action="store_true", help="run `python -m vramctl explain-oom --json` per log"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--cases", action="store_true", help="also list each case (not for frozen sets)")
    parser.add_argument("--name", default=None, help="the set's name in the report")
    args = parser.parse_args(argv)
    folder: Path = args.folder
    if not (folder / "index.yaml").is_file():
        print(f"eval_oom: {folder}: no index.yaml there", file=sys.stderr)
        return 2
    cases = load_cases(folder, args.select)
    run = diagnose_cli if args.cli else diagnose_library
    answers = [
        run(case.log) if case.log.is_file() else Answer("error", "unknown", "none", (), "no log")
        for case in cases
    ]
    result = score(cases, answers)
    name = args.name or f"{folder.name} ({args.select})"
    if args.json:
        out: dict[str, Any] = {"set": name, **result}
        if args.cases:
            out["cases"] = [
                {
                    "id": c.id,
                    "label": c.cause,
                    "phase": c.phase,
                    "got": a.cause,
                    "got_phase": a.phase,
                    "confidence": a.confidence,
                }
                for c, a in zip(cases, answers, strict=True)
            ]
        print(json.dumps(out, indent=2))
    else:
        print(table(name, result))
        if args.cases:
            print()
            for c, a in zip(cases, answers, strict=True):
                mark = "ok" if c.cause == a.cause else "--"
                print(
                    f"{mark} {c.id}: {c.cause}/{c.phase} -> {a.cause}/{a.phase} ({a.confidence}) {a.error or ''}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
