"""Exact parameter counts and checkpoint bytes from a ModelSpec (pure arithmetic, no I/O).

The count follows the tensors of the Hugging Face implementation of each architecture, so it
reproduces the safetensors totals the Hub shows: Llama-3-8B = 8,030,261,248.

Per decoder layer:
- attention, GQA/MHA: q (hidden × heads·head_dim), k and v (hidden × kv_heads·head_dim),
  o (heads·head_dim × hidden); biases on q/k/v (Qwen2, gpt-oss, OPT, GLM-4) and o (gpt-oss, OPT); q/k RMSNorm
  of head_dim each (Qwen3, Gemma-3, EXAONE-4, GLM-4.5 `use_qk_norm`) or over the whole projection,
  heads·head_dim and kv_heads·head_dim (OLMo-2, MiniMax-M2, Command-R+); one sink logit per head (gpt-oss);
- attention, MLA (DeepSeek-V2/V3, Kimi-K2): q_a (hidden × q_lora_rank) + its norm + q_b
  (q_lora_rank × heads·(nope+rope)), or one q projection when q_lora_rank is None; kv_a
  (hidden × (kv_lora_rank + rope)) + its norm (kv_lora_rank); kv_b (kv_lora_rank × heads·(nope+v));
  o (heads·v × hidden);
- feed-forward: a gated MLP (gate, up, down) of intermediate_size, or fc1 + fc2 with biases (OPT), or on
  MoE layers: experts × a gated MLP of moe_intermediate_size (+ per-expert biases for gpt-oss), the router
  (experts × hidden, + bias for gpt-oss), DeepSeek-V3's per-expert score-correction bias, and the shared
  expert(s);
- norms_per_layer norm vectors of hidden_size (× 2 with a LayerNorm bias): 1 for Cohere's parallel block,
  2 for Llama, 4 for Gemma-2/3 and GLM-4-0414.
Plus the embedding (vocab × hidden), a learned position table (OPT), the final norm, and the lm_head
unless tied.

Multi-token-prediction layers (DeepSeek-V3 `num_nextn_predict_layers`) are not counted: a plain
`vllm serve` / SGLang launch does not load them.

Bytes (`weight_bytes_from_spec`, `rank_weight_bytes`) walk the same tensors with each one's storage:
16-bit for unquantised tensors, and for the quantised Linear weights of the decoder the packing of the
checkpoint's method (block FP8 + float32 scales, MXFP4 blocks + scales, AWQ / GPTQ / compressed-tensors
packed int4 + per-group scales and zeros).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from vramctl.core.dsv4 import rank_parts as dsv4_rank_parts
from vramctl.core.gemma4 import rank_parts as gemma4_rank_parts
from vramctl.core.specs import ModelSpec

FP8_BLOCK = 128
"""DeepSeek-V3 / Kimi-K2 / Qwen3-FP8 checkpoints: one float32 `weight_scale_inv` per 128 × 128 block."""
MXFP4_BLOCK = 32
"""gpt-oss MXFP4 experts: 32 four-bit values (16 bytes) share one uint8 exponent scale."""
VOCAB_PADDING = 64
"""vLLM pads embedding and lm_head rows to a multiple of 64 (vocab_parallel_embedding.DEFAULT_VOCAB_PADDING_SIZE)."""


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
    vision: int = 0
    """A multimodal wrapper's vision tower and projector (ModelSpec.vision_params)."""

    @property
    def total(self) -> int:
        return (
            self.vision
            + self.embedding
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
    moe = spec.moe
    if moe.layer_indices:
        return layer in moe.layer_indices
    return layer >= moe.first_k_dense_replace and layer % moe.moe_layer_freq == moe.moe_layer_offset


def num_moe_layers(spec: ModelSpec) -> int:
    """Layers >= first_k_dense_replace whose index is a multiple of moe_layer_freq (counted without a loop)."""
    if spec.moe is None:
        return 0
    if spec.moe.layer_indices:
        return sum(1 for i in spec.moe.layer_indices if i < spec.num_hidden_layers)
    first, freq, layers = spec.moe.first_k_dense_replace, spec.moe.moe_layer_freq, spec.num_hidden_layers
    start = first + (spec.moe.moe_layer_offset - first) % freq  # the first MoE layer at or after first
    return 0 if start >= layers else (layers - 1 - start) // freq + 1


# ---- one description of every tensor of a layer, shared by the counts and the bytes ------------------


@dataclass(frozen=True)
class _Linear:
    """A Linear weight of `rows` (out) × `cols` (in). `tp`: `col` / `row` split the weight over ranks,
    `kv` splits by KV heads (replicated when tp > kv heads), `rep` is replicated."""

    rows: int
    cols: int
    tp: str
    quantised: bool = True
    expert: bool = False
    count: int = 1
    """Identical copies (one per routed expert)."""

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count


@dataclass(frozen=True)
class _Vector:
    """A bias / norm / sink tensor kept in 16 bits; `tp` as for _Linear (`col` = split with the heads)."""

    size: int
    tp: str
    element_bytes: int | None = None
    """Stored width when fixed by the checkpoint (DeepSeek's float32 score-correction bias); else 16-bit."""
    count: int = 1


def _attention_tensors(spec: ModelSpec) -> list[_Linear | _Vector]:
    hidden = spec.hidden_size
    heads = spec.num_attention_heads
    out: list[_Linear | _Vector] = []
    if spec.mla is not None:
        mla = spec.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            out += [_Linear(mla.q_lora_rank, hidden, "rep"), _Vector(mla.q_lora_rank, "rep")]
            out.append(_Linear(heads * qk_head, mla.q_lora_rank, "col"))
        else:
            out.append(_Linear(heads * qk_head, hidden, "col"))
        out += [
            _Linear(mla.kv_lora_rank + mla.qk_rope_head_dim, hidden, "rep"),
            _Vector(mla.kv_lora_rank, "rep"),
        ]
        out.append(_Linear(heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank, "col"))
        out.append(_Linear(hidden, heads * mla.v_head_dim, "row"))
        if mla.indexer_head_dim and mla.q_lora_rank:
            out += _indexer_tensors(spec, mla.q_lora_rank)
        return out
    q_dim = heads * spec.head_dim
    kv_dim = spec.num_key_value_heads * spec.head_dim
    out += [_Linear(q_dim, hidden, "col"), _Linear(kv_dim, hidden, "kv"), _Linear(kv_dim, hidden, "kv")]
    out.append(_Linear(hidden, q_dim, "row"))
    if spec.attention_qkv_bias:
        out += [_Vector(q_dim, "col"), _Vector(kv_dim, "kv"), _Vector(kv_dim, "kv")]
    if spec.attention_out_bias:
        out.append(_Vector(hidden, "rep"))
    if spec.qk_norm and spec.qk_norm_whole:
        # counted whole on every rank: vLLM olmo2.py all-gathers q / k and keeps the full weights; minimax_m2.py
        # (MiniMaxText01RMSNormTP) and commandr.py (LayerNorm of (heads per rank, head_dim)) shard them by tp,
        # < 1 MiB per rank less than booked here
        out += [_Vector(q_dim, "rep"), _Vector(kv_dim, "rep")]
    elif spec.qk_norm:
        out += [_Vector(spec.head_dim, "rep"), _Vector(spec.head_dim, "rep")]
    if spec.attention_sinks:
        out.append(_Vector(heads, "col"))
    if spec.attention_out_gate:
        out.append(_Linear(spec.attention_out_gate, hidden, "col"))
    return out


def _indexer_tensors(spec: ModelSpec, q_lora_rank: int) -> list[_Linear | _Vector]:
    """DeepSeek-V3.2's lightning indexer in every attention layer, as vLLM loads it (`Indexer`,
    vllm/model_executor/models/deepseek_v2.py, v0.32.0), all replicated on every rank ("no tensor parallel, just
    replicated"): `wq_b` q_lora_rank → index_n_heads × index_head_dim (ReplicatedLinear with the quant config:
    block FP8 like the checkpoint); `wk` hidden → index_head_dim and `weights_proj` hidden → index_n_heads, fused
    into one `wk_weights_proj` MergedColumnParallelLinear with quant_config=None ("FP8 wk weights are upcasted to
    BF16 during loading"), so 16-bit; `k_norm` a LayerNorm (weight + bias) in float32. V3.2: 13,959,424 parameters
    per layer, 0.85 B over 61 layers (0.13 % of the model)."""
    mla = spec.mla
    assert mla is not None
    head_dim, heads = mla.indexer_head_dim, mla.indexer_heads or 64
    return [
        _Linear(heads * head_dim, q_lora_rank, "rep"),
        _Linear(head_dim, spec.hidden_size, "rep", quantised=False),
        _Linear(heads, spec.hidden_size, "rep", quantised=False),
        _Vector(head_dim, "rep", element_bytes=4, count=2),
    ]


def _mlp_tensors(
    hidden: int, inter: int, *, gated: bool, bias: bool, expert: bool = False, count: int = 1
) -> list[_Linear | _Vector]:
    out: list[_Linear | _Vector] = []
    ins = 2 if gated else 1
    out += [_Linear(inter, hidden, "col", expert=expert, count=count) for _ in range(ins)]
    out.append(_Linear(hidden, inter, "row", expert=expert, count=count))
    if bias:
        out += [_Vector(inter, "col", count=count) for _ in range(ins)]
        out.append(_Vector(hidden, "rep" if count == 1 else "col", count=count))
    return out


def _ffn_tensors(
    spec: ModelSpec, layer: int
) -> tuple[
    list[_Linear | _Vector], list[_Linear | _Vector], list[_Linear | _Vector], list[_Linear | _Vector]
]:
    """(dense MLP, routed experts, router, shared experts) tensors of one layer."""
    hidden = spec.hidden_size
    if not is_moe_layer(spec, layer) or spec.moe is None:
        return (
            _mlp_tensors(hidden, spec.intermediate_size, gated=spec.mlp_gated, bias=spec.mlp_bias),
            [],
            [],
            [],
        )
    moe = spec.moe
    experts = _mlp_tensors(
        moe.latent_size or hidden,
        moe.moe_intermediate_size,
        gated=moe.gated_experts,
        bias=moe.expert_bias,
        expert=True,
        count=moe.num_experts,
    )
    router: list[_Linear | _Vector] = [_Linear(moe.num_experts, hidden, "rep", quantised=False)]
    if moe.router_bias:
        router.append(_Vector(moe.num_experts, "rep"))
    if moe.score_correction_bias:
        router.append(_Vector(moe.num_experts, "rep", element_bytes=4))
    # Nemotron-H fc1_latent_proj / fc2_latent_proj (ReplicatedLinear, vLLM 0.32 nemotron_h.py)
    if moe.latent_size:
        router += [_Linear(moe.latent_size, hidden, "rep"), _Linear(hidden, moe.latent_size, "rep")]
        if spec.mlp_bias:
            router += [_Vector(moe.latent_size, "rep"), _Vector(hidden, "rep")]
    shared: list[_Linear | _Vector] = []
    if moe.shared_expert_intermediate_size:
        shared = _mlp_tensors(
            hidden, moe.shared_expert_intermediate_size, gated=moe.gated_experts, bias=False
        )
        if moe.shared_expert_gate:
            shared.append(_Linear(1, hidden, "rep", quantised=False))
    return [], experts, router, shared


def layer_linears(spec: ModelSpec, layer: int) -> list[_Linear]:
    """The Linear weights of decoder layer `layer` (attention, MLP or routed / shared experts, router), each
    with its TP split kind (`col`, `row`, `kv`, `rep`) and copy count: what vLLM wraps with LoRA slots."""
    dense, experts, router, shared = _ffn_tensors(spec, layer)
    tensors = [*_attention_tensors(spec), *dense, *experts, *router, *shared]
    return [t for t in tensors if isinstance(t, _Linear)]


def _first_layer(spec: ModelSpec, *, moe: bool) -> int:
    """The index of the first MoE (or dense) decoder layer."""
    return next(i for i in range(spec.num_hidden_layers) if is_moe_layer(spec, i) == moe)


def _norm_size(spec: ModelSpec) -> int:
    return spec.hidden_size * (2 if spec.norm_bias else 1)


def _count(tensors: list[_Linear | _Vector]) -> int:
    return sum(t.params if isinstance(t, _Linear) else t.size * t.count for t in tensors)


def attention_params_per_layer(spec: ModelSpec) -> int:
    return _count(_attention_tensors(spec))


def param_breakdown(spec: ModelSpec) -> ParamBreakdown:
    hidden = spec.hidden_size
    embedding = spec.vocab_size * hidden + spec.learned_position_embeddings * hidden
    lm_head = 0 if spec.tie_word_embeddings else spec.vocab_size * hidden
    dense = experts = router = shared = 0
    n_moe = num_moe_layers(spec)
    for moe_kind, copies in ((False, spec.num_hidden_layers - n_moe), (True, n_moe)):
        if copies == 0:
            continue
        d, e, r, sh = _ffn_tensors(spec, _first_layer(spec, moe=moe_kind))
        dense += copies * _count(d)
        experts += copies * _count(e)
        router += copies * _count(r)
        shared += copies * _count(sh)
    return ParamBreakdown(
        embedding=embedding,
        lm_head=lm_head,
        attention=spec.num_hidden_layers * attention_params_per_layer(spec),
        dense_mlp=dense,
        experts=experts,
        router=router,
        shared_experts=shared,
        norms=(spec.num_hidden_layers * spec.norms_per_layer + 1) * _norm_size(spec),
        vision=spec.vision_params,
    )


def param_count_from_spec(spec: ModelSpec) -> int:
    """Exact parameter count of the checkpoint's tensors (without MTP layers)."""
    return param_breakdown(spec).total


def active_param_count(spec: ModelSpec) -> int:
    """Parameters touched per token: routed experts scaled to num_experts_per_tok of num_experts."""
    parts = param_breakdown(spec)
    # a hybrid's Mamba / Gated DeltaNet layers are not in the dense breakdown: its exact total is the registry's
    total = spec.param_count if spec.state_space is not None and spec.param_count else parts.total
    if spec.moe is None or parts.experts == 0:
        return total
    active_experts = parts.experts * spec.moe.num_experts_per_tok // spec.moe.num_experts
    return total - parts.experts + active_experts


# ---- bytes -------------------------------------------------------------------------------------------


def serving_dtype_bytes(spec: ModelSpec) -> int:
    """Bytes per unquantised weight as `--dtype auto` serves it: 16-bit for a float32 config, else the config's."""
    dtype = spec.torch_dtype.lower().removeprefix("torch.")
    if dtype in ("float32", "fp32"):
        return 2
    size = spec.dtype_bytes
    return int(size) if size >= 1 else 2


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


NVFP4_GROUP = 16
"""NVFP4 (ModelOpt `modelopt_fp4`, compressed-tensors `nvfp4-pack-quantized`): 16 E2M1 values share one FP8 scale,
plus one float32 global scale per tensor."""
_ZERO_POINT_METHODS = ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round", "auto_round")
"""Int-packed methods whose checkpoints store packed zero points per group. auto-round's int formats
(`packing_format` auto_round:auto_gptq, auto_round) keep GPTQ's qweight / scales / qzeros tensors, symmetric or not,
without g_idx: the checkpoint size vLLM logs for Lorbus/Qwen3.6-27B-int4-AutoRound ("Checkpoint size: 17.69 GiB",
weight_utils.py, noonghunna/club-3090 issues #104 and #142) is this layout's 17.69 GiB (17.60 without the zeros,
17.70 with g_idx)."""


def _fp4_scale_group(quant: str, bits: int, group: int | None) -> int:
    """The block of a 4-bit float format whose scales are one byte (NVFP4: 16, MXFP4 via Quark: 32), else 0.

    compressed-tensors stores NVFP4 as 4-bit weights in groups of 16 (integer W4A16 uses 32 or more), so a
    16-group is read as NVFP4 there."""
    if bits != 4:
        return 0
    if quant in ("modelopt_fp4", "nvfp4", "modelopt_mixed"):  # modelopt_mixed: its main algo NVFP4 (4 bits)
        return group or NVFP4_GROUP
    if quant == "compressed-tensors" and group == NVFP4_GROUP:
        return NVFP4_GROUP
    if quant == "quark" and group == MXFP4_BLOCK:
        return MXFP4_BLOCK
    return 0


def linear_bytes(
    spec: ModelSpec, rows: int, cols: int, *, expert: bool = False, quantised: bool = True
) -> int:
    """Checkpoint bytes of one rows × cols Linear weight with its scales / zeros.

    - unquantised (or a tensor the method leaves alone: routers, and for MXFP4 everything but experts):
      rows × cols × 16-bit;
    - NVFP4 (`modelopt_fp4`, compressed-tensors 4-bit in groups of 16): half a byte per weight + one FP8 scale
      per 16 + a float32 global scale; Quark MXFP4: half a byte + one uint8 scale per 32;
    - `fp8` with `quant_group_size` g (block FP8): rows × cols bytes + float32 per g × g block;
      without a block size: + one float32 scale per output row;
    - `mxfp4` experts: 4 bits per weight + one uint8 scale per 32;
    - `awq` / `gptq` / `compressed-tensors` / `bitsandbytes` at `quant_bits` b (default 4) and group g
      (default 128): b/8 bytes per weight, a 16-bit scale per group and output, b-bit zeros per group
      (AWQ, GPTQ), GPTQ's int32 g_idx per input column (GPTQ / AWQ 8-bit with a group too); other 8-bit
      methods: one byte + a per-row scale.
    """
    high = serving_dtype_bytes(spec)
    n = rows * cols
    quant = (spec.quantization or "").lower()
    if not quant or not quantised:
        return n * high
    if quant == "mxfp4":
        return n // 2 + _cdiv(n, MXFP4_BLOCK) if expert else n * high
    bits = spec.quant_bits or (8 if quant in ("fp8", "fbgemm_fp8") else 4)
    fp4_group = _fp4_scale_group(quant, bits, spec.quant_group_size)
    if fp4_group:
        return n // 2 + _cdiv(n, fp4_group) + (4 if fp4_group == NVFP4_GROUP else 0)
    grouped_int8 = bits == 8 and quant in _ZERO_POINT_METHODS and bool(spec.quant_group_size)
    if quant in ("fp8", "fbgemm_fp8") or (bits == 8 and not grouped_int8):
        if spec.quant_group_size and quant == "fp8":
            g = spec.quant_group_size
            return n + 4 * _cdiv(rows, g) * _cdiv(cols, g)
        # compressed-tensors keeps a per-channel scale in the model's dtype (llm-compressor FP8_DYNAMIC / W8A8:
        # `weight_scale` BF16 [rows, 1] in the headers); other methods' per-row / per-tensor scales are float32
        return n + (high if quant == "compressed-tensors" and not spec.quant_group_size else 4) * rows
    group = spec.quant_group_size or 128
    groups = _cdiv(cols, group) if group > 0 else 1
    total = _cdiv(n * bits, 8) + 2 * groups * rows
    if quant in _ZERO_POINT_METHODS or spec.quant_zero_points:
        total += _cdiv(groups * rows * bits, 8)  # packed zero points
    if quant in ("gptq", "gptq_marlin"):
        total += 4 * cols  # g_idx
    if quant == "bitsandbytes":
        total = _cdiv(n * bits, 8) + 4 * _cdiv(n, 64)  # absmax per 64 values
    return total


@dataclass(frozen=True)
class RankWeights:
    """Bytes one tensor-parallel rank holds: embedding, lm_head, each decoder layer, the final norm."""

    embedding: int
    lm_head: int
    layers: tuple[int, ...]
    final_norm: int
    vision: int = 0
    """The vision tower and projector (split by tp like the decoder's Linears; first pipeline stage)."""

    @property
    def total(self) -> int:
        return self.vision + self.embedding + self.lm_head + sum(self.layers) + self.final_norm


def _expert_bytes_ep(spec: ModelSpec, experts: list[_Linear | _Vector], ep: int) -> int:
    """Routed-expert bytes on one of `ep` expert-parallel ranks: whole experts, ceil(E / ep) of them (vLLM
    `determine_expert_map` gives the remainder to the first ranks, so the largest rank holds the ceiling)."""
    assert spec.moe is not None
    per_expert = sum(_tensor_bytes(spec, t, 1) for t in experts) // spec.moe.num_experts
    return per_expert * _cdiv(spec.moe.num_experts, ep)


def _tensor_bytes(spec: ModelSpec, tensor: _Linear | _Vector, tp: int) -> int:
    """Bytes of one tensor on one rank: `col`/`row` split by tp, `kv` by KV heads (≥ 1 head), `rep` whole."""
    if isinstance(tensor, _Vector):
        full = tensor.size * (tensor.element_bytes or serving_dtype_bytes(spec)) * tensor.count
    else:
        one = linear_bytes(spec, tensor.rows, tensor.cols, expert=tensor.expert, quantised=tensor.quantised)
        full = one * tensor.count
    if tensor.tp in ("col", "row"):
        return _cdiv(full, tp)
    if tensor.tp == "kv":
        kv = spec.num_key_value_heads
        return _cdiv(full * max(1, kv // tp), kv)
    return full


def _rank_bytes(spec: ModelSpec, tp: int, pad_vocab: bool, ep: int = 1) -> RankWeights:
    high = serving_dtype_bytes(spec)
    hidden = spec.hidden_size
    vocab = _cdiv(spec.vocab_size, VOCAB_PADDING) * VOCAB_PADDING if pad_vocab else spec.vocab_size
    rows = _cdiv(vocab, tp)
    embedding = rows * hidden * high + spec.learned_position_embeddings * hidden * high
    if spec.tie_word_embeddings:
        lm_head = 0
    elif spec.quant_lm_head and spec.quantization:  # packed like the decoder's Linears (GPTQ / AWQ `lm_head: true`)
        lm_head = linear_bytes(spec, rows, hidden)
    else:
        lm_head = rows * hidden * high
    norm = _norm_size(spec) * high
    attention = sum(_tensor_bytes(spec, t, tp) for t in _attention_tensors(spec))
    by_kind: dict[bool, int] = {}  # a dense and an MoE layer each cost the same in every layer
    layers: list[int] = []
    for layer in range(spec.num_hidden_layers):
        kind = is_moe_layer(spec, layer)
        if kind not in by_kind:
            dense, experts, router, shared = _ffn_tensors(spec, layer)
            if ep > 1 and experts:
                ffn = _expert_bytes_ep(spec, experts, ep)
                ffn += sum(_tensor_bytes(spec, t, tp) for t in (*dense, *router, *shared))
            else:
                ffn = sum(_tensor_bytes(spec, t, tp) for t in (*dense, *experts, *router, *shared))
            by_kind[kind] = attention + ffn + spec.norms_per_layer * norm
        layers.append(by_kind[kind])
    vision = _cdiv(spec.vision_params * high, tp)
    return RankWeights(
        embedding=embedding, lm_head=lm_head, layers=tuple(layers), final_norm=norm, vision=vision
    )


def rank_weight_bytes(spec: ModelSpec, tp: int = 1, *, pad_vocab: bool = False, ep: int = 1) -> RankWeights:
    """Weight bytes on one of `tp` tensor-parallel ranks, part by part, as vLLM / SGLang shard them.

    q / o / MLP / expert / MLA q_b, kv_b, o weights split by tp; k / v split by KV heads and replicated when
    tp exceeds them (each rank keeps one head); norms, routers, MLA q_a / kv_a (ReplicatedLinear) whole on
    every rank; embedding and lm_head vocab-parallel (rows padded to a multiple of 64 with `pad_vocab`, as
    vLLM's VocabParallelEmbedding does). With tp = 1 and no padding the total is the checkpoint's bytes.
    When the spec's weight_bytes (exact, from safetensors headers) differs from this formula's total, every
    part is scaled by that ratio. `ep` > 1 (expert parallelism over ep ranks): each rank holds whole routed
    experts, ceil(num_experts / ep) of them, instead of a 1/tp slice of every expert.
    """
    if tp < 1 or ep < 1:
        raise ValueError(f"tp and ep must be >= 1, got {tp} and {ep}")
    if spec.dsv4 is not None:  # DeepSeek-V4: module by module (vramctl.core.dsv4)
        emb, head, layers, final = dsv4_rank_parts(spec.dsv4, tp, pad_vocab=pad_vocab, ep=ep)
        return RankWeights(embedding=emb, lm_head=head, layers=layers, final_norm=final)
    if spec.gemma4 is not None:  # Gemma-4: layer by layer (vramctl.core.gemma4)
        emb, head, layers, final = gemma4_rank_parts(spec.gemma4, tp, pad_vocab=pad_vocab, ep=ep)
        return RankWeights(embedding=emb, lm_head=head, layers=layers, final_norm=final)
    result = _rank_bytes(spec, tp, pad_vocab, ep)
    formula_total = _rank_bytes(spec, 1, False).total
    if not spec.weight_bytes or not formula_total or formula_total == spec.weight_bytes:
        return result
    ratio = spec.weight_bytes / formula_total
    return RankWeights(
        embedding=round(result.embedding * ratio),
        lm_head=round(result.lm_head * ratio),
        layers=tuple(round(b * ratio) for b in result.layers),
        final_norm=round(result.final_norm * ratio),
        vision=round(result.vision * ratio),
    )


def weight_bytes_from_spec(spec: ModelSpec) -> int:
    """Bytes of the checkpoint's tensors as the engine loads them (see `linear_bytes` for each method).

    Unquantised: every tensor in 16 bits (a float32 config is served in 16 bits by `--dtype auto`).
    Quantised: the decoder's Linear weights packed by the method, everything else (embeddings, lm_head,
    norms, biases, routers; for MXFP4 also attention) in 16 bits.
    """
    return _rank_bytes(spec, 1, False).total


QUANT_PARTS = ("attention", "dense_mlp", "shared_experts", "experts")
"""The decoder parts a quantisation config can leave out (compressed-tensors `ignore`, AWQ / FP8
`modules_to_not_convert`, ModelOpt `exclude_modules`)."""


def _bytes_by_part(spec: ModelSpec) -> dict[str, int]:
    """Whole-checkpoint bytes (tp 1) of each QUANT_PARTS part over all decoder layers."""
    out = dict.fromkeys(QUANT_PARTS, 0)
    out["attention"] = spec.num_hidden_layers * sum(
        _tensor_bytes(spec, t, 1) for t in _attention_tensors(spec)
    )
    n_moe = num_moe_layers(spec)
    for moe_kind, copies in ((False, spec.num_hidden_layers - n_moe), (True, n_moe)):
        if copies == 0:
            continue
        dense, experts, _router, shared = _ffn_tensors(spec, _first_layer(spec, moe=moe_kind))
        out["dense_mlp"] += copies * sum(_tensor_bytes(spec, t, 1) for t in dense)
        out["experts"] += copies * sum(_tensor_bytes(spec, t, 1) for t in experts)
        out["shared_experts"] += copies * sum(_tensor_bytes(spec, t, 1) for t in shared)
    return out


def quant_part_bytes(spec: ModelSpec) -> dict[str, int]:
    """Whole-checkpoint bytes (tp 1) of each QUANT_PARTS part (the decoder Linear layers a quantisation config
    can quantise), in the spec's own method."""
    return _bytes_by_part(spec)


BNB_BLOCK = 64
"""bitsandbytes 4-bit: one absmax per 64 weights (float32, or uint8 with bnb_4bit_use_double_quant)."""
BNB_NESTED_BLOCK = 256
"""Double quantisation: one float32 absmax (and offset) per 256 of the uint8 absmax values."""


def bnb_double_quant_saving(spec: ModelSpec) -> int:
    """Bytes a 4-bit bitsandbytes checkpoint saves with `bnb_4bit_use_double_quant` (unsloth's `-bnb-4bit`
    uploads): each quantised Linear's float32 absmax per 64 weights becomes one byte, plus a float32 absmax and a
    float32 offset per 256 blocks (bitsandbytes QuantState `nested_*`)."""
    blocks = 0
    n_moe = num_moe_layers(spec)
    attention = [t for t in _attention_tensors(spec) if isinstance(t, _Linear) and t.quantised]
    blocks += spec.num_hidden_layers * sum(_cdiv(t.rows * t.cols, BNB_BLOCK) * t.count for t in attention)
    for moe_kind, copies in ((False, spec.num_hidden_layers - n_moe), (True, n_moe)):
        if copies == 0:
            continue
        dense, experts, _router, shared = _ffn_tensors(spec, _first_layer(spec, moe=moe_kind))
        linears = [t for t in (*dense, *experts, *shared) if isinstance(t, _Linear) and t.quantised]
        blocks += copies * sum(_cdiv(t.rows * t.cols, BNB_BLOCK) * t.count for t in linears)
    return 4 * blocks - (blocks + 8 * _cdiv(blocks, BNB_NESTED_BLOCK))


def weight_bytes_keeping(spec: ModelSpec, kept: Mapping[str, float]) -> int:
    """Checkpoint bytes when a fraction of each part named in `kept` (of QUANT_PARTS; 1.0 = every layer's)
    stays in 16 bits and the rest is quantised by the spec's method: Kimi-K2-Thinking quantises only its routed
    experts (int4, groups of 32) and lists attention, shared experts and dense MLPs in `ignore`; Llama-4
    Maverick FP8 lists every layer's attention projections in `modules_to_not_convert`."""
    total = weight_bytes_from_spec(spec)
    if not kept or not spec.quantization:
        return total
    plain = replace(spec, quantization=None, quant_bits=None, quant_group_size=None)
    packed, high = _bytes_by_part(spec), _bytes_by_part(plain)
    extra = sum((high[p] - packed[p]) * min(1.0, max(0.0, f)) for p, f in kept.items() if p in packed)
    return total + round(extra)


_MTP_FC_KEPT = frozenset({"auto-round", "auto_round", "modelopt_fp4"})
"""Methods whose MTP `fc` / `eh_proj` vLLM loads in 16 bits: ModelOpt NVFP4 (forced, `fc_quant = None`,
vllm/model_executor/models/qwen3_5_mtp.py:89-105, 0.32.0) and auto-round, which packs the Linears inside the blocks
it names (`block_name_to_quantize`: the decoder and MTP layers) and leaves the fc between them in 16 bits (INCConfig,
vllm/model_executor/layers/quantization/inc/config_parser.py; the public Qwen3.6-27B AutoRound checkpoints list
`mtp.fc` among their 16-bit tensors)."""


def mtp_layer_rank_bytes(spec: ModelSpec, tp: int = 1, ep: int = 1) -> int:
    """One multi-token-prediction layer on one TP rank, as vLLM loads it for an MTP speculative method: a
    full-attention decoder layer of the target (the MLP / MoE of its last layer), the `fc` / `eh_proj` of
    2 × hidden → hidden (ColumnParallelLinear) and three RMSNorms (`Qwen3_5MultiTokenPredictor`,
    vllm/model_executor/models/qwen3_5_mtp.py:69-140; `DeepSeekMultiTokenPredictorLayer`, deepseek_mtp.py:76-144,
    vLLM 0.32.0); the embedding and lm_head are the target's, shared (`_maybe_share_embeddings`,
    vllm/v1/spec_decode/llm_base_proposer.py:1398-1399)."""
    if spec.mtp_unquantised and spec.quantization:
        # the checkpoint leaves its MTP layers in 16 bits (ModelSpec.mtp_unquantised): vLLM builds them unquantised
        spec = replace(spec, quantization=None, quant_bits=None, quant_group_size=None)
    high = serving_dtype_bytes(spec)
    hidden = spec.hidden_size
    attention = sum(_tensor_bytes(spec, t, tp) for t in _attention_tensors(spec))
    if spec.architecture.startswith(("Qwen3Next", "Qwen3_5")) and not spec.attention_out_gate:
        # Qwen3-Next / Qwen3.5 full attention: q_proj also emits the output gate (2 × heads × head_dim rows) and
        # q / k RMSNorms of head_dim (qwen3_next.py Qwen3NextAttention, vLLM 0.32.0); the hybrid spec leaves them
        # to its exact parameter total, the MTP layer needs them here
        q_dim = spec.num_attention_heads * spec.head_dim
        attention += _tensor_bytes(spec, _Linear(q_dim, hidden, "col"), tp)
        if not spec.qk_norm:
            attention += _tensor_bytes(spec, _Vector(2 * spec.head_dim, "rep"), tp)
    dense, experts, router, shared = _ffn_tensors(spec, spec.num_hidden_layers - 1)
    if ep > 1 and experts:
        ffn = _expert_bytes_ep(spec, experts, ep) + sum(_tensor_bytes(spec, t, tp) for t in (*dense, *router, *shared))
    else:
        ffn = sum(_tensor_bytes(spec, t, tp) for t in (*dense, *experts, *router, *shared))
    fc = _tensor_bytes(spec, _Linear(hidden, 2 * hidden, "col"), tp)
    if (spec.quantization or "").lower() in _MTP_FC_KEPT:
        fc = _tensor_bytes(spec, _Linear(hidden, 2 * hidden, "col", quantised=False), tp)
    norms = (spec.norms_per_layer + 3) * _norm_size(spec) * high
    return attention + ffn + fc + norms


def state_mixer_linear_params(spec: ModelSpec) -> int | None:
    """Parameters of the Linear projections of one state layer's mixer of a hybrid — the weights a quantiser that
    quantises every decoder Linear packs — or None for a pure-attention model or a mixer kind whose split is not
    written here (KDA, Mamba1).

    - Gated DeltaNet (Qwen3-Next / Qwen3.5, vLLM qwen3_next.py / qwen3_5.py `QwenGatedDeltaNetAttention`):
      in_proj_qkvz (hidden → 2 × key + 2 × value; the checkpoint's in_proj_qkv + in_proj_z) and out_proj
      (value → hidden). in_proj_ba (hidden → 2 × value heads) is left out: the public int4 checkpoints keep it in
      16 bits (vLLM `Qwen3_5Model.packed_modules_mapping` loads it as its own fused Linear), and conv1d, dt_bias,
      A_log and the gated norm are not Linear weights;
    - Mamba2 (`MambaMixer2`): in_proj (hidden → 2 × inner + 2 × groups × state + heads) and out_proj (inner →
      hidden);
    - LFM2 short convolution (`ShortConv`): in_proj (hidden → 3 × conv width) and out_proj (width → hidden).
    """
    st = spec.state_space
    if st is None:
        return None
    h = spec.hidden_size
    if st.kind == "gated_delta_net":
        key_dim = st.n_groups * st.state_size
        value_dim = st.num_heads * st.head_dim
        return h * (2 * key_dim + 2 * value_dim) + value_dim * h
    if st.kind == "mamba2":
        inner = st.intermediate_size
        return h * (2 * inner + 2 * st.n_groups * st.state_size + st.num_heads) + inner * h
    if st.kind == "short_conv":
        return h * 3 * st.intermediate_size + st.intermediate_size * h
    return None


def gated_query_params(spec: ModelSpec) -> int:
    """Parameters of the output-gate rows of q_proj in every attention layer that the layout formula does not book
    (`attention_out_gate` 0): Qwen3-Next / Qwen3.5 `Qwen3NextAttention` sizes q_proj num_heads × head_dim × 2 (the
    query and its gate, vLLM qwen3_next.py, reused by qwen3_5.py). Part of q_proj, so quantised with it."""
    if spec.attention_out_gate or not spec.architecture.startswith(("Qwen3Next", "Qwen3_5")):
        return 0
    attention_layers = spec.num_hidden_layers - spec.num_state_layers
    return attention_layers * spec.hidden_size * spec.num_attention_heads * spec.head_dim
