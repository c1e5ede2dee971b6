"""explain-oom on a corpus of issue titles: is a memory failure told in a title still read as one?

    python scripts/eval_titles.py TITLES.yaml [--cases] [--json]

TITLES.yaml holds `titles:` entries with `url`, `title`, `label` (`memory`: the thread reports a GPU or
host memory failure; `not-memory`: any other failure, a hang, slow performance, a question or a feature
request that merely mentions memory) and `half` (`dev` or `test`; a split by a hash of the URL). The
titles themselves are third-party text kept outside the repository.

Each title is diagnosed twice by the library call behind the command (`vramctl.diagnose.diagnose_text`,
from whatever `vramctl` is on the path): as a one-line log, and as the title on top of a typical start-up
INFO line (`STARTUP_LINE`), to check that a title is still read above a log that holds no failure.

Reported per half and per shape:
- recall: memory titles answered as a memory failure (any cause other than `not-oom` / `no-failure`);
- false alarms: not-memory titles answered as a memory failure.
`--cases` lists the dev half's titles with their answers (never the test half's: rules are written from
the dev half only).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

NOT_MEMORY_ANSWERS = frozenset({"not-oom", "no-failure"})
STARTUP_LINE = (
    "INFO 03-12 10:00:01 [api_server.py:1024] vLLM API server version 0.8.5, "
    "args: model='Qwen/Qwen2.5-7B-Instruct', tensor_parallel_size=1"
)
HALVES = ("dev", "test")


@dataclass(frozen=True)
class Title:
    url: str
    title: str
    memory: bool
    half: str


def load_titles(path: Path) -> list[Title]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw = data.get("titles") if isinstance(data, Mapping) else None
    if not isinstance(raw, list):
        raise SystemExit(f"{path}: expected a `titles:` list")
    titles = []
    for item in raw:
        label = str(item["label"])
        if label not in ("memory", "not-memory"):
            raise SystemExit(f"{path}: {item['url']}: label must be memory or not-memory, not {label!r}")
        titles.append(Title(str(item["url"]), str(item["title"]), label == "memory", str(item["half"])))
    return titles


def answer(text: str) -> tuple[str, str]:
    from vramctl.diagnose import diagnose_text

    try:
        diagnosis = diagnose_text(text)
    except Exception as exc:  # a crash is an answer too: reported, never hidden
        return "error", type(exc).__name__
    return diagnosis.cause, diagnosis.confidence


def shapes(title: str) -> dict[str, str]:
    return {"title": title + "\n", "title+startup": title + "\n" + STARTUP_LINE + "\n"}


def _share(right: int, total: int) -> dict[str, Any]:
    return {"right": right, "total": total, "share": round(right / total, 3) if total else None}


def score(titles: Sequence[Title]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    result: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for half in HALVES:
        mine = [t for t in titles if t.half == half]
        per_shape: dict[str, Any] = {}
        for shape in ("title", "title+startup"):
            hits = {t.url: answer(shapes(t.title)[shape]) for t in mine}
            memory = [t for t in mine if t.memory]
            other = [t for t in mine if not t.memory]
            per_shape[shape] = {
                "recall": _share(sum(hits[t.url][0] not in NOT_MEMORY_ANSWERS for t in memory), len(memory)),
                "false_alarms": _share(sum(hits[t.url][0] not in NOT_MEMORY_ANSWERS for t in other), len(other)),
            }
            if half == "dev" and shape == "title":
                rows = [
                    {"url": t.url, "label": "memory" if t.memory else "not-memory", "cause": hits[t.url][0],
                     "confidence": hits[t.url][1], "title": t.title}
                    for t in mine
                ]
        result[half] = per_shape
    return result, rows


def _pct(item: Mapping[str, Any]) -> str:
    share = item["share"]
    return "n/a" if share is None else f"{share * 100:.0f} % ({item['right']}/{item['total']})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("titles", type=Path)
    parser.add_argument("--cases", action="store_true", help="list the dev half's titles with their answers")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result, rows = score(load_titles(args.titles))
    if args.json:
        print(json.dumps({"halves": result, **({"dev_cases": rows} if args.cases else {})}, ensure_ascii=False))
        return 0
    for half in HALVES:
        for shape, item in result[half].items():
            print(f"{half:4} {shape:14} recall {_pct(item['recall']):18} false alarms {_pct(item['false_alarms'])}")
    if args.cases:
        for row in rows:
            miss = (row["label"] == "memory") == (row["cause"] in NOT_MEMORY_ANSWERS)
            mark = "MISS" if miss else "ok  "
            print(f"{mark} {row['label']:10} {row['cause']:34} {row['title']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
