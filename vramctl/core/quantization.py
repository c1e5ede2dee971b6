"""`--quantization`: what the engines do with the flag, given the checkpoint's own `quantization_config`.

vLLM (`ModelConfig._verify_quantization`, vllm/config/model.py; the same logic since 0.4 in
vllm/config.py): the checkpoint's `quantization_config.quant_method` is used when the flag is absent. A flag
naming another method stops the start-up with

    Quantization method specified in the model config (M) does not match the quantization method
    specified in the `quantization` argument (Q).

unless a method's `override_quantization_method` claims the checkpoint first (awq → awq_marlin, gptq →
gptq_marlin / marlin, awq / gptq MoE checkpoints → moe_wna16). With no `quantization_config`, two methods
quantise the 16-bit weights while loading them:

- `fp8`: `Fp8Config(is_checkpoint_fp8_serialized=False)` (vllm/model_executor/layers/quantization/fp8.py):
  every `LinearBase` and `FusedMoE` weight becomes float8_e4m3fn with a float32 scale; embeddings, the
  lm_head, norms and routers built with `quant_config=None` stay in the serving dtype. SGLang's
  `--quantization fp8` on an unquantised checkpoint is the same online FP8 (sglang/srt/layers/quantization/
  fp8.py, `is_checkpoint_fp8_serialized` False).
- `bitsandbytes`: vLLM's in-flight 4-bit NF4 (`BitsAndBytesModelLoader` without a pre-quantised checkpoint):
  4 bits per Linear weight plus a float32 absmax per 64 values.

Any other method needs a checkpoint quantised with it (vLLM looks for its config and fails at load).
The weight bytes then come from `vramctl.core.params.linear_bytes` for the resulting method.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from vramctl.core.errors import BadInputError
from vramctl.core.params import weight_bytes_from_spec
from vramctl.core.specs import ModelSpec
from vramctl.core.units import format_gib

ONLINE_METHODS: dict[str, tuple[int, int | None]] = {
    # method → (bits per weight, group size) as params.linear_bytes reads them
    "fp8": (8, None),
    "bitsandbytes": (4, 64),
}
"""Methods that quantise an unquantised checkpoint while it loads."""

_OVERRIDES: dict[str, frozenset[str]] = {
    # checkpoint method → flags that claim it (override_quantization_method of each)
    "awq": frozenset({"awq_marlin", "moe_wna16", "marlin"}),
    "gptq": frozenset({"gptq_marlin", "gptq_marlin_24", "marlin", "moe_wna16"}),
    "fp8": frozenset({"fbgemm_fp8", "ptpc_fp8"}),
    "modelopt": frozenset({"modelopt_fp4"}),
    # a MIXED_PRECISION checkpoint's quant_method is `modelopt`; ModelOptMixedPrecisionConfig claims it
    "modelopt_mixed": frozenset({"modelopt"}),
}


_METHOD_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
"""The shape of every engine method name (vLLM's QUANTIZATION_METHODS, SGLang's): a path, spaces, `-` are not."""


@dataclass(frozen=True)
class QuantizedModel:
    model: ModelSpec
    """The spec the engine serves: the checkpoint's, or with online quantisation applied."""
    note: str | None
    """What the flag did, with the weight bytes before and after; None when it changed nothing."""


def apply_quantization_flag(model: ModelSpec, flag: str | None, *, engine: str = "vllm") -> QuantizedModel:
    """The model as the engine serves it with `--quantization flag` (see the module docstring)."""
    if flag is None or not flag.strip():
        return QuantizedModel(model, None)
    wanted = flag.strip().lower()  # vLLM's names: fp8, awq_marlin, compressed-tensors, ...
    if not _METHOD_NAME.fullmatch(wanted):
        raise BadInputError(
            f"--quantization {flag!r}: not a quantization method name (the engines' are like fp8, awq_marlin, "
            "gptq, compressed-tensors, bitsandbytes)"
        )
    engines = {"vllm": "vLLM", "sglang": "SGLang", "both": "vLLM and SGLang"}.get(engine, engine)
    own = model.quantization.lower() if model.quantization else None
    if own is not None:
        if wanted == own or wanted in _OVERRIDES.get(own, frozenset()):
            return QuantizedModel(model, None)
        raise BadInputError(
            f"--quantization {flag}: the checkpoint of {model.name} is quantised with {own}, and {engines} "
            f"stop at start-up (Quantization method specified in the model config ({own}) does not match the "
            f"quantization method specified in the `quantization` argument ({wanted})); drop --quantization "
            f"or pass --quantization {own}"
        )
    if wanted not in ONLINE_METHODS:
        online = ", ".join(sorted(ONLINE_METHODS))
        raise BadInputError(
            f"--quantization {flag}: {model.name} is an unquantised checkpoint (no quantization_config), and "
            f"{wanted} needs a checkpoint quantised with it; the methods that quantise while loading are {online}"
        )
    if wanted == "bitsandbytes" and engine in ("sglang", "both"):
        raise BadInputError(
            f"--quantization {flag}: SGLang loads bitsandbytes checkpoints only; for in-flight quantisation "
            "of an unquantised checkpoint use --quantization fp8"
        )
    bits, group = ONLINE_METHODS[wanted]
    staged = replace(model, quantization=wanted, quant_bits=bits, quant_group_size=group)
    # The layout formula's quantised / unquantised ratio applied to the checkpoint's own total, so what the formula
    # does not see (safetensors extras, a hybrid's Mamba / Gated DeltaNet layers) shrinks in proportion rather than
    # being replaced by the dense formula's size.
    dense_before, dense_after = weight_bytes_from_spec(model), weight_bytes_from_spec(staged)
    exact = model.weight_bytes if model.weight_bytes and dense_before else dense_before
    quantized = replace(
        staged, weight_bytes=round(exact * dense_after / dense_before) if dense_before else dense_after
    )
    before, after = model.weight_bytes, quantized.weight_bytes
    note = (
        f"--quantization {wanted}: the {model.torch_dtype} checkpoint is quantised while it loads "
        f"(Linear and expert weights to {bits} bits; embeddings, lm_head, norms and routers stay "
        f"{model.torch_dtype}): weights {format_gib(before)} → {format_gib(after)}"
    )
    return QuantizedModel(quantized, note)
