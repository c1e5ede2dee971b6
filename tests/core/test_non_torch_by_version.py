"""What of the memory a V1 worker holds before profiling vLLM charges to the budget, by version
(VllmRules.v1_pre_profile_charge; vramctl.core.engines.vllm.estimates.non_torch_charged / pre_snapshot_overhead)."""

from __future__ import annotations

import pytest

from vramctl.core.engines.vllm import estimates as est
from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.ledger import KV_CACHE, NON_TORCH
from vramctl.core.plan import plan
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model


@pytest.mark.parametrize(
    ("version", "charge"),
    [
        ("0.7.3", "none"),  # V0: its own rules
        ("0.8.0", "process"),
        ("0.8.5", "process"),
        ("0.9.0", "process"),
        ("0.9.1", "communicators"),
        ("0.10.2", "communicators"),
        ("0.11.0", "none"),
        ("0.33.0", "none"),
    ],
)
def test_rule_by_version(version: str, charge: str) -> None:
    assert rules_for(version).v1_pre_profile_charge == charge


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("charge", ["none", "communicators", "process"])
def test_what_is_charged_is_no_longer_outside(tp: int, charge: est.PreSnapshotCharge) -> None:
    """The process holds the same memory in every version; only the split between charged and outside moves."""
    base_charged = est.non_torch_charged(version_kind="profile-sum", tp=tp).bytes
    base_outside = est.pre_snapshot_overhead(tp=tp, v0=False).bytes
    charged = est.non_torch_charged(version_kind="profile-sum", tp=tp, pre_snapshot_charge=charge).bytes
    outside = est.pre_snapshot_overhead(tp=tp, v0=False, pre_snapshot_charge=charge).bytes
    assert charged + outside == base_charged + base_outside
    moved = charged - base_charged
    if charge == "none" or (charge == "communicators" and tp == 1):
        assert moved == 0
    elif charge == "communicators":
        assert moved == dict(est.pre_snapshot_overhead(tp=tp, v0=False).parts)["nccl"] > 0
    else:
        assert moved == base_outside and outside == 0


def test_plan_charges_the_communicators_at_0_10_only_with_tp() -> None:
    model, gpu = load_model("llama-3-8b"), load_gpu("h100-sxm")

    def kv_and_non_torch(version: str, tp: int) -> tuple[int, int]:
        result = plan(model, gpu, ServeSettings(engine_version=version, tensor_parallel_size=tp))
        return result.ledger.bytes_of(KV_CACHE), result.ledger.bytes_of(NON_TORCH)

    kv_010, nt_010 = kv_and_non_torch("0.10.1", 2)
    kv_011, nt_011 = kv_and_non_torch("0.11.0", 2)
    comm = dict(est.pre_snapshot_overhead(tp=2, v0=False).parts)["nccl"]
    assert nt_010 == nt_011  # the same memory, booked differently
    assert abs((kv_011 - kv_010) - comm) < 2**20  # the 0.10 budget pays for the communicators


@pytest.mark.parametrize(
    ("version", "charges"),
    [
        ("0.2.1", False),  # torch's max_memory_allocated
        ("0.2.5", True),  # PR #2031: total - free after the profile run
        ("0.3.1", False),  # PR #2863: from the free memory at init
        ("0.6.3", False),
        ("0.6.4", True),  # PR #9352: used - torch allocated, device-wide
        ("0.6.4.post1", True),
        ("0.6.5", False),  # PR #10511: memory_profiling from the init baseline
        ("0.8.5", False),  # V1: v1_pre_profile_charge instead
    ],
)
def test_v0_releases_that_charge_the_whole_process(version: str, charges: bool) -> None:
    assert rules_for(version).v0_charges_process is charges


def test_v0_0_6_4_budget_pays_for_the_cuda_context() -> None:
    """A synthesised 1-GPU V0 start-up: 0.6.4 charges the CUDA context and cuBLAS (used − torch allocated is
    device-wide), 0.6.5 counts only the growth since its init baseline; the process holds the same memory in both."""
    model, gpu = load_model("llama-3-8b"), load_gpu("a100-80gb")

    def kv_and_non_torch(version: str) -> tuple[int, int]:
        result = plan(model, gpu, ServeSettings(engine_version=version))
        return result.ledger.bytes_of(KV_CACHE), result.ledger.bytes_of(NON_TORCH)

    kv_064, nt_064 = kv_and_non_torch("0.6.4")
    kv_065, nt_065 = kv_and_non_torch("0.6.5")
    assert nt_064 == nt_065
    assert abs((kv_065 - kv_064) - est.CALIBRATION.cuda_context_bytes) < 2**20
    charged = est.non_torch_charged(version_kind="v0", tp=1, pre_snapshot_charge="process").bytes
    assert charged == est.non_torch_charged(version_kind="v0", tp=1).bytes + est.CALIBRATION.cuda_context_bytes
    assert est.pre_snapshot_overhead(tp=1, v0=True, pre_snapshot_charge="process").bytes == 0
