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


def test_turing_on_0_8_to_0_10_is_planned_with_v0_rules() -> None:
    from vramctl.core.engines.vllm import v0_fallback
    from vramctl.core.plan import plan
    from vramctl.core.settings import ServeSettings
    from vramctl.registry import load_model

    assert v0_fallback("0.9.2", "7.5") and v0_fallback("0.10.1", "7.5")
    assert (
        not v0_fallback("0.11.0", "7.5")
        and not v0_fallback("0.9.2", "8.0")
        and not v0_fallback("0.7.3", "7.5")
    )
    assert not v0_fallback("0.9.2", "gfx942", vendor="amd")
    settings = ServeSettings(engine_version="0.9.2", max_model_len=4096, dtype="float16")
    result = plan(load_model("qwen2.5-7b"), load_gpu("t4"), settings)
    assert result.engine_version == "0.9.2" and result.settings.version == "0.9.2"
    assert "runs its V0 engine" in result.explanations[0]
    # V0 defaults: 256 sequences, batched tokens = max(max_model_len, 2048) without chunked prefill
    assert (result.settings.max_num_batched_tokens, result.settings.max_num_seqs) == (4096, 256)
    v1 = plan(load_model("qwen2.5-7b"), load_gpu("l4"), settings)
    assert "runs its V0 engine" not in " ".join(v1.explanations)
