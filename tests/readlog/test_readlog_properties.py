"""Property tests: the number parsing keeps the printed precision, noise never changes what is read,
and the ledger always sums exactly to the capacity with the rounding inside the residual's band."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.core.ledger import SLACK
from vramctl.core.units import GiB
from vramctl.diagnose.startup import parse_startup_log

gib = st.integers(min_value=1, max_value=200 * 100).map(lambda c: c / 100)  # 0.01 .. 200.00 GiB


@settings(max_examples=150, deadline=None)
@given(
    total=st.floats(min_value=8.0, max_value=200.0),
    util=st.floats(min_value=0.3, max_value=0.98),
    w_frac=st.floats(0.05, 0.6),
    a_frac=st.floats(0.0, 0.2),
    o_frac=st.floats(0.0, 0.05),
)
def test_v0_ledger_sums_and_rounding_in_band(
    total: float, util: float, w_frac: float, a_frac: float, o_frac: float
) -> None:
    requested = total * util
    w, a, o = requested * w_frac, requested * a_frac, requested * o_frac
    kv = requested - w - a - o
    lines = [
        "INFO 01-13 11:35:23 worker.py:241] Memory profiling takes 1.32 seconds",
        f"INFO 01-13 11:35:23 worker.py:241] the current vLLM instance can use total_gpu_memory ({total:.2f}GiB)"
        f" x gpu_memory_utilization ({util:.2f}) = {requested:.2f}GiB",
        f"INFO 01-13 11:35:23 worker.py:241] model weights take {w:.2f}GiB; non_torch_memory takes {o:.2f}GiB; "
        f"PyTorch activation peak memory takes {a:.2f}GiB; the rest of the memory reserved for KV Cache is "
        f"{kv:.2f}GiB.",
    ]
    report = parse_startup_log(lines)
    ledger = report.ledger
    assert ledger is not None
    assert sum(t.bytes for t in ledger.terms) == ledger.capacity_bytes
    slack = ledger.get(SLACK)
    assert slack is not None
    true_slack = (total - requested) * GiB
    assert abs(slack.bytes - true_slack) <= slack.uncertainty_bytes + 2
    for term in ledger.terms:
        true = {"weights": w, "activation_peak": a, "non_torch": o, "kv_cache": kv}.get(term.name)
        if true is not None:
            assert abs(term.bytes - true * GiB) <= term.uncertainty_bytes + 1


@settings(max_examples=100, deadline=None)
@given(value=gib, decimals=st.integers(0, 4))
def test_printed_precision_gives_the_uncertainty(value: float, decimals: int) -> None:
    text = f"{value:.{decimals}f}"
    report = parse_startup_log([f"INFO 1 [gpu_worker.py:1] Available KV cache memory: {text} GiB"])
    obs = report.facts["kv_cache"]
    assert obs.value == round(float(text) * GiB)
    # vLLM's format_gib rounds to 2 decimals and drops trailing zeros: never less than ±0.005 GiB
    assert obs.uncertainty == 0.5 * 10.0 ** (-max(decimals, 2)) * GiB


@settings(max_examples=100, deadline=None)
@given(noise=st.lists(st.text(max_size=80), max_size=20), tokens=st.integers(1, 10**8))
def test_noise_lines_do_not_change_the_facts(noise: list[str], tokens: int) -> None:
    line = f"INFO 04-29 22:59:31 [kv_cache_utils.py:634] GPU KV cache size: {tokens:,} tokens"
    report = parse_startup_log([*noise, line, *noise])
    assert report.kv_tokens == tokens


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(
        st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x2FFF), max_size=200), max_size=30
    )
)
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    report = parse_startup_log(lines)
    if report.ledger is not None:
        assert sum(t.bytes for t in report.ledger.terms) == report.ledger.capacity_bytes
