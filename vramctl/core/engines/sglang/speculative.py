"""SGLang's EAGLE / EAGLE3 / STANDALONE draft model (`--speculative-draft-model-path`) as the two numbers the budget
reads: `speculative_draft_layers` and `speculative_draft_weight_bytes` (vramctl.core.engines.sglang.budget).

Sources (SGLang, `python/sglang/srt/...`, read at the v0.5.23-era tree):

- KV: `DefaultPoolConfigurator.__init__` (model_executor/pool_configurator.py) grows the target's cell by
  cell × eagle_draft_num_layers / target layers for EAGLE and STANDALONE ("Assumes draft and target share the same
  per-layer KV size"): the draft's `num_hidden_layers`, whatever its width. SGLang's own approximation; vLLM sums the
  real pages (vramctl.core.engines.vllm_speculative).
- Weights: the draft worker shares the target's embedding and lm_head with EAGLE (`set_embed_and_head`), the
  embedding only with EAGLE3 unless the head has no `draft_vocab_size` (`load_lm_head_from_target`:
  `set_embed_and_head`), nothing with STANDALONE (a whole model; speculative/eagle_worker.py `_init_embed_and_head` /
  standalone_worker.py). The EAGLE heads' own parts (layers, `fc`, EAGLE3's wider first qkv and reduced lm_head) are
  counted as vLLM's heads of the same checkpoint (`vllm_speculative.draft_weights`, TP 1: the budget divides by tp).
"""

from __future__ import annotations

from vramctl.core.engines import vllm_speculative as SP
from vramctl.core.errors import BadInputError
from vramctl.core.specs import ModelSpec

DRAFT_ALGORITHMS = {"EAGLE": "eagle", "EAGLE3": "eagle3", "STANDALONE": "draft_model"}
"""SGLang algorithms that load a draft model, with the vLLM method of the same head layout."""


def needs_draft(algorithm: str | None, path: str | None) -> bool:
    """Whether the CLI loads `path` as an SGLang draft to count it."""
    return path is not None and (algorithm or "").upper() in DRAFT_ALGORITHMS


def draft_numbers(model: ModelSpec, algorithm: str, draft: SP.DraftModel) -> tuple[int, int]:
    """(draft layers, draft weight bytes over all ranks) for SglangOptions."""
    method = DRAFT_ALGORITHMS.get(algorithm.upper())
    if method is None:
        raise BadInputError(f"--speculative-algorithm {algorithm}: loads no draft model")
    spec = SP.Speculative(method, 1, 0, 0, 0, draft, 1, draft.spec.num_hidden_layers)
    weights = SP.draft_weights(model, spec, dtype="auto")
    assert weights is not None
    total = weights.total
    if method == "eagle3" and draft.draft_vocab_size is None:
        total -= weights.lm_head  # load_lm_head_from_target: the target's head
    return draft.spec.num_hidden_layers, total
