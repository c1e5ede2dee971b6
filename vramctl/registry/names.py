"""Name normalisation for models and GPUs (aliases are case- and separator-insensitive)."""

from __future__ import annotations

import re

_SEP = re.compile(r"[\s_]+")


def normalize(name: str) -> str:
    """Case-insensitive key: `NVIDIA H100 80GB HBM3` → `nvidia-h100-80gb-hbm3`, `Llama_3_8B` → `llama-3-8b`."""
    return _SEP.sub("-", name.strip().lower())
