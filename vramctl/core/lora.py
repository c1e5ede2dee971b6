"""vLLM's LoRA slots: the adapter buffers `--enable-lora` allocates next to the weights at model load.

vLLM wraps every LoRA-capable Linear of the decoder with a `*WithLoRA` layer whose `create_lora_weights`
allocates zeroed stacks for `max_loras` adapters at `max_lora_rank`, in `lora_dtype` (`auto` = the model's
dtype), whether or not an adapter is ever loaded (vllm/lora/layers/base_linear.py `create_lora_weights`,
vllm/config/lora.py; vLLM 0.11 → 0.33). Per slice of a layer, on one TP rank:

- ColumnParallelLinear (q / k / v, gate / up, MLA q_b / kv_b): A `[max_loras, 1, rank, in]`,
  B `[max_loras, 1, out / tp, rank]` (with `--fully-sharded-loras` A has rank / tp rows);
- RowParallelLinear (o, down): A `[max_loras, 1, rank, in / tp]`, B `[max_loras, 1, out, rank]`
  (fully sharded: B has out / tp rows);
- ReplicatedLinear (routers, MLA q_a / kv_a): A `[max_loras, 1, rank, in]`, B `[max_loras, 1, out, rank]`;
- FusedMoE experts (vllm/lora/layers/fused_moe.py): the same per expert, `[max_loras, local_experts, …]`
  for w1 / w3 (two slices) and w2; expert parallelism is refused (`EP support for Fused MoE LoRA is not
  implemented yet`).

The buffers are allocated while the model loads, so vLLM's "Model loading took" includes them: they are
booked with the weights. Embedding / lm_head adapters (extra vocabulary, removed in vLLM 0.12) and the
punica kernels' per-step buffers (tokens × rank) are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramctl.core.errors import BadInputError
from vramctl.core.kv import pp_partition
from vramctl.core.params import layer_linears
from vramctl.core.specs import ModelSpec

MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""vllm/config/lora.py `MaxLoRARanks`: the ranks vLLM accepts for --max-lora-rank."""
DEFAULT_MAX_LORA_RANK = 16
DEFAULT_MAX_LORAS = 1


@dataclass(frozen=True)
class LoraSlots:
    max_loras: int
    max_lora_rank: int
    fully_sharded: bool
    dtype_bytes: int
    stage_bytes: tuple[int, ...]
    """LoRA buffer bytes on one TP rank of each pipeline stage."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def layer_lora_bytes(
    spec: ModelSpec, layer: int, *, tp: int, max_loras: int, rank: int, dtype_bytes: int, fully_sharded: bool
) -> int:
    """LoRA A + B buffer bytes of decoder layer `layer` on one TP rank (module docstring)."""
    kv_heads = spec.num_key_value_heads
    total = 0
    for t in layer_linears(spec, layer):
        rows, cols = t.rows, t.cols
        a_rank = rank
        if t.tp in ("col", "kv"):
            out = _cdiv(rows, tp) if t.tp == "col" else _cdiv(rows * max(1, kv_heads // tp), kv_heads)
            a_rank = _cdiv(rank, tp) if fully_sharded else rank
            a, b = a_rank * cols, out * rank
        elif t.tp == "row":
            a, b = rank * _cdiv(cols, tp), (_cdiv(rows, tp) if fully_sharded else rows) * rank
        else:
            a, b = rank * cols, rows * rank
        total += max_loras * t.count * (a + b) * dtype_bytes
    return total


def lora_slots(
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    max_loras: int | None,
    max_lora_rank: int | None,
    dtype_bytes: int,
    fully_sharded: bool = False,
    expert_parallel: bool = False,
) -> LoraSlots:
    """The LoRA buffers of one TP rank of each pipeline stage; BadInputError on flags vLLM refuses."""
    loras = DEFAULT_MAX_LORAS if max_loras is None else max_loras
    rank = DEFAULT_MAX_LORA_RANK if max_lora_rank is None else max_lora_rank
    if loras < 1:
        raise BadInputError(f"--max-loras {loras}: must be at least 1 (vllm/config/lora.py: ge=1)")
    if rank not in MAX_LORA_RANKS:
        allowed = ", ".join(str(r) for r in MAX_LORA_RANKS)
        raise BadInputError(
            f"--max-lora-rank {rank}: vLLM accepts {allowed} (vllm/config/lora.py MaxLoRARanks)"
        )
    if model.state_space is not None:
        raise BadInputError(
            f"--enable-lora: {model.name} has {model.state_space.kind} layers, whose LoRA slots vramctl does not "
            "model yet (the layout it sizes slots from is attention + MLP only)"
        )
    if expert_parallel and model.moe is not None:
        raise BadInputError(
            "--enable-lora with --enable-expert-parallel: vLLM stops at start-up on an MoE model (EP support for "
            "Fused MoE LoRA is not implemented yet); drop one of them"
        )
    if fully_sharded and rank % tp:
        raise BadInputError(
            f"--fully-sharded-loras: --max-lora-rank {rank} must divide by --tensor-parallel-size {tp}"
        )
    per_layer = [
        layer_lora_bytes(
            model, i, tp=tp, max_loras=loras, rank=rank, dtype_bytes=dtype_bytes, fully_sharded=fully_sharded
        )
        for i in range(model.num_hidden_layers)
    ]
    stages: list[int] = []
    start = 0
    for layers in pp_partition(model.num_hidden_layers, pp):
        stages.append(sum(per_layer[start : start + layers]))
        start += layers
    return LoraSlots(loras, rank, fully_sharded, dtype_bytes, tuple(stages))
