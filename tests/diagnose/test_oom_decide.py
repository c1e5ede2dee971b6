"""The decision tables, property-tested over synthesised fact records (no log involved).

Each property is a statement of the memory model (who holds the memory, and when) that must hold for every
combination of numbers, phases, hints and settings, not only for the logs the rules were written from.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.diagnose import LABELS, PHASES
from vramctl.diagnose.decide import FactRecord, decide, markdown_table
from vramctl.diagnose.fixvalues import HAND_FIXES, NUMERIC_FIXES, is_numeric_value, numeric_fix, plain_value

GiB = 1 << 30
HINTS = (
    "pinned",
    "sampler",
    "logprobs",
    "multimodal",
    "multimodal_model",
    "cudagraph_env",
    "kv_alloc",
    "non_torch",
)
REAL_PHASES = tuple(p for p in PHASES if p != "unknown")


@st.composite
def records(draw: st.DrawFn, hints: tuple[str, ...] = HINTS) -> FactRecord:
    total = draw(st.integers(8, 200)) * GiB
    numbers: dict[str, int] = {"total_bytes": total}
    for name in ("requested_bytes", "free_bytes", "allocated_bytes", "reserved_unallocated_bytes"):
        if draw(st.booleans()):
            numbers[name] = draw(st.integers(0, total))
    if draw(st.booleans()):
        numbers["other_process_bytes"] = draw(st.integers(0, total))
    if draw(st.booleans()):
        numbers["this_process_bytes"] = draw(st.integers(0, total))
    settings_: dict[str, float] = {}
    if draw(st.booleans()):
        settings_["gpu_memory_utilization"] = draw(st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.98]))
    return FactRecord(
        phase=draw(st.one_of(st.none(), st.sampled_from(REAL_PHASES))),
        numbers=numbers,
        settings=settings_,
        hints=frozenset(draw(st.lists(st.sampled_from(hints), max_size=3))) if hints else frozenset(),
        engine=draw(st.sampled_from([None, "vllm", "sglang"])),
    )


@settings(max_examples=300, deadline=None)
@given(records())
def test_decide_always_answers_a_memory_label_and_a_phase(record: FactRecord) -> None:
    d = decide(record)
    assert d.cause in LABELS and d.cause not in ("no-failure", "not-oom")
    assert d.phase in PHASES
    assert d.confidence in ("high", "medium", "low")


@settings(max_examples=200, deadline=None)
@given(records())
def test_pinned_host_memory_is_never_a_gpu_label(record: FactRecord) -> None:
    # a pinned host allocation fails on host limits whatever the GPU's numbers say
    d = decide(
        FactRecord(
            record.phase, record.numbers, record.settings, record.hints | {"pinned"}, engine=record.engine
        )
    )
    assert d.cause == "host-pinned-memory-failure" and d.phase == "host-tier"


@settings(max_examples=200, deadline=None)
@given(records(hints=()), st.sampled_from(["graph-capture"]))
def test_after_kv_sizing_capture_is_the_capture(record: FactRecord, phase: str) -> None:
    # after the KV cache took its share, a plain allocation failure during capture is the graph pool's
    d = decide(FactRecord(phase, record.numbers, record.settings, frozenset(), frozenset(), record.engine))
    assert d.cause == "cuda-graph-capture-oom"


@settings(max_examples=300, deadline=None)
@given(
    st.integers(16, 160),
    st.floats(0.001, 0.05),
    st.floats(1.05, 3.0),
    st.floats(0.3, 0.9),
    st.sampled_from([None, "serving"]),
)
def test_cached_free_blocks_that_would_hold_the_request_are_fragmentation(
    total_gib: int, free_frac: float, over: float, alloc_frac: float, phase: str | None
) -> None:
    total = total_gib * GiB
    free = int(free_frac * total)
    requested = int(free * over) + 1
    reserved_unallocated = requested  # the cache alone would hold it
    record = FactRecord(
        phase,
        {
            "total_bytes": total,
            "free_bytes": free,
            "requested_bytes": requested,
            "reserved_unallocated_bytes": reserved_unallocated,
            "allocated_bytes": int(alloc_frac * total),
        },
        engine="vllm",
    )
    if reserved_unallocated < min(GiB, 0.1 * total) and free + reserved_unallocated < 0.1 * total:
        # only a residue of partly used segments (PyTorch returns wholly free ones before it raises): even
        # contiguous it could not carry the work, so the budget rules decide (round 5 of issue 9)
        assert decide(record).cause != "allocator-fragmentation"
    else:
        assert decide(record).cause == "allocator-fragmentation"


@settings(max_examples=300, deadline=None)
@given(records(hints=()))
def test_fragmentation_while_an_engine_serves_is_never_high(record: FactRecord) -> None:
    # an engine serving inside the budget it sized has thin headroom by design and its activations leave cached
    # blocks behind: the numbers cannot tell fragmentation from that budget, so never "high"
    d = decide(FactRecord("serving", record.numbers, record.settings, record.hints, engine="vllm"))
    if d.cause == "allocator-fragmentation":
        assert d.confidence != "high"


@settings(max_examples=300, deadline=None)
@given(
    st.integers(16, 160),
    st.floats(0.25, 0.9),
    st.sampled_from([None, "startup-check", "weights-load", "profiling"]),
)
def test_memory_held_by_another_process_before_serving_is_the_budget_check(
    total_gib: int, other_frac: float, phase: str | None
) -> None:
    total = total_gib * GiB
    other = int(other_frac * total)
    record = FactRecord(
        phase,
        {
            "total_bytes": total,
            "free_bytes": GiB // 4,
            "requested_bytes": GiB // 2,
            "other_process_bytes": other,
            "reserved_unallocated_bytes": 0,
            "allocated_bytes": total - other - GiB // 4,
        },
        engine="vllm",
    )
    assert decide(record).cause == "gpu-util-exceeds-free-memory"


@settings(max_examples=200, deadline=None)
@given(records(hints=()))
def test_host_words_decide_host_labels(record: FactRecord) -> None:
    d = decide(FactRecord(record.phase, record.numbers, hints=frozenset({"host_memory"})), "host-words")
    assert d.cause == "host-oom-killer"
    d = decide(FactRecord(record.phase, record.numbers, hints=frozenset({"bus_error"})), "host-memory")
    assert d.cause == "host-shm-exhausted"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted({row.cause for row in NUMERIC_FIXES})),
    st.sampled_from(PHASES),
    st.sampled_from([None, "vllm", "sglang", "tgi", "ray", "lmcache", "llamacpp", "lmdeploy"]),
    st.dictionaries(
        st.sampled_from(
            [
                "gpu_memory_utilization",
                "mem_fraction_static",
                "max_num_seqs",
                "max_num_batched_tokens",
                "max_model_len",
                "tensor_parallel_size",
                "chunked_prefill_size",
                "max_running_requests",
                "swap_space",
                "buffer_request_bytes",
                "cache_max_entry_count",
                "n_ubatch",
            ]
        ),
        st.one_of(st.sampled_from([0.3, 0.5, 0.85, 0.9, 0.95, 0.99]), st.integers(1, 1_000_000)),
        max_size=4,
    ),
)
def test_numeric_fixes_are_pasteable_numbers(
    cause: str, phase: str, engine: str | None, facts: dict[str, float]
) -> None:
    found = numeric_fix(cause, phase, facts, engine)
    if found is None:
        return
    flag, value, _action, reason = found
    assert reason
    assert is_numeric_value(value)
    assert "," not in value and plain_value(value) == value
    assert re.fullmatch(r"[A-Z][A-Za-z_]+|--[a-z][a-z-]+", flag)
    if "utilization" in flag or "fraction" in flag:
        assert 0.05 <= float(value) <= 0.99
    else:
        # no layer on the GPU: a count, and one that always loads
        assert float(value) > 0 or flag == "--n-gpu-layers"


@settings(max_examples=200, deadline=None)
@given(records(hints=()), st.integers(0, 60), st.sampled_from([None, "serving", "profiling", "kv-alloc"]))
def test_a_traceback_cut_in_the_schedulers_kv_slots_is_the_pool_running_out(
    record: FactRecord, lines_to_end: int, phase: str | None
) -> None:
    # SGLang's scheduler takes KV slots for a new batch and raises only when the token pool is empty: whatever the
    # numbers, a traceback cut there is the runtime pool, never a start-up budget
    numbers = {**record.numbers, "lines_to_end": lines_to_end}
    d = decide(FactRecord(phase, numbers, hints=frozenset({"kv_pool_runtime"})), "cut-traceback")
    assert (d.cause, d.phase, d.confidence) == ("kv-pool-exhausted-runtime", "serving", "low")
    # cut long before the end, the traceback was followed by more log: no rule reads it
    far = decide(
        FactRecord(
            phase, {**record.numbers, "lines_to_end": 61 + lines_to_end}, hints=frozenset({"kv_pool_runtime"})
        ),
        "cut-traceback",
        default="not-oom",
    )
    assert far.cause == "not-oom"


@settings(max_examples=200, deadline=None)
@given(records(hints=()), st.sampled_from([None, "kv-alloc", "weights-load", "profiling"]))
def test_a_kv_cache_sized_for_the_context_is_never_an_overcommitted_budget(
    record: FactRecord, phase: str | None
) -> None:
    # who sized the KV cache decides: sized for the whole context (not from the free memory), failing to allocate it
    # means the context does not fit beside the weights, whatever the numbers (pinned host memory aside)
    d = decide(FactRecord(phase, record.numbers, hints=frozenset({"kv_context_sized"})))
    assert d.cause == "no-kv-cache-memory" or (d.cause == "gpu-util-exceeds-free-memory" and d.confidence != "high")


def test_llamacpp_and_lmdeploy_get_numbers_without_settings() -> None:
    # the compute buffers follow n_ubatch (llama.cpp default 512); TurboMind's KV share (LMDeploy default 0.8)
    assert numeric_fix("batch-budget-too-large", "profiling", {}, "llamacpp")[:2] == ("--ubatch-size", "256")
    assert numeric_fix("batch-budget-too-large", "profiling", {"n_ubatch": 2048}, "llamacpp")[:2] == (
        "--ubatch-size",
        "1024",
    )
    assert numeric_fix("kv-pool-overcommit", "kv-alloc", {}, "lmdeploy")[:2] == (
        "--cache-max-entry-count",
        "0.4",
    )
    assert numeric_fix("kv-pool-overcommit", "kv-alloc", {"cache_max_entry_count": 0.5}, "lmdeploy")[:2] == (
        "--cache-max-entry-count",
        "0.25",
    )


def test_vllm_without_settings_still_gets_a_number_for_every_budget_label() -> None:
    # the log prints no setting: the engine's default is the starting point, and the reason says so
    for cause in (
        "gpu-util-exceeds-free-memory",
        "weights-do-not-fit",
        "no-kv-cache-memory",
        "batch-budget-too-large",
        "sampler-warmup-oom",
        "cuda-graph-capture-oom",
        "activation-spike",
        "logprobs-spike",
        "non-torch-allocation-oom",
        "attention-workspace-overflow",
    ):
        found = numeric_fix(cause, "serving", {}, "vllm")
        assert found is not None, cause
        assert "default" in found[3] or "no parallel size" in found[3], found


def test_plain_value_drops_thousands_separators_only_from_numbers() -> None:
    assert plain_value("205,728") == "205728"
    assert plain_value("1,048,576") == "1048576"
    assert plain_value("expandable_segments:True") == "expandable_segments:True"
    assert plain_value("0.64") == "0.64"


def test_the_tables_print_for_the_docs() -> None:
    text = markdown_table("gpu-allocation")
    assert text.count("\n") > 10 and "`allocator-fragmentation`" in text


def test_the_docs_print_the_tables_the_catalogue_holds() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "explain-oom.md").read_text(encoding="utf-8")
    for table in ("gpu-allocation", "host-words", "host-memory", "cut-traceback"):
        assert markdown_table(table) in docs, f"docs/explain-oom.md: the {table} table is out of date"
    for row in HAND_FIXES:
        assert f"| `{row.cause}` | `{row.flag}` | {', '.join(row.engines)} | `{row.value}` |" in docs
    from vramctl.diagnose.fixknobs import markdown_tables

    assert markdown_tables() in docs, "docs/explain-oom.md: the engine knob tables are out of date"
