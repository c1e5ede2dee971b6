"""Name normalisation for models and GPUs (aliases are case- and separator-insensitive)."""

from __future__ import annotations

import re

_SEP = re.compile(r"[\s_]+")


def normalize(name: str) -> str:
    """Case-insensitive key: `NVIDIA H100 80GB HBM3` → `nvidia-h100-80gb-hbm3`, `Llama_3_8B` → `llama-3-8b`."""
    return _SEP.sub("-", name.strip().lower())


_QUANT_TAGS = (
    "awq",
    "gptq",
    "fp8",
    "nvfp4",
    "mxfp4",
    "fp4",
    "int4",
    "int8",
    "w4a16",
    "w8a8",
    "w4a8",
    "bnb",
    "4bit",
    "8bit",
    "gguf",
    "exl2",
    "nf4",
)
_TOKEN = re.compile(r"[a-z0-9.]+")
_SIZE = re.compile(r"^(?:\d+x)?\d+(?:\.\d+)?[bm]$|^a\d+(?:\.\d+)?b$|^e\d+$")


def quant_tags(name: str) -> frozenset[str]:
    """Quantisation words in a model name (`Qwen2.5-72B-Instruct-AWQ` → {awq}); empty for a 16-bit name."""
    tokens = _TOKEN.findall(name.lower().replace("_", "-"))
    return frozenset(t for t in tokens if t in _QUANT_TAGS)


def size_tags(name: str) -> frozenset[str]:
    """Parameter-count words in a model name (`Qwen3-30B-A3B` → {30b, a3b}; `8x7b` → {8x7b})."""
    return frozenset(t for t in _TOKEN.findall(name.lower().rsplit("/", 1)[-1]) if _SIZE.match(t))


def described_suggestion(asked: str, candidate: str) -> str:
    """`candidate`, saying so when it is another quantisation or another size than `asked` — a "did you mean"
    must never silently offer the 16-bit 72B (135 GiB of weights) for the AWQ one (39 GiB)."""
    notes: list[str] = []
    want, have = quant_tags(asked), quant_tags(candidate)
    if want != have:
        notes.append(
            f"{'/'.join(sorted(have)) or '16-bit'}, not {'/'.join(sorted(want)) or '16-bit'}: another quantisation"
        )
    want_size, have_size = size_tags(asked), size_tags(candidate)
    if want_size and have_size and want_size != have_size:
        notes.append(f"{'/'.join(sorted(have_size))}, not {'/'.join(sorted(want_size))}: another size")
    return f"{candidate} ({'; '.join(notes)})" if notes else candidate
