"""Gemma-4 (`Gemma4ForCausalLM`, the language model of `Gemma4ForConditionalGeneration` / `gemma4_unified`): its
weights, module by module, as vLLM 0.32.0 builds them (`vllm/model_executor/models/gemma4.py`, cited as gemma4.py).

- attention (`Gemma4Attention`, gemma4.py:380-520): each layer's head size and KV heads are
  `per_layer_config[layer]` (gemma4.py:578-580; transformers 5.19 `Gemma4TextConfig` writes `global_head_dim` and,
  with `attention_k_eq_v`, `num_global_key_value_heads` for the full-attention layers). A layer owning its KV has a
  QKVParallelLinear (q heads × hd, K and V kv_heads × hd each: k_eq_v layers load K into both slots,
  `_gemma4_layer_weights_mapper`, gemma4.py:86-123, so vLLM holds a V-sized copy the checkpoint does not ship),
  q_norm and k_norm of hd (v_norm has no weight); the last `num_kv_shared_layers` layers build only q_proj, q_norm
  and o_proj (gemma4.py:409-417; their checkpoint k/v/k_norm are dropped by the mapper);
- MLP (gemma4.py:595-606): gate_up + down of `intermediate_size`, twice that in KV-shared layers with
  `use_double_wide_mlp`; four RMSNorms of hidden;
- MoE (gemma4.py:630-665, whenever `num_experts` is set): the router (scale hidden, per_expert_scale E, proj
  E × hidden, replicated), E GELU experts of `moe_intermediate_size` (FusedMoE: split by TP), three more norms;
- per-layer inputs (`hidden_size_per_layer_input` > 0, gemma4.py:674-706): per layer a gate hidden → ple and a
  projection ple → hidden (ReplicatedLinear) and a norm; the model (gemma4.py:1015-1062) the per-layer embedding
  `vocab_size_per_layer_input` × (ple × layers) (vocab-parallel), `per_layer_model_projection` hidden → ple × layers
  (column-parallel) and its norm of ple;
- the model: vocab-parallel embedding, final norm, lm_head tied unless `tie_word_embeddings` is false
  (gemma4.py:1447-1454). The per-layer `layer_scalar` (one element) and the non-persistent scale buffers are not
  counted.

Pure: no torch. Counts are elements, sizes int bytes (16-bit checkpoints only: quantised Gemma-4 is refused).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramctl.core.units import cdiv

_VOCAB_PAD = 64
SLIDING = "sliding_attention"
FULL = "full_attention"


@dataclass(frozen=True)
class Gemma4Shape:
    """The fields of a Gemma-4 text config that its weights and KV cache depend on."""

    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    layer_types: tuple[str, ...]
    head_dims: tuple[int, ...]
    """Per layer (`per_layer_config[i].head_dim`)."""
    kv_heads: tuple[int, ...]
    """Per layer (`per_layer_config[i].num_key_value_heads`)."""
    k_eq_v: bool
    num_kv_shared_layers: int
    intermediate_size: int
    sliding_window: int
    use_double_wide_mlp: bool = False
    hidden_size_per_layer_input: int = 0
    vocab_size_per_layer_input: int = 0
    num_experts: int = 0
    moe_intermediate_size: int = 0
    top_k_experts: int = 0
    tie_word_embeddings: bool = True
    dtype_bytes: int = 2

    @property
    def num_layers(self) -> int:
        return len(self.layer_types)

    @property
    def first_shared(self) -> int:
        return self.num_layers - self.num_kv_shared_layers

    def is_shared(self, layer: int) -> bool:
        return self.num_kv_shared_layers > 0 and layer >= self.first_shared

    def is_k_eq_v(self, layer: int) -> bool:
        """A full-attention layer whose checkpoint ships K only (vLLM loads it into the V slot too)."""
        return self.k_eq_v and self.layer_types[layer] == FULL and not self.is_shared(layer)

    def kv_target(self, layer: int) -> int:
        """The layer whose KV this layer reads: itself, or for a shared layer the last earlier non-shared layer of
        its kind (gemma4.py:471-491)."""
        if not self.is_shared(layer):
            return layer
        kind = self.layer_types[layer]
        return max(i for i in range(self.first_shared) if self.layer_types[i] == kind)


def attention_elements(shape: Gemma4Shape, layer: int, tp: int = 1, *, checkpoint: bool = False) -> int:
    """One layer's attention on one of `tp` ranks (`checkpoint`: the tensors the checkpoint ships, no V copy)."""
    h, hd, heads = shape.hidden_size, shape.head_dims[layer], shape.num_attention_heads
    q = heads * hd * h // tp
    o = h * heads * hd // tp
    if shape.is_shared(layer):
        return q + o + hd  # q_proj, o_proj, q_norm
    kv = max(1, shape.kv_heads[layer] // tp) * hd * h  # K (and V): replicated when tp exceeds the KV heads
    v = 0 if checkpoint and shape.is_k_eq_v(layer) else kv
    return q + kv + v + o + 2 * hd  # qkv_proj, o_proj, q_norm, k_norm


def ffn_elements(shape: Gemma4Shape, layer: int, tp: int = 1, ep: int = 1) -> int:
    """The MLP, MoE block, per-layer-input block and norms of one layer on one rank."""
    h = shape.hidden_size
    inter = shape.intermediate_size * (2 if shape.use_double_wide_mlp and shape.is_shared(layer) else 1)
    out = 3 * h * inter // tp + 4 * h  # gate_up, down; input / post-attention / pre- / post-feedforward norms
    if shape.num_experts:
        e, mi = shape.num_experts, shape.moe_intermediate_size
        experts = 3 * cdiv(e, ep) * mi * h if ep > 1 else 3 * e * mi * h // tp
        out += h + e + e * h + experts + 3 * h  # router scale, per_expert_scale, proj; experts; 3 norms
    if shape.hidden_size_per_layer_input:
        out += 2 * h * shape.hidden_size_per_layer_input + h  # per_layer_input_gate, per_layer_projection, norm
    return out


def layer_bytes(shape: Gemma4Shape, layer: int, tp: int = 1, ep: int = 1) -> int:
    return (attention_elements(shape, layer, tp) + ffn_elements(shape, layer, tp, ep)) * shape.dtype_bytes


def _rows(rows: int, tp: int, pad_vocab: bool) -> int:
    return cdiv(cdiv(rows, _VOCAB_PAD) * _VOCAB_PAD if pad_vocab else rows, tp)


def embedding_elements(shape: Gemma4Shape, tp: int = 1, pad_vocab: bool = False) -> int:
    """embed_tokens, and with per-layer inputs embed_tokens_per_layer and per_layer_model_projection (+ its norm)."""
    out = _rows(shape.vocab_size, tp, pad_vocab) * shape.hidden_size
    ple = shape.hidden_size_per_layer_input * shape.num_layers
    if ple:
        out += _rows(shape.vocab_size_per_layer_input, tp, pad_vocab) * ple
        out += shape.hidden_size * ple // tp + shape.hidden_size_per_layer_input
    return out


def parameter_terms(shape: Gemma4Shape) -> dict[str, int]:
    """Element counts as vLLM holds them at tp = 1, term by term (`v_slot_copies`: the K=V layers' V slots)."""
    vocab = shape.vocab_size * shape.hidden_size
    attn = sum(attention_elements(shape, i, checkpoint=True) for i in range(shape.num_layers))
    full = sum(attention_elements(shape, i) for i in range(shape.num_layers))
    return {
        "embedding": embedding_elements(shape),
        "lm_head": 0 if shape.tie_word_embeddings else vocab,
        "final_norm": shape.hidden_size,
        "attention": attn,
        "v_slot_copies": full - attn,
        "ffn": sum(ffn_elements(shape, i) for i in range(shape.num_layers)),
    }


def parameter_count(shape: Gemma4Shape) -> int:
    return sum(parameter_terms(shape).values())


def weight_bytes(shape: Gemma4Shape) -> int:
    """The bytes vLLM loads on one GPU (V-slot copies included, no vocab padding)."""
    return parameter_count(shape) * shape.dtype_bytes


def rank_parts(
    shape: Gemma4Shape, tp: int, *, pad_vocab: bool, ep: int = 1
) -> tuple[int, int, tuple[int, ...], int]:
    """(embedding, lm_head, per-layer, final norm) bytes on one of `tp` ranks (`RankWeights`); a tied lm_head is
    the embedding's rows (counted once, as `params.RankWeights` counts tied heads: 0 here)."""
    b = shape.dtype_bytes
    emb = embedding_elements(shape, tp, pad_vocab) * b
    head = 0 if shape.tie_word_embeddings else _rows(shape.vocab_size, tp, pad_vocab) * shape.hidden_size * b
    layers = tuple(layer_bytes(shape, i, tp, ep) for i in range(shape.num_layers))
    return emb, head, layers, shape.hidden_size * b
