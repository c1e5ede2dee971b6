"""JSON output: one object per command, sizes as int bytes, stable keys (docs/json.md)."""

from __future__ import annotations

import json
import sys
from typing import Any


def dumps(obj: Any) -> str:
    """Serialise a result dict: UTF-8, two-space indent, no NaN (a NaN is a bug, not a value). For a stdout that
    cannot encode UTF-8 (LC_ALL=POSIX, PYTHONIOENCODING=ascii) non-ASCII text is written as \\u escapes: the same JSON."""
    return json.dumps(obj, indent=2, ensure_ascii=not _stdout_is_utf(), allow_nan=False)


def _stdout_is_utf() -> bool:
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    return encoding.lower().replace("-", "").replace("_", "").startswith("utf")
