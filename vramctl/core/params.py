"""Exact parameter counts and checkpoint bytes from a ModelSpec (pure arithmetic, no I/O).

The count follows the tensors of the Hugging Face implementation of each architecture, so it
reproduces the safetensors totals the Hub shows: Llama-3-8B = 8,030,261,248.

Per decoder layer:
- attention, GQA/MHA: q (hidden × heads·head_dim), k and v (hidden × kv_heads·head_dim),
  o (heads·head_dim × hidden); biases on q/k/v (Qwen2, gpt-oss) and o (gpt-oss); q/k RMSNorm
  of head_dim each (Qwen3, Gemma-3); one sink logit per head (gpt-oss);
- attention, MLA (DeepSeek-V2/V3, Kimi-K2): q_a (hidden × q_lora_rank) + its norm + q_b
  (q_lora_rank × heads·(nope+rope)), or one q projection when q_lora_rank is None; kv_a
  (hidden × (kv_lora_rank + rope)) + its norm (kv_lora_rank); kv_b (kv_lora_rank × heads·(nope+v));
  o (heads·v × hidden);
- feed-forward: a gated MLP (gate, up, down) of intermediate_size, or on MoE layers: experts × a gated
  MLP of moe_intermediate_size (+ per-expert biases for gpt-oss), the router (experts × hidden,
  + bias for gpt-oss), DeepSeek-V3's per-expert score-correction bias, and the shared expert(s);
- norms_per_layer RMSNorm vectors of hidden_size.
Plus the embedding (vocab × hidden), the final norm, and the lm_head unless tied.

Multi-token-prediction layers (DeepSeek-V3 `num_nextn_predict_layers`) are not counted: a plain
`vllm serve` / SGLang launch does not load them.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramctl.core.specs import ModelSpec

FP8_BLOCK = 128
"""DeepSeek-V3 / Kimi-K2 FP8 checkpoints: one float32 `weight_scale_inv` per 128 × 128 block."""
MXFP4_BLOCK = 32
"""gpt-oss MXFP4 experts: 32 four-bit values (16 bytes) share one uint8 exponent scale."""


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameter counts by part; `total` is what the Hub shows for the checkpoint (without MTP layers)."""

    embedding: int
    lm_head: int
    attention: int
    dense_mlp: int
    experts: int
    """Routed expert weights and biases (all experts, all MoE layers)."""
    router: int
    shared_experts: int
    norms: int

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.dense_mlp
            + self.experts
            + self.router
            + self.shared_experts
            + self.norms
        )


def is_moe_layer(spec: ModelSpec, layer: int) -> bool:
    """Whether decoder layer `layer` has a routed-expert FFN (DeepSeek's first_k_dense_replace / freq rule)."""
    if spec.moe is None:
        return False
    return layer >= spec.moe.first_k_dense_replace and layer % spec.moe.moe_layer_freq == 0


def num_moe_layers(spec: ModelSpec) -> int:
    return sum(1 for layer in range(spec.num_hidden_layers) if is_moe_layer(spec, layer))


def attention_params_per_layer(spec: ModelSpec) -> int:
    hidden = spec.hidden_size
    heads = spec.num_attention_heads
    if spec.mla is not None:
        mla = spec.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            q = hidden * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * heads * qk_head
        else:
            q = hidden * heads * qk_head
        kv_a = hidden * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank
        kv_b = mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
        o = heads * mla.v_head_dim * hidden
        return q + kv_a + kv_b + o
    q_dim = heads * spec.head_dim
    kv_dim = spec.num_key_value_heads * spec.head_dim
    total = hidden * q_dim + 2 * hidden * kv_dim + q_dim * hidden
    if spec.attention_qkv_bias:
        total += q_dim + 2 * kv_dim
    if spec.attention_out_bias:
        total += hidden
    if spec.qk_norm:
        total += 2 * spec.head_dim
    if spec.attention_sinks:
        total += heads
    return total


def gated_mlp_params(hidden: int, intermediate: int, *, bias: bool) -> int:
    """gate + up (hidden → intermediate) and down (intermediate → hidden)."""
    total = 3 * hidden * intermediate
    if bias:
        total += 2 * intermediate + hidden
    return total


def param_breakdown(spec: ModelSpec) -> ParamBreakdown:
    hidden = spec.hidden_size
    embedding = spec.vocab_size * hidden
    lm_head = 0 if spec.tie_word_embeddings else spec.vocab_size * hidden
    layers = spec.num_hidden_layers
    n_moe = num_moe_layers(spec)
    n_dense = layers - n_moe
    attention = layers * attention_params_per_layer(spec)
    dense_mlp = n_dense * gated_mlp_params(hidden, spec.intermediate_size, bias=spec.mlp_bias)
    experts = router = shared = 0
    if spec.moe is not None and n_moe:
        moe = spec.moe
        per_expert = gated_mlp_params(hidden, moe.moe_intermediate_size, bias=moe.expert_bias)
        experts = n_moe * moe.num_experts * per_expert
        router = n_moe * (moe.num_experts * hidden + (moe.num_experts if moe.router_bias else 0))
        if moe.score_correction_bias:
            router += n_moe * moe.num_experts
        if moe.shared_expert_intermediate_size:
            shared = n_moe * gated_mlp_params(hidden, moe.shared_expert_intermediate_size, bias=False)
            if moe.shared_expert_gate:
                shared += n_moe * hidden
    norms = layers * spec.norms_per_layer * hidden + hidden  # MLA latent norms count as attention
    return ParamBreakdown(
        embedding=embedding,
        lm_head=lm_head,
        attention=attention,
        dense_mlp=dense_mlp,
        experts=experts,
        router=router,
        shared_experts=shared,
        norms=norms,
    )


def param_count_from_spec(spec: ModelSpec) -> int:
    """Exact parameter count of the checkpoint's tensors (without MTP layers)."""
    return param_breakdown(spec).total


def active_param_count(spec: ModelSpec) -> int:
    """Parameters touched per token: routed experts scaled to num_experts_per_tok of num_experts."""
    parts = param_breakdown(spec)
    if spec.moe is None or parts.experts == 0:
        return parts.total
    active_experts = parts.experts * spec.moe.num_experts_per_tok // spec.moe.num_experts
    return parts.total - parts.experts + active_experts


def _fp8_block_linear_bytes(rows: int, cols: int) -> int:
    """An FP8 (1 byte) weight plus its float32 per-128×128-block inverse scales."""
    blocks = -(-rows // FP8_BLOCK) * -(-cols // FP8_BLOCK)
    return rows * cols + 4 * blocks


def _fp8_block_layer_bytes(spec: ModelSpec, layer: int, high: int) -> int:
    """Bytes of one decoder layer of a DeepSeek-style block-FP8 checkpoint (every Linear in FP8)."""
    hidden = spec.hidden_size
    heads = spec.num_attention_heads
    total = 0
    if spec.mla is not None:
        mla = spec.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            total += _fp8_block_linear_bytes(mla.q_lora_rank, hidden) + high * mla.q_lora_rank
            total += _fp8_block_linear_bytes(heads * qk_head, mla.q_lora_rank)
        else:
            total += _fp8_block_linear_bytes(heads * qk_head, hidden)
        total += _fp8_block_linear_bytes(mla.kv_lora_rank + mla.qk_rope_head_dim, hidden)
        total += high * mla.kv_lora_rank
        total += _fp8_block_linear_bytes(heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank)
        total += _fp8_block_linear_bytes(hidden, heads * mla.v_head_dim)
    else:
        q_dim = heads * spec.head_dim
        kv_dim = spec.num_key_value_heads * spec.head_dim
        total += _fp8_block_linear_bytes(q_dim, hidden) + 2 * _fp8_block_linear_bytes(kv_dim, hidden)
        total += _fp8_block_linear_bytes(hidden, q_dim)
        extra = attention_params_per_layer(spec) - (2 * hidden * q_dim + 2 * hidden * kv_dim)
        total += high * extra
    mlp_bytes = 0
    if is_moe_layer(spec, layer) and spec.moe is not None:
        moe = spec.moe
        inter = moe.moe_intermediate_size
        expert = 2 * _fp8_block_linear_bytes(inter, hidden) + _fp8_block_linear_bytes(hidden, inter)
        mlp_bytes += moe.num_experts * expert
        # The router stays in bf16 (DeepSeek keeps `gate.weight` unquantised), its bias in float32.
        mlp_bytes += high * moe.num_experts * hidden
        if moe.score_correction_bias:
            mlp_bytes += 4 * moe.num_experts
        if moe.shared_expert_intermediate_size:
            s = moe.shared_expert_intermediate_size
            mlp_bytes += 2 * _fp8_block_linear_bytes(s, hidden) + _fp8_block_linear_bytes(hidden, s)
    else:
        inter = spec.intermediate_size
        mlp_bytes += 2 * _fp8_block_linear_bytes(inter, hidden) + _fp8_block_linear_bytes(hidden, inter)
    return total + mlp_bytes + high * spec.norms_per_layer * hidden


def serving_dtype_bytes(spec: ModelSpec) -> int:
    """Bytes per unquantised weight as `--dtype auto` serves it: 16-bit for a float32 config, else the config's."""
    dtype = spec.torch_dtype.lower().removeprefix("torch.")
    if dtype in ("float32", "fp32"):
        return 2
    size = spec.dtype_bytes
    return int(size) if size >= 1 else 2


def weight_bytes_from_spec(spec: ModelSpec) -> int:
    """Bytes of the checkpoint's tensors as the engine loads them.

    - unquantised: param_count × bytes of torch_dtype (a float32 config is served in 16 bits by
      `--dtype auto`, so it counts 2 bytes);
    - `fp8` with 128×128 blocks (DeepSeek-V3/R1, Kimi-K2): every decoder Linear in 1 byte plus a
      float32 scale per block; embeddings, lm_head, norms and router in bf16;
    - `mxfp4` (gpt-oss): expert weights at 4.25 bits (16 bytes of values + 1 scale byte per 32),
      everything else (attention, router, expert biases, embeddings) in bf16;
    - other quantisations (awq, gptq, ...): not derivable from the config alone; falls back to
      4 bits per Linear weight in the decoder plus bf16 for the rest (an estimate).
    """
    high = serving_dtype_bytes(spec)
    parts = param_breakdown(spec)
    quant = (spec.quantization or "").lower()
    if not quant:
        return parts.total * high
    if quant == "mxfp4" and spec.moe is not None:
        moe = spec.moe
        n_moe = num_moe_layers(spec)
        weights = n_moe * moe.num_experts * 3 * spec.hidden_size * moe.moe_intermediate_size
        packed = weights // 2 + weights // MXFP4_BLOCK
        return packed + (parts.total - weights) * high
    if (quant == "fp8" and spec.mla is not None) or (quant == "fp8" and spec.moe is not None):
        total = high * (parts.embedding + parts.lm_head + spec.hidden_size)
        total += sum(_fp8_block_layer_bytes(spec, layer, high) for layer in range(spec.num_hidden_layers))
        return total
    if quant in ("fp8", "compressed-tensors", "fbgemm_fp8"):
        linear = parts.attention + parts.dense_mlp + parts.experts + parts.shared_experts
        return linear + (parts.total - linear) * high
    linear = parts.attention + parts.dense_mlp + parts.experts + parts.shared_experts
    return linear // 2 + (parts.total - linear) * high
