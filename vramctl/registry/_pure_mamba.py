"""Attention-free (pure Mamba) configs: Mamba1 (`mamba`, `falcon_mamba`) and Mamba2 (`mamba2`) into a ModelSpec.

Every decoder layer is a Mamba mixer and a norm (no attention, no MLP), so the spec's `layer_types` are all MAMBA
and `state_space` names the mixer's state (docs/hybrid.md, "Pure Mamba"). The configs carry no attention fields;
`pure_mamba_names` fills the ones the rest of the registry reads (one "attention head" of `hidden_size`, the mixer
width as `intermediate_size`) so that the activation estimate has a width to work with; no KV is planned from them.

Sources (vLLM 0.32.0 and transformers 5.19):
- vLLM `vllm/model_executor/models/mamba.py` (`MambaForCausalLM`, also serving `FalconMambaForCausalLM` per
  registry.py) `get_mamba_state_shape_from_config`: `MambaStateShapeCalculator.mamba1_state_shape(tp,
  intermediate_size, state_size, conv_kernel)`; `mamba2.py` `Mamba2ForCausalLM.get_mamba_state_shape_from_config`:
  `mamba2_state_shape(intermediate_size = expand × hidden_size, tp, n_groups, num_heads, head_dim, state_size,
  conv_kernel)`.
- Parameters: transformers `MambaMixer` / `FalconMambaMixer` / `Mamba2Mixer` (modeling_mamba.py, modeling_falcon_mamba.py,
  modeling_mamba2.py): the formulas below equal the models built on the meta device from the default configs
  (tests/fixtures/arch_audit: 159,308,544 for Mamba / FalconMamba, 7,285,403,648 for Mamba2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.specs import MAMBA, ModelSpec, StateSpaceSpec
from vramctl.registry._fields import get_bool, get_int, get_opt_int

PURE_MAMBA_TYPES = frozenset({"mamba", "falcon_mamba", "mamba2"})
"""model_type values whose every layer is a Mamba mixer (vLLM marks their classes `IsAttentionFree`)."""

_TIED_DEFAULT = {"mamba": True, "falcon_mamba": True, "mamba2": False}
"""`tie_word_embeddings` when absent: MambaConfig / FalconMambaConfig True, Mamba2Config False (transformers 5.19)."""


def _inner(config: Mapping[str, Any], where: str) -> int:
    hidden = get_int(config, "hidden_size", where)
    if config.get("model_type") == "mamba2":
        # Mamba2Config has no intermediate_size: vLLM and transformers use expand × hidden_size
        return get_int(config, "expand", where, default=2) * hidden
    return get_opt_int(config, "intermediate_size", where) or get_int(config, "expand", where, default=2) * hidden


def pure_mamba_names(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The attention fields a pure Mamba config lacks, filled for the generic reader (see the module docstring)."""
    kind = config.get("model_type")
    if not isinstance(kind, str) or kind not in PURE_MAMBA_TYPES:
        return config
    out = dict(config)
    out.setdefault("num_attention_heads", 1)
    out.setdefault("num_key_value_heads", 1)
    out["intermediate_size"] = _inner(config, where)
    out.setdefault("tie_word_embeddings", _TIED_DEFAULT[kind])
    return out


def pure_mamba_pattern(
    config: Mapping[str, Any], model_type: str, layers: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec]:
    """(every layer MAMBA, the mixer's state) of a `PURE_MAMBA_TYPES` config."""
    inner = _inner(config, where)
    kernel = get_int(config, "conv_kernel", where, default=4)
    if model_type == "mamba2":
        heads = get_int(config, "num_heads", where, default=128)
        head_dim = get_int(config, "head_dim", where, default=64)
        if heads * head_dim != inner:
            raise BadInputError(
                f"{where}: num_heads ({heads}) × head_dim ({head_dim}) must equal expand × hidden_size ({inner})"
            )
        state = StateSpaceSpec(
            kind="mamba2",
            num_heads=heads,
            head_dim=head_dim,
            state_size=get_int(config, "state_size", where, default=128),
            n_groups=get_int(config, "n_groups", where, default=8),
            conv_kernel=kernel,
            intermediate_size=inner,
            chunk_size=get_opt_int(config, "chunk_size", where),
        )
    else:
        state = StateSpaceSpec(
            kind="mamba1",
            num_heads=inner,
            head_dim=1,
            state_size=get_int(config, "state_size", where, default=16),
            n_groups=0,
            conv_kernel=kernel,
            intermediate_size=inner,
        )
    return (MAMBA,) * layers, state


def pure_mamba_param_count(spec: ModelSpec, config: Mapping[str, Any], where: str) -> int:
    """Parameters of a pure Mamba model: per layer a norm (hidden) and the mixer; a final norm; the embedding and an
    untied lm_head.

    Mamba1 (`MambaMixer`; FalconMamba's mixer adds weightless RMS norms only): in_proj (hidden → 2 × inner, bias with
    `use_bias`), depthwise conv1d (inner × kernel, bias with `use_conv_bias`), x_proj (inner → dt_rank + 2 × state),
    dt_proj (dt_rank → inner, with bias), A_log (inner × state), D (inner), out_proj (inner → hidden, bias with
    `use_bias`); `time_step_rank` `auto` = ceil(hidden / 16).
    Mamba2 (`Mamba2Mixer`): in_proj (hidden → 2 × inner + 2 × groups × state + heads, bias with `use_bias`), conv1d
    over inner + 2 × groups × state channels (bias with `use_conv_bias`), dt_bias, A_log, D (heads each), the gated
    RMSNorm (inner), out_proj (inner → hidden, bias with `use_bias`).
    """
    st = spec.state_space
    assert st is not None
    h, inner, n = spec.hidden_size, st.intermediate_size, st.state_size
    bias = get_bool(config, "use_bias", where)
    conv_bias = get_bool(config, "use_conv_bias", where, default=True)
    if st.kind == "mamba2":
        conv_dim = inner + 2 * st.n_groups * n
        in_width = 2 * inner + 2 * st.n_groups * n + st.num_heads
        mixer = h * in_width + (in_width if bias else 0)
        mixer += conv_dim * st.conv_kernel + (conv_dim if conv_bias else 0)
        mixer += 3 * st.num_heads + inner + inner * h + (h if bias else 0)
    else:
        raw = config.get("time_step_rank", "auto")
        dt_rank = -(-h // 16) if raw in ("auto", None) else get_int(config, "time_step_rank", where)
        mixer = h * 2 * inner + (2 * inner if bias else 0)
        mixer += inner * st.conv_kernel + (inner if conv_bias else 0)
        mixer += inner * (dt_rank + 2 * n) + dt_rank * inner + inner + inner * n + inner
        mixer += inner * h + (h if bias else 0)
    embed = spec.vocab_size * h
    return spec.num_hidden_layers * (h + mixer) + h + embed + (0 if spec.tie_word_embeddings else embed)
