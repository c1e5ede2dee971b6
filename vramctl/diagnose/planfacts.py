"""The planned deployment as facts of an incident: what `plan` says about the deployment a log describes.

When an incident's wording does not decide (a bare torch OOM without a frame, a kill, a log that ends during
start-up), the log often still names what was deployed: the model, the card or its total, TP, max-model-len, the
utilisation (what `read-log` reads; `planfix.deployment` rebuilds it). Planning that deployment says which term
cannot fit, and the `planned-deployment` decision table (catalogue.yaml) decides from it:

| fact | meaning |
| --- | --- |
| `device_total_bytes` | the card's total memory the plan used (the log's device total) |
| `planned_budget_bytes` | the engine's budget: utilisation x total (vLLM `request_memory`, vllm/v1/worker/utils.py, v0.32.0) |
| `planned_weights_per_rank_bytes` | the weights one rank holds at the logged TP |
| `planned_kv_bytes` | budget - weights - activation peak - non-torch - graphs (vLLM `determine_available_memory`, vllm/v1/worker/gpu_worker.py, v0.32.0); negative when the rest does not fit |
| `planned_kv_tokens` | the KV tokens that budget holds |
| `planned_max_model_len`, `planned_max_model_len_fit` | the context asked for and the largest one the KV cache holds |
| `max_model_len_fits` | 1 when one max-length sequence fits the planned KV cache (vLLM `check_enough_kv_cache_memory`, vllm/v1/core/kv_cache_utils.py, v0.32.0), else 0 |
| `planned_starts` | 1 when the plan's verdict is that it starts, else 0 |
| `planned_tp` | the tensor-parallel size planned |
| `planned_verdict`, `planned_model` | the plan's verdict and the model name the log gave |

A model not known offline is not planned; the size its name states gives weights-only facts instead (`named_params`,
`named_weights_per_rank_bytes`, ...: vramctl/diagnose/namedsize.py), decided only past a clear margin.

These are inferences, not the log's numbers: every rule that uses them says so, with `low` or `medium` confidence.
Offline only (the bundled registry, derived pre-quantised names, the local Hugging Face cache), computed once per log,
and only for a path of at most `planfix.MAX_PLAN_LOG_BYTES` (a 1 GiB serving log is not read twice). Any failure to
reconstruct gives no facts, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vramctl.diagnose.facts import FactValue

if TYPE_CHECKING:
    from vramctl.diagnose.catalogue import Catalogue

__all__ = ["PLAN_FACTS", "PLAN_MAY_REVISE", "PLAN_TABLE", "facts_of_plan", "plan_facts", "revise"]

PLAN_FACTS = (
    "device_total_bytes",
    "planned_budget_bytes",
    "planned_weights_per_rank_bytes",
    "planned_kv_bytes",
    "planned_kv_tokens",
    "planned_max_model_len",
    "planned_max_model_len_fit",
    "max_model_len_fits",
    "planned_starts",
    "planned_tp",
    "planned_verdict",
    "planned_model",
)


def plan_facts(source: object, facts: Mapping[str, Any], bytes_read: int) -> dict[str, FactValue]:
    """The planned deployment's facts for the log at `source`, or {} when it cannot be planned offline."""
    from vramctl.diagnose.planfix import deployment_of_log, fits, named_size_of_log

    found = deployment_of_log(source, facts, bytes_read)
    if found is None:  # a model not known offline: the size its name states, weights only (namedsize.py)
        return named_size_of_log(source, facts, bytes_read)
    model, gpu, settings, name = found
    result = fits(model, gpu, settings)
    if result is None:
        return {}
    return facts_of_plan(result, name)


def facts_of_plan(result: Any, name: str) -> dict[str, FactValue]:
    """A `PlanResult` as incident facts (see the module docstring)."""
    from vramctl.core.ledger import WEIGHTS

    weights = result.ledger.get(WEIGHTS)
    if weights is None:
        return {}
    asked = int(result.max_model_len or 0)
    fit = int(result.max_model_len_fit or 0)
    out: dict[str, FactValue] = {
        "device_total_bytes": int(result.capacity_bytes),
        "planned_budget_bytes": int(result.requested_bytes),
        "planned_weights_per_rank_bytes": int(weights.bytes),
        "planned_kv_bytes": int(result.kv_cache_bytes),
        "planned_kv_tokens": int(result.kv_tokens),
        "planned_starts": 1 if result.fits else 0,
        "planned_tp": int(getattr(result.settings, "tensor_parallel_size", 1) or 1),
        "planned_verdict": str(result.verdict),
        "planned_model": name,
    }
    if asked > 0:
        out["planned_max_model_len"] = asked
        out["planned_max_model_len_fit"] = fit
        out["max_model_len_fits"] = 1 if fit >= asked else 0
    return out


PLAN_MAY_REVISE = frozenset(
    {
        "activation-spike",
        "host-oom-killer",
        "gpu-util-exceeds-free-memory",
        "version-regression",
        "batch-budget-too-large",
        "weights-do-not-fit",
        "no-kv-cache-memory",
        "kv-cache-too-small-for-max-model-len",
        "kv-pool-overcommit",
    }
)
"""Labels a low-confidence decision may be revised from by the planned deployment: the fallbacks of a generic wording
(a bare OOM, a kill, a start-up check) and the start-up budget labels. A label a hint or a specific wording gave (a
sampler, logprobs, the encoder, pinned or shared host memory, the runtime pool, a library's allocation) is never
revised: it names who allocated, which a plan of the whole deployment does not know."""

PLAN_TABLE = "planned-deployment"


def revise(
    catalogue: Catalogue, names: dict[str, Any], cause: str, source: object, bytes_read: int
) -> tuple[str, str, str, str] | None:
    """(cause, phase, confidence, why) when the planned deployment decides a low-confidence `cause`, else None.

    The planned facts are added to `names` (the incident's facts) whenever the deployment could be planned."""
    from vramctl.diagnose.facts import evaluate, fill

    if cause not in PLAN_MAY_REVISE or PLAN_TABLE not in catalogue.decisions:
        return None
    planned = plan_facts(source, names, bytes_read)
    if not planned:
        return None
    names.update(planned)
    local = dict(names)
    local["cause_" + cause.replace("-", "_")] = True
    for rule in catalogue.decisions[PLAN_TABLE]:
        if evaluate(rule.when, local):
            why = fill(rule.why, local) if rule.why else None
            return rule.cause or cause, rule.phase or "context", rule.confidence or "low", why or ""
    return None
