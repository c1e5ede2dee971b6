"""DeepSeek-V4 (`DeepseekV4ForCausalLM`, V4-Flash / V4-Pro): its weights, module by module, as vLLM 0.32.0 builds them.

The layout (paths relative to `vllm/models/deepseek_v4/`, vLLM 0.32.0; `nvidia/model.py` is the CUDA build):

- attention, every layer (`attention.py:243-289`): fused_wqa_wkv hidden → q_lora_rank + head_dim (replicated,
  `disable_tp`), q_norm (q_lora_rank), wq_b q_lora_rank → heads × head_dim (column-parallel), kv_norm (head_dim),
  the grouped low-rank output wo_a heads × head_dim / o_groups → o_groups × o_lora_rank (column-parallel) and wo_b
  o_groups × o_lora_rank → hidden (row-parallel), a float32 attention sink per (padded) head;
- compressor, layers with ratio > 1 (`compressor.py:262-280`): ape (ratio, coff × head_dim) float32,
  fused_wkv_wgate hidden → 2 × coff × head_dim unquantised and replicated (`quant_config=None, disable_tp=True`),
  norm (head_dim); coff = 2 for ratio 4, else 1;
- indexer, ratio-4 layers (`attention.py:975-1027`): wq_b q_lora_rank → index_n_heads × index_head_dim (replicated,
  quantised), weights_proj hidden → index_n_heads (unquantised), and a compressor of head_dim = index_head_dim;
- MoE, every layer (`nvidia/model.py:724-790`): the router (GateLinear hidden → n_routed_experts, 16-bit), a hash
  table `tid2eid` (vocab × top-k int32) in the first num_hash_layers layers, a float32 `e_score_correction_bias` in
  the others (topk_method noaux_tc), the shared expert (moe_intermediate × n_shared, its width padded to whole
  128-blocks per TP rank, `nvidia/model.py:153-159`), the routed experts (FusedMoE: intermediate split by TP, or
  whole experts over EP ranks);
- two RMSNorms and the manifold-constrained hyper-connections per layer (`nvidia/model.py:1091-1140`: for attention
  and FFN each, fn (2 + hc) × hc × (hc × hidden), base (2 + hc) × hc, scale 3, all float32);
- the model (`nvidia/model.py:1331-1380`, `:1831`): vocab-parallel embedding and lm_head (rows padded to 64), the
  final norm and the hyper-connection head (fn hc × hc × hidden, base hc, scale 1, float32).

Quantisation (`quant_config.py:27-80`): the checkpoint's `quantization_config` is block FP8 (128 × 128) for every
quantised Linear; the routed experts follow `expert_dtype`: "fp4" (V4-Flash / V4-Pro) = MXFP4, 4 bits + one UE8M0
byte per 32 values, and the FP8 scales are UE8M0 bytes; "fp8" (the Base checkpoints) = block FP8 with float32
scales. Modules built with `quant_config=None` stay 16-bit. The MTP layers (`num_nextn_predict_layers`) are not
loaded without --speculative-config.

Pure: no torch. Counts are elements, sizes int bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramctl.core.units import cdiv

FP8_BLOCK = 128
MXFP4_GROUP = 32
_VOCAB_PAD = 64
_BF16 = 2
_F32 = 4
_I32 = 4


@dataclass(frozen=True)
class Dsv4Shape:
    """The fields of a DeepSeek-V4 config.json that its weights and KV cache depend on."""

    hidden_size: int
    compress_ratios: tuple[int, ...]
    """One per decoder layer, each max(1, the config's value): 1 sliding window only, 4 C4A, 128 C128A."""
    num_attention_heads: int
    head_dim: int
    q_lora_rank: int
    o_lora_rank: int
    o_groups: int
    index_n_heads: int
    index_head_dim: int
    sliding_window: int
    hc_mult: int
    n_routed_experts: int
    n_shared_experts: int
    moe_intermediate_size: int
    num_experts_per_tok: int
    num_hash_layers: int
    vocab_size: int
    noaux_tc: bool = True
    quantized: bool = True
    """The checkpoint is block FP8 (its quantization_config); False: every tensor 16-bit."""
    expert_dtype: str = "fp4"
    """`fp4` (MXFP4 experts, UE8M0 FP8 scales) or `fp8` (block-FP8 experts, float32 scales)."""
    num_mtp_layers: int = 0
    index_topk: int = 0
    """Tokens the indexer selects: the model's `topk_indices_buffer` is max_num_batched_tokens × index_topk int32
    (nvidia/model.py:1324-1328), built with the weights."""

    @property
    def num_layers(self) -> int:
        return len(self.compress_ratios)


@dataclass(frozen=True)
class _T:
    """One tensor: rows × cols elements; how it is stored and split."""

    rows: int
    cols: int = 1
    kind: str = "bf16"
    """`fp8` (block FP8 Linear), `f32`, `i32`, `bf16` (16-bit), `expert`."""
    split: int = 1
    """TP ranks the tensor is divided over (1: replicated)."""


def _fp8_bytes(shape: Dsv4Shape, rows: int, cols: int) -> int:
    if not shape.quantized:
        return rows * cols * _BF16
    scale = 1 if shape.expert_dtype == "fp4" else _F32
    return rows * cols + cdiv(rows, FP8_BLOCK) * cdiv(cols, FP8_BLOCK) * scale


def _expert_bytes(shape: Dsv4Shape, elements: int, rows: int, cols: int) -> int:
    """One routed-expert projection: MXFP4 (½ byte + a UE8M0 byte per 32) or block FP8."""
    if shape.quantized and shape.expert_dtype == "fp4":
        return elements // 2 + elements // MXFP4_GROUP
    return _fp8_bytes(shape, rows, cols)


def _bytes(shape: Dsv4Shape, t: _T) -> int:
    rows, cols = t.rows // t.split if t.kind != "expert" else t.rows, t.cols
    if t.kind == "fp8":
        return _fp8_bytes(shape, rows, cols)
    if t.kind == "expert":
        return _expert_bytes(shape, rows * cols, rows, cols)
    return rows * cols * {"bf16": _BF16, "f32": _F32, "i32": _I32}[t.kind]


def _compressor(shape: Dsv4Shape, ratio: int, head_dim: int) -> list[_T]:
    coff = 1 + (ratio == 4)
    return [
        _T(ratio, coff * head_dim, "f32"),  # ape
        _T(2 * coff * head_dim, shape.hidden_size),  # fused_wkv_wgate, quant_config=None
        _T(head_dim),  # norm
    ]


def attention_tensors(shape: Dsv4Shape, ratio: int, tp: int) -> list[_T]:
    """The attention block of one layer (with its compressor and indexer) on one of `tp` ranks."""
    h, hd, heads = shape.hidden_size, shape.head_dim, shape.num_attention_heads
    out = [
        _T(shape.q_lora_rank + hd, h, "fp8"),  # fused_wqa_wkv (replicated)
        _T(shape.q_lora_rank),  # q_norm
        _T(heads * hd, shape.q_lora_rank, "fp8", tp),  # wq_b
        _T(hd),  # kv_norm
        _T(shape.o_groups * shape.o_lora_rank, heads * hd // shape.o_groups, "fp8", tp),  # wo_a
        _T(h * tp, shape.o_groups * shape.o_lora_rank // tp, "fp8", tp),  # wo_b (row-parallel: its input split)
        _T(heads, 1, "f32", tp),  # attn_sink
    ]
    if ratio > 1:
        out += _compressor(shape, ratio, hd)
    if ratio == 4:
        out += [
            _T(shape.index_n_heads * shape.index_head_dim, shape.q_lora_rank, "fp8"),  # indexer.wq_b
            _T(shape.index_n_heads, h),  # indexer.weights_proj, quant_config=None
            *_compressor(shape, 4, shape.index_head_dim),
        ]
    return out


def ffn_tensors(shape: Dsv4Shape, layer: int, tp: int, ep: int = 1) -> list[_T]:
    """The MoE block, norms and hyper-connections of one layer on one rank (experts: a 1/tp slice of each, or
    ceil(E / ep) whole experts with expert parallelism)."""
    h, e, inter = shape.hidden_size, shape.n_routed_experts, shape.moe_intermediate_size
    shared = inter * shape.n_shared_experts
    if shape.quantized and shared and tp > 1:  # whole 128-blocks per rank (nvidia/model.py:153-159)
        shared = cdiv(shared // FP8_BLOCK, tp) * FP8_BLOCK * tp
    mix = (2 + shape.hc_mult) * shape.hc_mult
    out = [_T(e, h)]  # gate (GateLinear, 16-bit)
    if layer < shape.num_hash_layers:
        out.append(_T(shape.vocab_size, shape.num_experts_per_tok, "i32"))  # tid2eid
    elif shape.noaux_tc:
        out.append(_T(e, 1, "f32"))  # e_score_correction_bias
    if shared:
        out += [_T(2 * shared, h, "fp8", tp), _T(h * tp, shared // tp, "fp8", tp)]
    experts = cdiv(e, ep) if ep > 1 else e
    split = 1 if ep > 1 else tp
    out += [
        _T(experts * 2 * inter // split, h, "expert"),  # w13
        _T(experts * h, inter // split, "expert"),  # w2
        _T(h),  # attn_norm
        _T(h),  # ffn_norm
    ]
    for _ in ("attn", "ffn"):
        out += [_T(mix, shape.hc_mult * h, "f32"), _T(mix, 1, "f32"), _T(3, 1, "f32")]
    return out


def layer_bytes(shape: Dsv4Shape, layer: int, tp: int = 1, ep: int = 1) -> int:
    ratio = shape.compress_ratios[layer]
    return sum(_bytes(shape, t) for t in attention_tensors(shape, ratio, tp) + ffn_tensors(shape, layer, tp, ep))


def embedding_bytes(shape: Dsv4Shape, tp: int = 1, pad_vocab: bool = False) -> int:
    """VocabParallelEmbedding / ParallelLMHead: 16-bit, rows padded to a multiple of 64 and split by tp."""
    rows = cdiv(shape.vocab_size, _VOCAB_PAD) * _VOCAB_PAD if pad_vocab else shape.vocab_size
    return cdiv(rows, tp) * shape.hidden_size * _BF16


def head_bytes(shape: Dsv4Shape) -> int:
    """The final norm and the hyper-connection head (fn hc × hc·hidden, base hc, scale 1; float32)."""
    hc = shape.hc_mult
    return shape.hidden_size * _BF16 + (hc * hc * shape.hidden_size + hc + 1) * _F32


def _elements(shape: Dsv4Shape, tensors: list[_T]) -> int:
    return sum(t.rows * t.cols for t in tensors)


def parameter_terms(shape: Dsv4Shape) -> dict[str, int]:
    """Element counts of the decoder as the checkpoint stores it (tp = 1), term by term."""
    terms = {"embedding": shape.vocab_size * shape.hidden_size, "lm_head": shape.vocab_size * shape.hidden_size}
    hc = shape.hc_mult
    terms["final_norm_and_hc_head"] = shape.hidden_size + hc * hc * shape.hidden_size + hc + 1
    attn = experts = other = hash_tables = 0
    for layer, ratio in enumerate(shape.compress_ratios):
        attn += _elements(shape, attention_tensors(shape, ratio, 1))
        for t in ffn_tensors(shape, layer, 1):
            if t.kind == "expert":
                experts += t.rows * t.cols
            elif t.kind == "i32":
                hash_tables += t.rows * t.cols
            else:
                other += t.rows * t.cols
    terms.update(attention=attn, routed_experts=experts, ffn_other=other, hash_tables=hash_tables)
    return terms


def parameter_count(shape: Dsv4Shape) -> int:
    return sum(parameter_terms(shape).values())


def weight_bytes(shape: Dsv4Shape) -> int:
    """The checkpoint's decoder bytes as vLLM loads them on one GPU (no vocab padding)."""
    layers = sum(layer_bytes(shape, i) for i in range(shape.num_layers))
    return layers + 2 * embedding_bytes(shape) + head_bytes(shape)


def rank_parts(shape: Dsv4Shape, tp: int, *, pad_vocab: bool, ep: int = 1) -> tuple[int, int, tuple[int, ...], int]:
    """(embedding, lm_head, per-layer, final norm + hc head) bytes on one of `tp` ranks (`ep` > 1: whole routed
    experts over ep ranks); the caller's `RankWeights` (vramctl.core.params.rank_weight_bytes)."""
    emb = embedding_bytes(shape, tp, pad_vocab)
    layers = tuple(layer_bytes(shape, i, tp, ep) for i in range(shape.num_layers))
    return emb, emb, layers, head_bytes(shape)
