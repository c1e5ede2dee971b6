"""V0's long-context default: chunked prefill (512 batched tokens) only above 32768 tokens, and not with LoRA or a
sliding window (vllm/engine/arg_utils.py `_set_default_args_v0`: `use_long_context = max_model_len > 32768`)."""

from __future__ import annotations

from vramctl.core.engines.vllm import default_scheduler_limits
from vramctl.registry import load_gpu


def test_v0_threshold_is_strictly_above_32k_and_lora_is_exempt() -> None:
    gpu = load_gpu("a100-80gb")
    assert default_scheduler_limits(gpu, "0.6.6", max_model_len=32768) == (32768, 256)
    assert default_scheduler_limits(gpu, "0.6.6", max_model_len=32769) == (512, 256)
    assert default_scheduler_limits(gpu, "0.6.6", max_model_len=65536, enable_lora=True) == (65536, 256)
    assert default_scheduler_limits(gpu, "0.6.6", max_model_len=65536, sliding_window=True) == (65536, 256)
    assert default_scheduler_limits(gpu, "0.6.6", max_model_len=65536, enable_chunked_prefill=True) == (
        2048,
        256,
    )
