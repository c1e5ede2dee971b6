"""Cards added in session 9 (issue 11): AMD Radeon (RDNA3 / RDNA4) and the NVIDIA boards still missing, each with the
total its runtime reports (from a public log where one was found, else marked approximate), and the one-line refusal
of devices vramctl has no memory rules for (Ascend, Hygon, Apple, Intel, TPU / Neuron), naming --gpu-memory."""

from __future__ import annotations

import pytest

from vramctl.cli.main import main
from vramctl.core.units import GiB, MiB
from vramctl.registry import load_gpu

# (name as a user or torch writes it, id, CUDA / HIP total in GiB to 2 decimals, nvidia-smi / rocm-smi MiB, logged)
CARDS = [
    ("AMD Radeon AI PRO R9700", "radeon-ai-pro-r9700", 31.86, 32624, True),
    ("Radeon RX 7900 XTX", "rx-7900-xtx", 23.98, 24560, True),
    ("RX 7900 XT", "rx-7900-xt", 19.98, 20464, False),
    ("AMD Radeon PRO W7900", "radeon-pro-w7900", 47.98, 49136, True),
    ("W7800", "radeon-pro-w7800", 31.98, 32752, False),
    ("Radeon PRO W7800 48GB", "radeon-pro-w7800-48gb", 47.98, 49136, False),
    ("NVIDIA RTX PRO 4000 Blackwell", "rtx-pro-4000", 23.44, 24467, False),
    ("NVIDIA RTX PRO 4500 Blackwell", "rtx-pro-4500", 31.41, 32623, False),
    ("NVIDIA RTX PRO 5000 Blackwell", "rtx-pro-5000", 47.34, 48935, False),
    ("RTX PRO 5000 72GB", "rtx-pro-5000-72gb", 71.25, 73415, False),
    ("NVIDIA GeForce RTX 5060", "rtx-5060", 7.51, 8151, False),
    ("RTX 5060 Ti 8GB", "rtx-5060-ti-8gb", 7.51, 8151, False),
    ("NVIDIA GeForce RTX 4060", "rtx-4060", 7.55, 8188, False),
    ("RTX 4070 SUPER", "rtx-4070-super", 11.54, 12282, False),
    ("RTX 3050", "rtx-3050", 7.55, 8192, False),
    ("NVIDIA RTX A4500", "rtx-a4500", 19.54, 20470, False),
    ("RTX A2000", "rtx-a2000-12gb", 11.54, 12282, False),
    ("NVIDIA RTX 2000 Ada Generation", "rtx-2000-ada", 15.55, 16380, False),
    ("NVIDIA RTX 4500 Ada Generation", "rtx-4500-ada", 23.54, 24570, False),
    ("NVIDIA TITAN RTX", "titan-rtx", 23.55, 24576, False),
    ("Quadro RTX 6000", "quadro-rtx-6000", 23.55, 24576, False),
    ("RTX 2080 SUPER", "rtx-2080-super", 7.55, 8192, False),
    ("RTX 2070 SUPER", "rtx-2070-super", 7.55, 8192, False),
    ("NVIDIA H20-3e", "h20-141gb", 139.72, 143771, False),
    ("H800 PCIe", "h800-pcie", 79.18, 81559, False),
    ("NVIDIA A800-PCIE-40GB", "a800-40gb", 39.5, 40960, False),
]


@pytest.mark.parametrize(("typed", "gpu_id", "total_gib", "smi_mib", "logged"), CARDS, ids=[c[1] for c in CARDS])
def test_card_totals_and_sources(typed: str, gpu_id: str, total_gib: float, smi_mib: int, logged: bool) -> None:
    gpu = load_gpu(typed)
    assert gpu.name == gpu_id
    assert f"{gpu.cuda_total_bytes / GiB:.2f}" == f"{total_gib:.2f}"
    assert gpu.nvidia_smi_total_mib == smi_mib
    sources = dict(gpu.sources)
    total_source = sources.get("cuda_total_gib") or sources.get("cuda_total_bytes") or ""
    assert ("approximate" in total_source) != logged


def test_rdna_cards_are_amd_with_their_llvm_target() -> None:
    assert load_gpu("rx-7900-xtx").vendor == "amd" and load_gpu("rx-7900-xtx").compute_capability == "gfx1100"
    r9700 = load_gpu("r9700")
    assert r9700.vendor == "amd" and r9700.compute_capability == "gfx1201"
    assert r9700.cuda_total_bytes == 34208743424 == 32624 * MiB


@pytest.mark.parametrize(
    ("typed", "what"),
    [
        ("Ascend 910B", "Ascend NPU"),
        ("Atlas 800I A2", "Ascend NPU"),
        ("Hygon DCU K100", "Hygon DCU"),
        ("Apple M3 Max", "Apple silicon"),
        ("Gaudi 3", "Gaudi HPU"),
        ("Intel Arc B580", "Intel XPU"),
        ("Intel Data Center GPU Max 1550", "Intel XPU"),
        ("TPU v5e", "TPU"),
    ],
)
def test_devices_without_rules_are_refused_in_one_line(
    typed: str, what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["plan", "--model", "llama-3-8b", "--gpu", typed])
    err = capsys.readouterr().err
    assert code == 2
    assert what in err and "--gpu-memory" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_unknown_card_names_gpu_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--model", "llama-3-8b", "--gpu", "h9000"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown GPU 'h9000'" in err and "--gpu-memory" in err
    assert len(err.strip().splitlines()) == 1


def test_an_ambiguous_rtx_6000_stays_unknown() -> None:
    """'RTX 6000' is the Turing Quadro, the Ampere RTX A6000 or the RTX 6000 Ada: no alias picks one."""
    with pytest.raises(Exception, match="unknown GPU 'RTX 6000'"):
        load_gpu("RTX 6000")


def test_d_variants_and_hgx_names() -> None:
    assert load_gpu("RTX 4090 D").name == "rtx-4090"
    assert load_gpu("NVIDIA GeForce RTX 5090 D").name == "rtx-5090"
    assert load_gpu("HGX B200").name == "b200"


def test_a_memory_size_never_resolves_to_another_board() -> None:
    """'RTX 3060 8GB' is the 8 GB RTX 3060 (not bundled): the RTX 3060 Ti also has 8 GB but is another board."""
    with pytest.raises(Exception, match="bundled NVIDIA GeForce RTX 3060 has 12 GB, not 8 GB"):
        load_gpu("RTX 3060 8GB")
    assert load_gpu("RTX 3060 12GB").name == "rtx-3060"
    assert load_gpu("RTX 3060 Ti 8GB").name == "rtx-3060-ti"
    assert load_gpu("h100 94gb").name == load_gpu("H100 NVL").name


def test_the_runtime_name_without_its_vendor_word() -> None:
    """`GeForce RTX 4090` (nvidia-smi's name less `NVIDIA`, as some tools print it) is the RTX 4090."""
    assert load_gpu("GeForce RTX 4090").name == "rtx-4090"
    assert load_gpu("Tesla V100-SXM2-32GB").name == load_gpu("NVIDIA Tesla V100-SXM2-32GB").name
    with pytest.raises(Exception, match="unknown GPU 'GeForce RTX 9999'"):
        load_gpu("GeForce RTX 9999")
