"""JSON output: one object per command, sizes as int bytes, stable keys (docs/json.md)."""

from __future__ import annotations

import json
from typing import Any


def dumps(obj: Any) -> str:
    """Serialise a result dict: UTF-8, two-space indent, no NaN (a NaN is a bug, not a value)."""
    return json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False)
