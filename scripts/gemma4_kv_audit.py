"""Cross-check vramctl's Gemma-4 KV pool (vramctl/core/gemma4_cache.py) against vLLM's own code.

Builds the cache spec of every Gemma-4 layer that owns KV with vLLM's classes and the arguments
vllm/model_executor/models/gemma4.py passes `Attention` (sliding: SlidingWindowSpec, full: FullAttentionSpec;
KV-shared layers none), resolves the KV layout from the FlashAttention and Triton backends' declarations
(`get_supported_kv_cache_layouts`, `resolve_kv_cache_layout`), runs `get_kv_cache_groups`,
`_get_kv_cache_bytes_per_block` and `_max_memory_usage_bytes_from_groups`, and writes what they return to
tests/fixtures/gemma4/kv_audit.json.

Needs a Python with vLLM (0.32.0) and torch; no GPU:

    /root/.cache/vramctl/engine-venv/bin/python scripts/gemma4_kv_audit.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import torch
import vllm
from vllm.v1.attention.backends import utils as AU
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
from vllm.v1.core import kv_cache_utils as U
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gemma4" / "kv_audit.json"
G12 = (["sliding_attention"] * 5 + ["full_attention"]) * 8
E2B = (["sliding_attention"] * 4 + ["full_attention"]) * 7
# name, layer types, (sliding heads, hd), (full heads, hd), window, kv-shared layers, tp, block, dtype, lengths
CASES = [
    ("gemma-4-12B", G12, (8, 256), (1, 512), 1024, 0, 1, 16, torch.bfloat16, [(131072, 8192), (4096, 2048)]),
    ("gemma-4-12B-tp2", G12, (8, 256), (1, 512), 1024, 0, 2, 16, torch.bfloat16, [(131072, 8192)]),
    ("gemma-4-12B-tp8", G12, (8, 256), (1, 512), 1024, 0, 8, 16, torch.bfloat16, [(131072, 8192)]),
    ("gemma-4-12B-fp8", G12, (8, 256), (1, 512), 1024, 0, 1, 16, torch.float8_e4m3fn, [(131072, 8192)]),
    ("e2b-shape", E2B, (1, 256), (1, 512), 512, 20, 1, 16, torch.bfloat16, [(131072, 8192)]),
]


def specs(types: list[str], sw: tuple[int, int], full: tuple[int, int], window: int, shared: int, tp: int,
          block: int, dtype: torch.dtype) -> dict[str, object]:
    out: dict[str, object] = {}
    for i, kind in enumerate(types[: len(types) - shared]):
        heads, hd = sw if kind == "sliding_attention" else full
        kv = max(1, heads // tp)
        name = f"model.language_model.layers.{i}.self_attn.attn"
        if kind == "sliding_attention":
            out[name] = SlidingWindowSpec(block_size=block, num_kv_heads=kv, head_size=hd, dtype=dtype,
                                          sliding_window=window)
        else:
            out[name] = FullAttentionSpec(block_size=block, num_kv_heads=kv, head_size=hd, dtype=dtype)
    return out


def audit(types, sw, full, window, shared, tp, block, dtype, lengths) -> dict[str, object]:
    spec = specs(types, sw, full, window, shared, tp, block, dtype)
    supported = AU.get_supported_kv_cache_layouts([FlashAttentionBackend, TritonAttentionBackend])
    cache_config = NS(kv_cache_layout=None, block_size=block)
    cache_config.get_resolved_kv_cache_layout = lambda: AU._layout_from_name(cache_config.kv_cache_layout)
    vcfg = NS(cache_config=cache_config, kv_transfer_config=None)
    try:
        layout = AU.resolve_kv_cache_layout(vcfg, [[m.name for m in supported]], spec.values())
    except Exception as exc:
        return {"error": f"layout: {exc!r}"}

    def config(length: int, in_flight: int) -> NS:
        return NS(
            cache_config=cache_config,
            scheduler_config=NS(disable_hybrid_kv_cache_manager=False),
            attention_config=NS(hisparse_config=None), speculative_config=None,
            model_config=NS(max_model_len=length), parallel_config=NS(decode_context_parallel_size=1),
            max_in_flight_tokens=in_flight,
        )

    groups = U.get_kv_cache_groups(config(*lengths[0]), dict(spec))
    rows = []
    for length, in_flight in lengths:
        cfg = config(length, in_flight)
        rows.append({
            "max_model_len": length,
            "in_flight_tokens": in_flight,
            "request_bytes": U._max_memory_usage_bytes_from_groups(cfg, groups),
        })
    return {
        "tp": tp, "block_size": block, "dtype": str(dtype), "layout": layout.name,
        "pages": sorted({s.page_size_bytes for s in spec.values()}),
        "groups": [
            {"layers": [int(n.split(".")[3]) for n in g.layer_names], "block_size": g.kv_cache_spec.block_size,
             "page_bytes": g.kv_cache_spec.page_size_bytes, "kind": type(g.kv_cache_spec).__name__}
            for g in groups
        ],
        "bytes_per_block": U._get_kv_cache_bytes_per_block(groups, layout),
        "requests": rows,
    }


def main() -> int:
    data = {"vllm": vllm.__version__, "cases": {c[0]: audit(*c[1:]) for c in CASES}}
    text = json.dumps(data, indent=1) + "\n"
    if "--check" in sys.argv:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
