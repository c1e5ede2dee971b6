"""Weight bytes on one rank of each pipeline stage, as vLLM and SGLang shard a checkpoint.

Both engines build the same modules (SGLang copied vLLM's `VocabParallelEmbedding`, `ColumnParallelLinear`,
`RowParallelLinear`, `ReplicatedLinear`), so one function serves both planners. The per-tensor split lives in
`vramctl.core.params.rank_weight_bytes`: q / o / MLP / experts split by TP, k / v by KV heads (replicated
when TP exceeds them), norms, routers and MLA's q_a / kv_a replicated on every rank, the embedding and the
lm_head vocab-parallel with rows padded to a multiple of 64. Dividing the checkpoint by TP misses the
replicated pieces: DeepSeek-R1 at TP 16 holds 40.18 GiB per rank, not 39.18 (datapoint 125 logs 40.32).
"""

from __future__ import annotations

from vramctl.core.kv import pp_partition
from vramctl.core.params import rank_weight_bytes, serving_dtype_bytes
from vramctl.core.specs import ModelSpec, dtype_bytes


def stage_rank_weight_bytes(
    model: ModelSpec, *, tp: int, pp: int = 1, dtype: str | None = None, ep: int = 1
) -> tuple[int, ...]:
    """Weight bytes on one TP rank of each of the `pp` pipeline stages.

    Decoder layers split as `get_pp_indices` splits them (`pp_partition`); the embedding (and a vision
    tower) sit on the first stage, the final norm and the lm_head on the last — a tied lm_head is
    materialised on the last stage too when pp > 1. `dtype`: a `--dtype` other than the one an
    unquantised checkpoint is served in (`serving_dtype_bytes`) rescales it; quantised checkpoints keep
    their packed sizes. `ep` > 1: routed experts spread whole over ep ranks (`rank_weight_bytes`).
    """
    rank = rank_weight_bytes(model, tp, pad_vocab=True, ep=ep)
    parts = pp_partition(model.num_hidden_layers, pp)
    ratio = 1.0
    if dtype not in (None, "", "auto") and model.quantization is None:
        try:
            ratio = dtype_bytes(dtype) / serving_dtype_bytes(model)
        except KeyError:
            ratio = 1.0
    out: list[int] = []
    start = 0
    for stage, layers in enumerate(parts):
        stage_bytes = sum(rank.layers[start : start + layers])
        start += layers
        if stage == 0:
            stage_bytes += rank.embedding + rank.vision
        if stage == pp - 1:
            stage_bytes += rank.final_norm + (rank.lm_head if rank.lm_head or pp == 1 else rank.embedding)
        out.append(round(stage_bytes * ratio))
    return tuple(out)
