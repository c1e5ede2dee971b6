"""SGLang's HiCache version switches live in the SGLang rules module (`HiCacheRules`,
vramctl/core/engines/sglang/rules.py); vramctl/core/host_tier.py asks them and compares no versions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.core.test_core_layout import CORE, version_comparisons
from vramctl.core import host_tier
from vramctl.core.engines.sglang.rules import hicache_rules
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB
from vramctl.registry import load_model

LLAMA = load_model("llama-3-8b")


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.4.6.post5", (False, False, False, False, False)),
        ("0.5.9", (False, False, False, False, False)),
        ("0.5.18", (False, False, True, True, False)),
        ("0.5.22", (False, False, True, True, False)),
        ("0.5.23", (True, True, True, True, True)),
        (None, (True, True, True, True, True)),
    ],
)
def test_hicache_switches_by_version(version: str | None, expected: tuple[bool, ...]) -> None:
    r = hicache_rules(version)
    got = (r.buffer_only_ratio, r.auto_size, r.pool_log_has_tokens, r.small_host_pool_warns, r.available_per_rank)
    assert got == expected


def test_host_tier_compares_no_versions() -> None:
    assert version_comparisons(CORE / "host_tier.py") == []
    assert version_comparisons(CORE / "engines" / "sglang" / "rules.py")


def test_host_tier_follows_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flip 0.5.9's switches: the host plan's log line, small-pool note and buffer-only ratio follow."""
    old = hicache_rules("0.5.9")
    flipped = replace(old, pool_log_has_tokens=True, small_host_pool_warns=True, buffer_only_ratio=True)
    monkeypatch.setattr(host_tier, "hicache_rules", lambda version=None: flipped)
    s = ServeSettings(engine="sglang", enable_hierarchical_cache=True, host_memory_bytes=1024 * GiB)
    p = host_tier.plan_hicache(
        LLAMA, s, device_kv_tokens=100_000, kv_bytes_per_token=131072, version="0.5.9", buffer_only=True
    )
    assert p.log_line.startswith("Allocating kv hierarchical KV host pool:")
    assert p.ratio_to_device == pytest.approx(1.2, rel=0.01)
    small = host_tier.plan_hicache(
        LLAMA, replace(s, hicache_ratio=0.5), device_kv_tokens=100_000, kv_bytes_per_token=131072, version="0.5.9"
    )
    assert any("smaller than the device pool" in n for n in small.notes)


def test_host_tier_at_0_5_9_keeps_the_old_wording() -> None:
    s = ServeSettings(engine="sglang", enable_hierarchical_cache=True, host_memory_bytes=1024 * GiB)
    p = host_tier.plan_hicache(
        LLAMA, s, device_kv_tokens=100_000, kv_bytes_per_token=131072, version="0.5.9", buffer_only=True
    )
    assert p.log_line.endswith("GB host memory for hierarchical KV cache.")
    assert p.ratio_to_device == pytest.approx(2.0, rel=0.01)
    small = host_tier.plan_hicache(
        LLAMA, replace(s, hicache_ratio=0.5), device_kv_tokens=100_000, kv_bytes_per_token=131072, version="0.5.9"
    )
    assert any("asserts the host pool is larger" in n for n in small.notes)
