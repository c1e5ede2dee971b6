"""explain-oom invariance to how a log is pasted: the same log, re-pasted, must get the same answer.

    python scripts/eval_invariance.py [--json] [--cases] [--only NAME[,NAME]] [--seed N] [--limit N] [--shared DIR]

For every development log available in CI (the shared OOM samples, oom/*.log, the oom-dev development split,
ids NOT divisible by 3 only, and tests/fixtures/oom/*.log) each perturbation below is applied and
`vramctl.diagnose.diagnose()` on the perturbed text is compared with the answer on the original: the
cause, the phase, and the first fix's flag and value (a number within 1 %). A perturbation that does not
apply to a log (no long line to wrap, no traceback to elide, a last line that holds the failure's words)
is left out of that log's count. Per perturbation: unchanged / total; `--cases` lists the changed ones.

The perturbations are what real pastes do: hard wraps, markdown quotes, code fences, escaped ANSI colour
codes, a JSON string / an HTTP error payload, HTML entities, CRLF, tabs, indentation, collector and
launcher prefixes, line numbers, elisions, an excerpt cut in the middle of its last line. They are
deterministic (`--seed` moves the elision's place).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vramctl.diagnose import diagnose  # noqa: E402

SHARED = ROOT.parent / "shared" / "samples"


def log_files(shared: Path = SHARED) -> list[Path]:
    files = sorted((shared / "oom").glob("*.log"))
    for path in sorted((shared / "oom-dev").glob("*.log")):
        digits = re.sub(r"\D", "", path.stem)
        if digits and int(digits) % 3 != 0:  # the frozen split (ids divisible by 3) is never looked at
            files.append(path)
    files.extend(sorted((ROOT / "tests" / "fixtures" / "oom").glob("*.log")))
    return files


# --------------------------------------------------------------------------------------------------
# Perturbations: text -> text, or None when it does not apply to this log

Perturb = Callable[[str, int], "str | None"]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _per_line(fn: Callable[[int, str], str]) -> Perturb:
    def apply(text: str, seed: int) -> str:
        lines = _lines(text)
        end = (
            [""] if lines and lines[-1] == "" else []
        )  # the newline that ends the file is no line of its own
        return "\n".join([*(fn(i, line) for i, line in enumerate(lines[: len(lines) - len(end)])), *end])

    return apply


def _wrap(width: int) -> Perturb:
    def apply(text: str, seed: int) -> str | None:
        out: list[str] = []
        changed = False
        for line in _lines(text):
            if len(line) <= width:
                out.append(line)
                continue
            changed = True
            out.extend(line[i : i + width] for i in range(0, len(line), width))
        return "\n".join(out) if changed else None

    return apply


def _quote_list(text: str, seed: int) -> str:
    lines = _lines(text.rstrip("\n"))
    return "\n".join(("> - " if i == 0 else ">   ") + line for i, line in enumerate(lines)) + "\n"


def _fence(top: str, bottom: str) -> Perturb:
    def apply(text: str, seed: int) -> str:
        return f"Here is the log:\n\n{top}\n{text.rstrip()}\n{bottom}\n"

    return apply


_LEVEL_RE = re.compile(r"\b(INFO|WARNING|ERROR|DEBUG|CRITICAL)\b")


def _ansi(esc: str) -> Perturb:
    """Colour the level word and the whole of each error line, as a coloured terminal log does."""

    def line(i: int, text: str) -> str:
        if not text:
            return text
        text = _LEVEL_RE.sub(lambda m: f"{esc}[32m{m.group(1)}{esc}[0m", text, count=1)
        if "Error" in text or "error" in text:
            text = f"{esc}[31m{text}{esc}[0m"
        return text

    return _per_line(line)


def _json_string(text: str, seed: int) -> str:
    return json.dumps({"error": text}) + "\n"


def _http_payload(text: str, seed: int) -> str:
    body = json.dumps(
        {"object": "error", "message": text, "type": "InternalServerError", "param": None, "code": 500}
    )
    return f"openai.InternalServerError: Error code: 500 - {body}\n"


def _html(text: str, seed: int) -> str | None:
    out = html.escape(text, quote=True).replace("&#x27;", "&#39;")
    return out if out != text else None


def _tabs(text: str, seed: int) -> str | None:
    out = "\n".join(
        re.sub(r"^( {4})+", lambda m: "\t" * (len(m.group()) // 4), line) for line in _lines(text)
    )
    return "\n".join("\t" + line if line else line for line in _lines(out))


_FRAME_RE = re.compile(r'(?:^|[\s:)\]])File "[^"]+", line \d+')


def _elide(marker: str) -> Perturb:
    """The middle frames of the longest traceback replaced by `marker` (the first one or two frames and the last kept)."""

    def apply(text: str, seed: int) -> str | None:
        lines = _lines(text)
        # the frame lines (`File "…", line N, in f`, whatever prefix a process put before them), in runs
        frame_at = [k for k, line in enumerate(lines) if _FRAME_RE.search(line) is not None]
        runs: list[list[int]] = []
        for k in frame_at:
            if runs and k - runs[-1][-1] <= 4:
                runs[-1].append(k)
            else:
                runs.append([k])
        frames = max(runs, key=len, default=[])
        if len(frames) < 4:
            return None
        lo = frames[1 + seed % 2 if len(frames) > 4 else 1]
        hi = frames[-1]
        return "\n".join([*lines[:lo], marker, *lines[hi:]])

    return apply


def _cut_last(text: str, seed: int, *, evidence_lines: frozenset[int] = frozenset()) -> str | None:
    lines = _lines(text.rstrip("\n"))
    last = len(lines)
    if last in evidence_lines or len(lines[-1]) < 20:  # the cut would take the failure's own words
        return None
    line = lines[-1]
    lines[-1] = line[: len(line) // 2]
    return "\n".join(lines)


PERTURBATIONS: dict[str, Perturb] = {
    "wrap-80": _wrap(80),
    "wrap-100": _wrap(100),
    "wrap-120": _wrap(120),
    "quote": _per_line(lambda i, line: "> " + line),
    "quote-nested": _per_line(lambda i, line: ">> " + line),
    "quote-list": _quote_list,
    "fence-backticks": _fence("```", "```"),
    "fence-tildes": _fence("~~~text", "~~~"),
    "details": _fence("<details><summary>log</summary>\n", "\n</details>"),
    "ansi-esc": _ansi("\x1b"),
    "ansi-syslog": _ansi("#033"),
    "ansi-caret": _ansi("^["),
    "ansi-json": _ansi("\\u001b"),
    "json-string": _json_string,
    "http-payload": _http_payload,
    "html-entities": _html,
    "crlf": lambda text, seed: text.replace("\n", "\r\n"),
    "tabs": _tabs,
    "indent": _per_line(lambda i, line: "    " + line),
    "prefix-cri": _per_line(lambda i, line: "2025-06-01T10:00:00.123Z stderr F " + line),
    "prefix-vllm-worker": _per_line(lambda i, line: "(VllmWorker rank=0 pid=123) " + line),
    "prefix-mpi": _per_line(lambda i, line: "[1,0]<stderr>: " + line),
    "prefix-compose": _per_line(lambda i, line: "vllm-server | " + line),
    "line-numbers": _per_line(lambda i, line: f"{i + 1}: {line}"),
    "line-numbers-L": _per_line(lambda i, line: f"L{i + 1} {line}"),
    "elide-dots": _elide("..."),
    "elide-omitted": _elide("[... 200 lines omitted ...]"),
    "cut-last-line": _cut_last,
}


# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    cause: str
    phase: str | None
    flag: str | None
    value: str | None


def _key(path: Path) -> tuple[Key, frozenset[int]]:
    try:
        result = diagnose(str(path))
    except Exception as exc:  # an error is an answer too (it must not change either)
        return Key(f"error:{type(exc).__name__}", None, None, None), frozenset()
    fix = result.fixes[0] if result.fixes else None
    value = None if fix is None or fix.value is None else str(fix.value)
    return Key(result.cause, result.phase, fix.flag if fix else None, value), frozenset(
        e.line for e in result.evidence
    )


def _number(value: str | None) -> tuple[float, str] | None:
    """(number, unit) of a fix value such as `0.85`, `12g`, `8192`."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*([0-9][0-9_.,]*)\s*([a-zA-Z]*)\s*", value)
    if m is None:
        return None
    try:
        return float(m.group(1).replace(",", "").replace("_", "")), m.group(2)
    except ValueError:
        return None


def same(a: Key, b: Key) -> bool:
    if (a.cause, a.phase, a.flag) != (b.cause, b.phase, b.flag):
        return False
    if a.value == b.value:
        return True
    na, nb = _number(a.value), _number(b.value)
    if na is None or nb is None or na[1] != nb[1]:
        return False
    x, y = na[0], nb[0]
    return abs(x - y) <= 0.01 * max(abs(x), abs(y))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cases", action="store_true", help="list each changed case")
    ap.add_argument("--only", default="", help="comma-separated perturbation names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0, help="the first N logs only")
    ap.add_argument("--shared", type=Path, default=SHARED, help="the shared samples folder (default: samples in the folder beside the checkout)")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(PERTURBATIONS)
    files = log_files(args.shared)
    if args.limit:
        files = files[: args.limit]
    table: dict[str, list[int]] = {name: [0, 0] for name in names}
    changed: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            text = path.read_bytes().decode("utf-8", "replace")
            base, evidence = _key(path)
            for name in names:
                fn = PERTURBATIONS[name]
                out = (
                    _cut_last(text, args.seed, evidence_lines=evidence)
                    if fn is _cut_last
                    else fn(text, args.seed)
                )
                if out is None:
                    continue
                target = Path(tmp) / path.name
                target.write_bytes(out.encode("utf-8"))
                got, _ = _key(target)
                table[name][1] += 1
                if same(base, got):
                    table[name][0] += 1
                else:
                    label = f"{path.parent.name}/{path.name}"
                    changed.append(
                        {"perturbation": name, "log": label, "base": str(base), "perturbed": str(got)}
                    )
    total = [sum(v[0] for v in table.values()), sum(v[1] for v in table.values())]
    if args.json:
        print(json.dumps({"logs": len(files), "table": table, "total": total, "changed": changed}, indent=1))
        return 0
    print(f"{len(files)} logs")
    print(f"{'perturbation':<22} unchanged / total")
    for name, (ok, n) in table.items():
        print(f"{name:<22} {ok:>4} / {n:<4} {100 * ok / n if n else 100:5.1f} %")
    print(
        f"{'all':<22} {total[0]:>4} / {total[1]:<4} {100 * total[0] / total[1] if total[1] else 100:5.1f} %"
    )
    if args.cases:
        for c in changed:
            print(f"  {c['perturbation']:<20} {c['log']:<40} {c['base']}  ->  {c['perturbed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
