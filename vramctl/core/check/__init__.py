"""`vramctl check deploy.yaml`: does a deployment meet its memory requirements? A CI gate, pure.

A spec (docs/check.md) names the model, the card, the engine (+ version), the engine flags (a mapping
named as on the command line, or the whole `command:`), the host's RAM, and `requirements`:

    must_fit: true                                  # the engine starts (verdict `fits`)
    min_concurrency: {context: 8192, value: 32}     # sequences of `context` tokens the KV pool holds at once
    min_kv_tokens: 400000                           # KV token slots
    min_headroom: 4GiB                              # the ledger's slack: left on the card after every term
    max_utilization: 0.95                           # --gpu-memory-utilization / --mem-fraction-static
    max_weights_fraction: 0.5                       # weights per rank / the card
    max_host_memory_fraction: 0.8                   # a host KV tier's pinned RAM / the host's RAM
    allow_at_risk: false                            # accept a plan that fits only if the estimates hold

With any requirement given, a vLLM plan that fits only if its estimates hold (at the pessimistic edge of their
± bands it does not start) fails the `at_risk` check unless `allow_at_risk: true`.

The package: `spec` (the spec's types and `parse_spec`, its engine flags read through the one flag registry,
vramctl.core.engines.flags), `results` (EngineOutcome, CheckItem, CheckResult: render-neutral), `advice` (what
to change when a requirement fails) and `evaluate` (`evaluate`, `run_check`: plan with each engine, check each
requirement).
"""

from __future__ import annotations

from vramctl.core.check.evaluate import Planner, evaluate, run_check
from vramctl.core.check.results import CheckItem, CheckResult, EngineOutcome
from vramctl.core.check.spec import (
    IGNORED_FLAGS,
    REQUIREMENT_KEYS,
    TOP_LEVEL_KEYS,
    ConcurrencyRequirement,
    DeploySpec,
    Requirements,
    apply_flags,
    parse_spec,
    split_serve_command,
)
from vramctl.core.engines.flags import EngineName

__all__ = [
    "IGNORED_FLAGS",
    "REQUIREMENT_KEYS",
    "TOP_LEVEL_KEYS",
    "CheckItem",
    "CheckResult",
    "ConcurrencyRequirement",
    "DeploySpec",
    "EngineName",
    "EngineOutcome",
    "Planner",
    "Requirements",
    "apply_flags",
    "evaluate",
    "parse_spec",
    "run_check",
    "split_serve_command",
]
