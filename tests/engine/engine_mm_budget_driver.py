"""Run by the engine's interpreter: vLLM's own encoder budget and dummy item count for each case on stdin.

Input: a JSON list of {id, tokens, max_num_batched_tokens, max_model_len, max_num_seqs, limit, chunked_prefill}.
Output: one JSON line per case, {id, budget, items}, from `compute_mm_encoder_budget`
(vllm/v1/core/encoder_cache_manager.py) and `MultiModalBudget._get_max_items` / `get_encoder_budget`
(vllm/multimodal/encoder_budget.py), called on a budget object holding only the fields they read, so no model,
processor or weights are needed.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from vllm.multimodal.encoder_budget import MultiModalBudget
from vllm.v1.core.encoder_cache_manager import compute_mm_encoder_budget


def main() -> int:
    for case in json.load(sys.stdin):
        tokens = case["max_num_batched_tokens"]
        scheduler = SimpleNamespace(
            max_num_encoder_input_tokens=tokens,
            encoder_cache_size=tokens,
            max_num_batched_tokens=tokens,
            disable_chunked_mm_input=False,
            enable_chunked_prefill=case["chunked_prefill"],
        )
        compute, cache = compute_mm_encoder_budget(scheduler, {"image": case["tokens"]})
        budget = object.__new__(MultiModalBudget)
        budget.encoder_compute_budget, budget.encoder_cache_size = compute, cache
        budget.mm_limits = {"image": case["limit"]}
        budget.max_model_len = case["max_model_len"]
        budget.max_num_reqs = case["max_num_seqs"]
        budget.scheduler_config = scheduler
        _, items = budget._get_max_items("image", case["tokens"])
        print(json.dumps({"id": case["id"], "budget": budget.get_encoder_budget(), "items": items}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
