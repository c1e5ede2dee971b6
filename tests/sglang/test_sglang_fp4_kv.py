"""SGLang's `--kv-cache-dtype fp4_e2m1` pools: two E2M1 values per byte plus one uint8 scale per 16 values
(`MHATokenToKVPoolFP4` / `MLATokenToKVPoolFP4`; the cell of `_compute_cell_size`), refused where vramctl does not
model them (releases before 0.5.9, hybrid pools) in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vramctl.core.engines import sglang as S
from vramctl.core.errors import BadInputError
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB
from vramctl.registry import load_gpu, load_model

LLAMA = load_model("llama-3-8b")  # 32 layers, 8 KV heads of 128
R1 = load_model("deepseek-r1")  # MLA: 61 layers, latent 512 + rope 64
H200 = load_gpu("h200")
SG = ServeSettings(engine="sglang")


def test_mha_cell_is_half_a_byte_per_value_plus_a_scale_per_16() -> None:
    values = 8 * 2 * 128 * 32  # K and V of one token, every layer
    assert S.cell_size(LLAMA, SG.with_changes(kv_cache_dtype="fp4_e2m1")) == values // 2 + values // 16 == 36864
    # one KV head per rank at TP 8: the same arithmetic over the rank's head
    tp8 = SG.with_changes(kv_cache_dtype="fp4_e2m1", tensor_parallel_size=8)
    assert S.cell_size(LLAMA, tp8) == (2 * 128 * 32) // 2 + (2 * 128 * 32) // 16


def test_mla_cell_counts_the_latent_halved_and_its_scales() -> None:
    cell = S.cell_size(R1, SG.with_changes(kv_cache_dtype="fp4_e2m1"))
    assert cell == 576 * 61 // 2 + 576 // 16 * 61 == 19764
    assert cell < S.cell_size(R1, SG.with_changes(kv_cache_dtype="fp8_e4m3")) // 1.7


def test_the_plan_holds_about_3_5x_the_bf16_tokens() -> None:
    fp4 = S.plan_sglang(LLAMA, H200, SG.with_changes(kv_cache_dtype="fp4_e2m1", engine_version="0.5.18"))
    bf16 = S.plan_sglang(LLAMA, H200, SG.with_changes(engine_version="0.5.18"))
    assert 3.4 < fp4.max_total_num_tokens / bf16.max_total_num_tokens < 3.6  # 131072 / 36864 = 3.56, less the page rounding


@pytest.mark.parametrize("version", ["0.4.6", "0.5.2", "0.5.8"])
def test_releases_before_0_5_9_are_refused(version: str) -> None:
    with pytest.raises(BadInputError, match=r"fp4_e2m1: vramctl sizes SGLang's FP4 KV pools from 0\.5\.9"):
        S.plan_sglang(LLAMA, H200, SG.with_changes(kv_cache_dtype="fp4_e2m1", engine_version=version))


@pytest.mark.parametrize("name", ["gpt-oss-120b", "qwen3-next-80b-a3b"])
def test_hybrid_pools_are_refused(name: str) -> None:
    with pytest.raises(BadInputError, match="hybrid"):
        S.plan_sglang(load_model(name), H200, SG.with_changes(kv_cache_dtype="fp4_e2m1"))


def _vramctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vramctl", *args], capture_output=True, text=True, timeout=120)


def test_cli_plans_it_for_sglang_and_vllm_still_refuses_it() -> None:
    args = ["plan", "--model", "llama-3-8b", "--gpu", "h200", "--kv-cache-dtype", "fp4_e2m1"]
    out = _vramctl(*args, "--engine", "sglang", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["kv_bytes_per_token"] == 36864
    assert data["settings"]["kv_cache_dtype"] == "fp4_e2m1"
    assert data["kv_cache_bytes"] > 40 * GiB
    refused = _vramctl(*args, "--engine", "vllm")
    assert refused.returncode == 2
    assert "fp4_e2m1" in refused.stderr and "Traceback" not in refused.stderr
    old = _vramctl(*args, "--engine", "sglang", "--engine-version", "0.5.2")
    assert old.returncode == 2 and len(old.stderr.strip().splitlines()) == 1, old.stderr
