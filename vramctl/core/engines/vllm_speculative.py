"""vLLM speculative decoding (`--speculative-config`): what it changes in the memory plan (docs/hybrid.md).

Sources (vLLM 0.32.0 unless a version is named; the older files read from the released wheels):

- methods: `MTPModelTypes` / `EagleModelTypes` / `SpeculativeMethod`, vllm/config/speculative.py:38-83. An MTP
  method runs the checkpoint's own multi-token-prediction layers (`mtp.*`); `eagle` / `eagle3` / `draft_model`
  load a separate draft model; `ngram` (and `suffix`) draft from the prompt, no weights.
- MTP weights: `Qwen3_5MultiTokenPredictor` (vllm/model_executor/models/qwen3_5_mtp.py:69-140) builds
  `mtp_num_hidden_layers` (default 1) `Qwen3_5DecoderLayer(layer_type="full_attention")`, an `fc` of
  2 × hidden → hidden (ColumnParallelLinear) and three RMSNorms (`norm`, `pre_fc_norm_hidden`,
  `pre_fc_norm_embedding`); its embedding and lm_head are the target's (`_maybe_share_embeddings`,
  `_maybe_share_lm_head`, vllm/v1/spec_decode/llm_base_proposer.py:1398-1399). DeepSeek's
  `DeepSeekMultiTokenPredictorLayer` (deepseek_mtp.py:76-144) is the same shape (enorm, hnorm, eh_proj, one
  decoder layer, shared_head norm). vramctl charges, per MTP layer, one full-attention decoder layer of the target
  (its last layer's MLP / MoE kind) + the 2h × h projection + three norms.
- the drafter's KV: the runner collects every attention layer of the static forward context, the drafter's too
  (`get_kv_cache_spec`, vllm/v1/worker/gpu_model_runner.py), so each MTP layer is one more full-attention layer
  of the target's shape in the KV groups (Qwen3.6-27B: 17 full-attention + 48 Gated DeltaNet layers, groups of 17).
- a hybrid's state: `MambaBase.get_kv_cache_spec` sets `num_speculative_blocks = num_speculative_tokens`
  (`[0.20.2] vllm/model_executor/layers/mamba/abstract.py:54-58`, 0.32.0 :79-83); `MambaSpec.max_memory_usage_bytes`
  counts them from 0.15 (`[0.15.0] vllm/v1/kv_cache_interface.py:298-300`: none 1 + n, align 2 + n; 0.10.2 - 0.14
  count one page, or cdiv(max_model_len, mamba block)); the conv state gains n columns (`conv_kernel - 1 + num_spec`,
  `MambaStateShapeCalculator`, `[0.20.2] mamba_utils.py:171-180`, 0.32.0 :204-213) for the classes that pass
  `num_spec`: Qwen3-Next from 0.10.2, Qwen3.5 from 0.17 (every release planned), Kimi-Linear from 0.15, every Mamba2
  layer from 0.17 (`MambaMixer2.get_state_shape` passes `self.num_spec`, `[0.17.0] / [0.20.2]
  vllm/model_executor/layers/mamba/mamba_mixer2.py`; not in 0.12.0 / 0.14.0; 0.15 - 0.16 not read); Mamba1 (Jamba)
  and short convolution (LFM2) never.

Not modelled (said in the plan's notes): a draft model's weights and KV (`eagle`, `eagle3`, `draft_model`; its
layers join the pool only when their page matches), the CUDA-graph capture sizes scaled by 1 + n
(`VllmConfig._set_cudagraph_sizes`, vllm/config/vllm.py:2340-2440), the rejection sampler's and the drafter's
activation buffers in the profile run, and `max_num_scheduled_tokens` (vllm/config/vllm.py:2254-2290).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.errors import BadInputError
from vramctl.core.specs import ModelSpec

MTP_METHODS = frozenset(
    {
        "mtp", "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
        "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
        "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
        "bailing_hybrid_mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp",
    }
)
"""`MTPModelTypes`, vllm/config/speculative.py:38-60 (v0.32.0)."""

DRAFT_MODEL_METHODS = frozenset({"eagle", "eagle3", "draft_model", "medusa", "mlp_speculator", "dflash", "dspark"})
"""Methods that load a separate draft model (its weights and KV are not modelled)."""

@dataclass(frozen=True)
class Speculative:
    """What `--speculative-config` changes, resolved for one model and version."""

    method: str
    num_speculative_tokens: int
    drafter_kv_layers: int
    """Full-attention layers the drafter adds to the KV groups (MTP: the checkpoint's MTP layers)."""
    state_blocks: int
    """Extra state blocks per request and state group (`num_speculative_blocks`, counted from vLLM 0.15)."""
    conv_columns: int
    """Extra columns of every conv state."""

    @property
    def is_mtp(self) -> bool:
        return self.method in MTP_METHODS


def resolve(model: ModelSpec, version: str, method: str | None, num_tokens: int) -> Speculative | None:
    """None without speculative decoding (no config, or num_speculative_tokens 0: vLLM then drafts nothing and its
    layers' `num_speculative_blocks` are 0)."""
    if not num_tokens:
        return None
    name = (method or ("mtp" if model.num_mtp_layers else "draft_model")).lower()
    rules = rules_for(version)
    drafter = 0
    if name in MTP_METHODS:
        # Qwen3-Next / Qwen3.5's MTP modules default to one layer (getattr(config, ..., 1), qwen3_next_mtp.py:63,
        # qwen3_5_mtp.py); other MTP models need the count in their config (n_predict, speculative.py:686-731)
        drafter = model.num_mtp_layers or (1 if model.architecture.startswith(("Qwen3Next", "Qwen3_5")) else 0)
        if not drafter:
            raise BadInputError(
                f"--speculative-config method {name!r}: {model.name} has no multi-token-prediction layers in its "
                "config (num_nextn_predict_layers / mtp_num_hidden_layers); use a draft model or ngram"
            )
    st = model.state_space
    # MambaSpec counts num_speculative_blocks from 0.15 (the `mode` rule)
    state_blocks = num_tokens if st is not None and rules.mamba_state_blocks == "mode" else 0
    conv = num_tokens if st is not None and st.kind in rules.speculative_conv_kinds else 0
    return Speculative(name, num_tokens, drafter, state_blocks, conv)


def notes(spec: Speculative, model: ModelSpec, mtp_weight_bytes: int) -> list[str]:
    """The plan's lines on speculative decoding."""
    out = [
        f"Speculative decoding ({spec.method}, {spec.num_speculative_tokens} draft token(s)): "
        + (
            f"{spec.drafter_kv_layers} MTP layer(s) of the checkpoint load ({mtp_weight_bytes / 2**30:.2f} GiB per "
            "rank: a full-attention decoder layer, the 2h x h projection and three norms; embedding and lm_head "
            f"shared) and add {spec.drafter_kv_layers} full-attention layer(s) to the KV groups"
            if spec.is_mtp
            else "no MTP layers"
        )
        + "."
    ]
    if model.state_space is not None:
        out.append(
            f"Hybrid state with speculative decoding: + {spec.state_blocks} state block(s) per request and state "
            f"group (num_speculative_blocks) and + {spec.conv_columns} conv-state column(s) per layer (the mamba page, "
            "and with it the attention block, can grow)."
        )
    if not spec.is_mtp and spec.method not in ("ngram", "ngram_gpu", "suffix"):
        out.append(
            f"The {spec.method} draft model's weights and KV are not modelled (only the target's changes are)."
        )
    out.append(
        "Not modelled: CUDA-graph sizes scaled by 1 + num_speculative_tokens, the rejection sampler's and the "
        "drafter's activation buffers."
    )
    return out
