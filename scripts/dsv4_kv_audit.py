"""Cross-check vramctl's DeepSeek-V4 KV pool (vramctl/core/dsv4_cache.py) against vLLM's own code.

Builds every cache spec a DeepSeek-V4 model registers, with vLLM's classes and the arguments
vllm/models/deepseek_v4/attention.py, compressor.py and vllm/v1/attention/backends/mla/sparse_swa.py pass them
(fp8_ds_mla layout, fp8 indexer), in the model's registration order, then runs vLLM's
`get_kv_cache_groups` (the block-outermost packing), `_get_kv_cache_bytes_per_block` and each group's
`max_memory_usage_bytes`, and writes what they return to tests/fixtures/dsv4/kv_audit.json.

Needs a Python with vLLM (0.32.0) and torch; no GPU:

    /root/.cache/vramctl/engine-venv/bin/python scripts/dsv4_kv_audit.py [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace as NS

import torch
import vllm
from vllm.v1.core import kv_cache_utils as U
from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec
from vllm.v1.kv_cache_layout import KVCacheLayout

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "dsv4" / "kv_audit.json"
FLASH = [1, 1] + [4, 128] * 20 + [4]
TRANSFORMERS_DEFAULT = [128, 128, 128] + [4, 128] * 20
CASES = [
    ("flash", FLASH, 256, [(1048576, 16384), (65536, 16384), (100, 16384), (8192, 4096)]),
    ("flash-block512", FLASH, 512, [(1048576, 16384)]),
    ("transformers-default", TRANSFORMERS_DEFAULT, 256, [(1048576, 16384), (4096, 8192)]),
]


def specs(ratios: list[int], block: int) -> dict[str, object]:
    head, index_head, window = 512, 128, 128
    out: dict[str, object] = {}

    def state(ratio: int, head_dim: int) -> SlidingWindowMLASpec:
        coff = 1 + (ratio == 4)  # compressor.py:159
        return SlidingWindowMLASpec(
            block_size=4 if ratio == 4 else 8, num_kv_heads=1, max_tp_shards=1, head_size=2 * coff * head_dim,
            dtype=torch.float32, sliding_window=coff * ratio, alignment=576,
        )

    for i, ratio in enumerate(ratios):
        p = f"model.layers.{i}.attn"
        if ratio == 4:  # attention.py:1008-1027 (fp8 indexer: 128 + 128 // 128 * 4 bytes)
            out[f"{p}.indexer.k_cache"] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, max_tp_shards=1, head_size=index_head + 4, dtype=torch.uint8,
                tokens_per_state=4, alignment=576,
            )
            out[f"{p}.indexer.compressor.state_cache"] = state(4, index_head)
        out[f"{p}.swa_cache"] = SlidingWindowMLASpec(  # sparse_swa.py:117-135
            block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=head, dtype=torch.uint8,
            sliding_window=window, cache_dtype_str="fp8_ds_mla", state_content_bytes=584, alignment=576,
            model_version="deepseek_v4",
        )
        if ratio > 1:  # attention.py:856-879
            out[p] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, max_tp_shards=1, head_size=head, dtype=torch.uint8,
                tokens_per_state=ratio, cache_dtype_str="fp8_ds_mla", alignment=576, model_version="deepseek_v4",
                state_content_bytes=584,
            )
            out[f"{p}.compressor.state_cache"] = state(ratio, head)
    return out


def audit(ratios: list[int], block: int, lengths: list[tuple[int, int]]) -> dict[str, object]:
    layout = KVCacheLayout.BLHNC  # the indexer backend's layouts (indexer.py:351)
    spec = specs(ratios, block)

    def config(length: int, in_flight: int) -> NS:
        return NS(
            cache_config=NS(get_resolved_kv_cache_layout=lambda: layout, block_size=block),
            scheduler_config=NS(disable_hybrid_kv_cache_manager=False),
            attention_config=NS(hisparse_config=None), speculative_config=None,
            model_config=NS(max_model_len=length), parallel_config=NS(decode_context_parallel_size=1),
            max_in_flight_tokens=in_flight,
        )

    groups = U.get_kv_cache_groups(config(*lengths[0]), spec)
    rows = []
    for length, in_flight in lengths:
        cfg = config(length, in_flight)
        rows.append({
            "max_model_len": length,
            "in_flight_tokens": in_flight,
            "group_blocks": [g.kv_cache_spec.max_memory_usage_pages(cfg) for g in groups],
            "request_bytes": U._max_memory_usage_bytes_from_groups(cfg, groups),
        })
    return {
        "compress_ratios": ratios,
        "block_size": block,
        "pages": {name: s.page_size_bytes for name, s in spec.items() if name.startswith("model.layers.2.")
                  or name.startswith("model.layers.3.")},
        "groups": [
            {"layers": len(g.layer_names), "block_size": g.kv_cache_spec.block_size,
             "page_bytes": g.kv_cache_spec.page_size_bytes, "first": g.layer_names[0]}
            for g in groups
        ],
        "bytes_per_block": U._get_kv_cache_bytes_per_block(groups, layout),
        "requests": rows,
    }


def main() -> int:
    data = {
        "vllm": vllm.__version__,
        "cases": {name: audit(r, b, lengths) for name, r, b, lengths in CASES},
    }
    text = json.dumps(data, indent=1) + "\n"
    if "--check" in sys.argv:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
