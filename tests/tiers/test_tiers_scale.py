"""tiers at scale: the numpy stack-distance curve, SHARDS sampling, sharded counting (processes and Dask)."""

from __future__ import annotations

import gzip
import json
import os
import random
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.cli.main import main
from vramctl.tiers import stackdist
from vramctl.tiers.simulate import lru_sweep
from vramctl.tiers.trace import SyntheticSpec, Trace, load_mooncake, parse_mooncake_lines, synthetic_trace

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake"
CONVERSATION = DATA / "conversation_trace.jsonl"
needs_data = pytest.mark.skipif(not CONVERSATION.exists(), reason="needs ../shared (the Mooncake traces)")
SWEEP = [round(10 ** (4 + 4.2 * i / 19)) for i in range(20)]


def reference(trace: Trace, capacity_blocks: int | None) -> tuple[int, float]:
    """An OrderedDict prefix-LRU replay (lookup before the request's own touches)."""
    bs = trace.block_size
    cache: OrderedDict[int, None] = OrderedDict()
    hit_tokens, share = 0, 0.0
    for length, blocks in zip(trace.input_lengths, trace.blocks, strict=True):
        k = 0
        while k < len(blocks) and blocks[k] in cache:
            k += 1
        hit = min(k * bs, length)
        hit_tokens += hit
        share += hit / length
        for b in blocks:
            if b in cache:
                cache.move_to_end(b)
            else:
                cache[b] = None
                if capacity_blocks is not None and len(cache) > capacity_blocks:
                    cache.popitem(last=False)
    return hit_tokens, share


def trace_of(requests: list[list[int]], bs: int = 4, extra: list[int] | None = None) -> Trace:
    lines = [
        json.dumps(
            {
                "timestamp": i,
                "input_length": len(ids) * bs - (extra[i] if extra else 0),
                "output_length": 1,
                "hash_ids": ids,
            }
        )
        for i, ids in enumerate(requests)
    ]
    return parse_mooncake_lines(lines, block_size=bs)


@settings(max_examples=120, deadline=None)
@given(
    requests=st.lists(st.lists(st.integers(0, 14), min_size=1, max_size=6), min_size=1, max_size=40),
    shards=st.integers(1, 3),
)
def test_exact_curve_equals_an_ordereddict_replay_at_every_capacity(
    requests: list[list[int]], shards: int
) -> None:
    # Random ids (not prefix-chained), repeats inside a request included: the curve must still be exact.
    trace = trace_of(requests)
    curve = stackdist.exact_curve(stackdist.columns_of(trace), shards=shards)
    for capacity in [*range(1, 18), None]:
        hit, share = reference(trace, capacity)
        got_hit, got_share = curve.at(capacity)
        assert got_hit == hit, (capacity, got_hit, hit)
        assert got_share == pytest.approx(share, rel=1e-9, abs=1e-12)


def test_exact_curve_on_a_synthetic_multi_turn_trace_with_partial_blocks() -> None:
    trace = synthetic_trace(SyntheticSpec(sessions=120, turns=4, system=300, seed=5), block_size=64)
    curve = stackdist.exact_curve(stackdist.columns_of(trace))
    for capacity in (1, 3, 10, 40, 200, 1000, None):
        hit, share = reference(trace, capacity)
        assert curve.at(capacity)[0] == hit
        assert curve.at(capacity)[1] == pytest.approx(share, rel=1e-9)


@needs_data
def test_numpy_sweep_keeps_the_conversation_hit_rates_and_shards_agree() -> None:
    cols = stackdist.load_columns(str(CONVERSATION), block_size=512)
    trace = load_mooncake(CONVERSATION)
    exact = lru_sweep(cols, SWEEP)
    for capacity, result in zip(SWEEP[::5], exact[::5], strict=True):
        assert result.hit_tokens == reference(trace, capacity // 512)[0]
    sharded = stackdist.exact_curve(cols, shards=4)
    single = stackdist.exact_curve(cols)
    assert np.array_equal(sharded.distances, single.distances)
    assert np.array_equal(sharded.cum_tokens, single.cum_tokens)


@needs_data
def test_sampled_curve_is_within_a_point_of_exact_at_one_percent() -> None:
    cols = stackdist.load_columns(str(CONVERSATION), block_size=512)
    exact = stackdist.exact_curve(cols)
    total = cols.input_tokens
    worst, mean = [], []
    for seed in range(8):
        sampled = stackdist.sampled_curve(cols, rate=0.01, seed=seed)
        assert sampled.method == "shards-fixed-rate" and sampled.sample_rate == 0.01
        errors = [abs(sampled.at(c // 512)[0] - exact.at(c // 512)[0]) / total for c in SWEEP]
        worst.append(max(errors))
        mean.append(sum(errors) / len(errors))
    # Measured: the largest error over the 20 points is 0.0024-0.0065 for 7 seeds, 0.0103 for one; the mean 0.001.
    assert sorted(worst)[len(worst) // 2] <= 0.01 and max(worst) <= 0.011, worst
    assert max(mean) <= 0.002, mean


def test_sampled_curves_converge_and_fixed_size_keeps_its_bound() -> None:
    trace = synthetic_trace(SyntheticSpec(sessions=3000, turns=4, system=1024, seed=2), block_size=64)
    cols = stackdist.columns_of(trace)
    exact = stackdist.exact_curve(cols)
    caps = [50, 200, 1000, 4000, 20000, None]
    full = stackdist.sampled_curve(cols, rate=1.0)
    assert [full.at(c)[0] for c in caps] == [exact.at(c)[0] for c in caps]  # R = 1 is the exact curve
    tenth = stackdist.sampled_curve(cols, rate=0.1)
    for c in caps[1:]:  # R·C >= 10 sampled blocks: below that SHARDS cannot resolve distances
        assert abs(tenth.at(c)[0] - exact.at(c)[0]) / cols.input_tokens <= 0.03
    bounded = stackdist.sampled_curve(cols, size=2000)
    assert bounded.method == "shards-fixed-size"
    assert bounded.sample_rate is not None and bounded.sample_rate < 1.0
    for c in caps:
        assert abs(bounded.at(c)[0] - exact.at(c)[0]) / cols.input_tokens <= 0.05
        assert bounded.expected_error(c) >= 0.0


def test_hit_token_sums_beyond_2_to_the_31() -> None:
    # 3,000 requests of one 2 M-token block, all the same block: 5,998,000,000 hit tokens (int32 would wrap).
    n = 3000
    cols = stackdist.make_columns(
        np.full(n, 2_000_000), np.ones(n, dtype=np.int32), np.zeros(n, dtype=np.int32), block_size=2_000_000
    )
    assert stackdist.exact_curve(cols).at(None)[0] == (n - 1) * 2_000_000
    assert stackdist.sampled_curve(cols, rate=1.0).at(None)[0] == (n - 1) * 2_000_000


def test_columns_stream_plain_gzip_and_sorted(tmp_path: Path) -> None:
    rng = random.Random(4)
    rows = []
    for _ in range(200):
        n = rng.randint(1, 4)
        rows.append(
            {"timestamp": rng.randint(0, 50), "input_length": n * 16, "output_length": 1,
             "hash_ids": [rng.randint(0, 30) for _ in range(n)]}
        )  # fmt: skip
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    plain, packed = tmp_path / "t.jsonl", tmp_path / "t.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    want = stackdist.columns_of(load_mooncake(plain, block_size=16, sort_by_time=True))
    for path in (plain, packed):
        got = stackdist.load_columns(str(path), block_size=16, sort_by_time=True)
        assert np.array_equal(got.input_lengths, want.input_lengths)
        assert np.array_equal(got.offsets, want.offsets)
        a, b = stackdist.exact_curve(got), stackdist.exact_curve(want)
        assert np.array_equal(a.distances, b.distances) and np.array_equal(a.cum_tokens, b.cum_tokens)


_DIE_MARK = "VRAMCTL_TEST_DIE_MARK"


def _dies_once(part: tuple[Any, Any], lo: Any, s: Any) -> Any:
    mark = Path(os.environ[_DIE_MARK])
    if not mark.exists():
        mark.write_text("died")
        os._exit(1)
    return stackdist.dominance_counts(part[0], part[1], lo, s)


def _always_dies(part: tuple[Any, Any], lo: Any, s: Any) -> Any:
    os._exit(1)


def test_a_worker_that_dies_is_retried_once_then_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = synthetic_trace(SyntheticSpec(sessions=60, turns=3, seed=1), block_size=64)
    cols = stackdist.columns_of(trace)
    want = stackdist.exact_curve(cols)
    monkeypatch.setenv(_DIE_MARK, str(tmp_path / "mark"))
    got = stackdist.exact_curve(cols, shards=2, runner=stackdist.local_runner(2, _dies_once))
    assert np.array_equal(got.cum_tokens, want.cum_tokens)
    with pytest.raises(stackdist.ShardFailedError, match=r"failed twice .*no partial curve"):
        stackdist.exact_curve(cols, shards=2, runner=stackdist.local_runner(2, _always_dies))


def _sweep_json(capsys: pytest.CaptureFixture[str], path: str, *extra: str) -> dict[str, Any]:
    code = main(["tiers", "simulate", "--trace", path, "--block-size", "64", "--sweep", "640,6400,64000,unlimited",
                 "--json", *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    return dict(json.loads(out))


@pytest.fixture
def saved_trace(tmp_path: Path) -> str:
    path = tmp_path / "syn.jsonl"
    code = main(["tiers", "simulate", "--synthetic", "sessions=80,turns=4,system=256,seed=9", "--block-size", "64",
                 "--save-trace", str(path), "--json"])  # fmt: skip
    assert code == 0
    return str(path)


def test_cli_workers_give_the_same_sweep(capsys: pytest.CaptureFixture[str], saved_trace: str) -> None:
    capsys.readouterr()
    one = _sweep_json(capsys, saved_trace)
    two = _sweep_json(capsys, saved_trace, "--workers", "2")
    assert one["sweep"] == two["sweep"] and two["workers"] == 2 and one["sampling"] is None
    sampled = _sweep_json(capsys, saved_trace, "--sample-rate", "0.5")
    assert sampled["method"] == "shards-fixed-rate" and sampled["sampling"]["sample_rate"] == 0.5
    assert len(sampled["sampling"]["expected_error"]) == 4
    # The CLI streams the file for a sampled curve; the same estimate as from the columns in memory.
    cols = stackdist.load_columns(saved_trace, block_size=64)
    want = lru_sweep(cols, [640, 6400, 64000, None], profile=stackdist.sampled_curve(cols, rate=0.5))
    assert [p["hit_tokens"] for p in sampled["sweep"]] == [r.hit_tokens for r in want]
    assert sampled["requests"] == cols.num_requests and sampled["unique_blocks"] == cols.num_unique_blocks


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--sample-rate", "0"], "--sample-rate 0: must be in (0, 1]"),
        (["--sample-rate", "0.1", "--sample-size", "10"], "give one"),
        (["--sample-size", "0"], "--sample-size 0: must be at least 1"),
        (["--workers", "0"], "--workers 0: must be between 1 and 256"),
        (["--sample-rate", "0.1", "--workers", "2"], "runs in one process"),
        (["--sample-rate", "0.1", "--host-capacity", "1e4"], "a tiered sweep replays each point"),
        (["--workers", "2", "--eviction", "lfu"], "only LRU has stack distances"),
        (["--dask", "http://x"], "not a scheduler address"),
    ],
)
def test_bad_scale_flags(
    capsys: pytest.CaptureFixture[str], saved_trace: str, args: list[str], needle: str
) -> None:
    capsys.readouterr()
    code = main(["tiers", "simulate", "--trace", saved_trace, "--block-size", "64", "--sweep", "640", *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_curve(
    capsys: pytest.CaptureFixture[str], saved_trace: str
) -> None:
    pytest.importorskip("distributed", reason="needs the optional dask[distributed] (vramctl[tiers-cluster])")
    capsys.readouterr()
    one = _sweep_json(capsys, saved_trace)
    cluster = _sweep_json(capsys, saved_trace, "--dask", "local", "--workers", "2")
    assert cluster["sweep"] == one["sweep"] and cluster["dask"] == "local"


@pytest.mark.slow
def test_unreachable_dask_scheduler_is_one_line(capsys: pytest.CaptureFixture[str], saved_trace: str) -> None:
    pytest.importorskip("distributed", reason="needs the optional dask[distributed] (vramctl[tiers-cluster])")
    capsys.readouterr()
    code = main(["tiers", "simulate", "--trace", saved_trace, "--block-size", "64", "--sweep", "640",
                 "--dask", "tcp://127.0.0.1:1"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "cannot reach the scheduler" in err and err.count("\n") == 1, err
