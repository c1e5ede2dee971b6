"""Audit of issue 2 items 7 and 9 through the CLI: the seed's host tier, the host-RAM warning and failure, and
every verdict label being a label of ../shared/taxonomy.md."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import plan as plan_module
from vramctl.core.units import GiB

TAXONOMY = Path(__file__).resolve().parents[2].parent / "shared" / "taxonomy.md"
SEED_HOST = (
    "--engine",
    "sglang",
    "--mem-fraction-static",
    "0.9",
    "--max-total-tokens",
    "445632",
    "--hicache-ratio",
    "2",
)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    rc = main(["plan", "--json", *args])
    out, err = capsys.readouterr()
    assert rc in (0, 1), err
    return rc, json.loads(out)


def test_seed_host_tier_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    # The seed: a 445,632-token GPU pool, --hicache-ratio 2.0 → 891,264 host tokens ≈ 109 GiB pinned.
    rc, d = _plan(capsys, *SEED_HOST, "--host-memory", "256GiB")
    assert rc == 0 and d["verdict"] == "fits"
    assert d["kv_tokens"] == 445_632
    host = d["host_tier"]
    assert host["host_tokens"] == 891_264
    assert host["pinned_bytes_total"] == host["host_pool_tokens"] * 131_072
    assert 108.5 * GiB < host["pinned_bytes_total"] < 109.5 * GiB
    assert host["status"] == "ok" and d["warnings"] == []


def test_host_tier_warns_on_a_128_gib_box(capsys: pytest.CaptureFixture[str]) -> None:
    rc, d = _plan(capsys, *SEED_HOST, "--host-memory", "128GiB")
    assert rc == 0 and d["verdict"] == "fits"
    assert d["host_tier"]["status"] == "warning"
    assert any("85% of the host's 128.00 GiB" in w for w in d["warnings"])


def test_host_tier_that_cannot_be_pinned_fails_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    rc, d = _plan(capsys, *SEED_HOST, "--host-memory", "100GiB")
    assert rc == 1
    assert d["verdict"] == "host-pinned-memory-failure"
    assert "--hicache-ratio 2" in d["verdict_message"]
    assert "Not enough host memory available" in d["verdict_message"]
    # text output: the verdict line, exit 1
    assert main(["plan", *SEED_HOST, "--host-memory", "100GiB"]) == 1
    assert "verdict: host-pinned-memory-failure" in capsys.readouterr().out


def test_vllm_offload_larger_than_the_host_fails(capsys: pytest.CaptureFixture[str]) -> None:
    rc, d = _plan(capsys, "--kv-offloading-size", "200", "--host-memory", "64GiB")
    assert rc == 1 and d["verdict"] == "host-pinned-memory-failure"
    assert "--kv-offloading-size 200" in d["verdict_message"]


def test_every_verdict_label_is_in_the_taxonomy() -> None:
    if not TAXONOMY.exists():
        pytest.skip("../shared/taxonomy.md not present")
    labels = set(re.findall(r"^- \*\*([a-z0-9-]+)\*\*", TAXONOMY.read_text(encoding="utf-8"), re.M))
    verdicts = {
        plan_module.NO_KV_CACHE_MEMORY,
        plan_module.KV_TOO_SMALL,
        plan_module.GPU_UTIL_EXCEEDS_FREE,
        plan_module.WEIGHTS_DO_NOT_FIT,
        plan_module.KV_POOL_OVERCOMMIT,
        plan_module.HOST_PINNED_MEMORY_FAILURE,
    }
    assert verdicts <= labels, verdicts - labels
    assert plan_module.FITS == "fits"
