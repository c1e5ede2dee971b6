"""The registry's public API: names, aliases, unknown names, GPUs by their driver names."""

from __future__ import annotations

import pytest

from vramctl.core.errors import BadInputError, UnknownNameError
from vramctl.core.units import GiB
from vramctl.registry import gpu_from_capacity, list_gpus, list_models, load_gpu, load_model


def test_llama_3_8b_by_id_and_alias() -> None:
    spec = load_model("meta-llama/Meta-Llama-3-8B-Instruct")
    assert spec.param_count == 8_030_261_248
    assert round(spec.weight_bytes / GiB, 2) == 14.96
    assert load_model("llama-3-8b") is spec
    assert load_model("LLAMA-3-8B") is spec
    assert load_model("Meta-Llama-3-8B-Instruct") is spec
    assert spec.num_key_value_heads == 8 and spec.head_dim == 128 and spec.num_hidden_layers == 32


def test_h100_by_id_and_driver_name() -> None:
    gpu = load_gpu("h100-sxm")
    assert load_gpu("NVIDIA H100 80GB HBM3") is gpu
    assert load_gpu("h100") is gpu
    assert round(gpu.cuda_total_bytes / GiB, 2) == 79.18
    assert gpu.nvidia_smi_total_mib == 81559
    assert gpu.host_link_bytes_per_s == 64e9


def test_unknown_model_suggests_closest() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_model("llama-3-9b")
    assert "llama-3-8b" in str(info.value)
    assert info.value.exit_code == 2


def test_unknown_gpu_suggests_closest() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_gpu("h10")
    assert "h100" in str(info.value)


def test_gpu_from_capacity() -> None:
    gpu = gpu_from_capacity(int(79.18 * GiB))
    assert gpu.cuda_total_bytes == int(79.18 * GiB)
    assert gpu.name == "custom"
    assert gpu.nvidia_smi_total_mib * 2**20 >= gpu.cuda_total_bytes
    with pytest.raises(BadInputError):
        gpu_from_capacity(0)


def test_lists() -> None:
    assert any(m.name == "meta-llama/Meta-Llama-3-8B-Instruct" for m in list_models())
    assert any(g.name == "h100-sxm" for g in list_gpus())


def test_gpu_from_capacity_of_a_known_card_keeps_its_smi_total() -> None:
    assert gpu_from_capacity(int(79.20 * GiB)).nvidia_smi_total_mib == 81559  # an H100 on another host
    assert gpu_from_capacity(int(79.30 * GiB)).nvidia_smi_total_mib == 81920  # an A100/A800 80GB
    odd = gpu_from_capacity(int(60 * GiB))  # no card near 60 GiB
    assert odd.nvidia_smi_total_mib == 60 * 1024
    assert "assumed" in dict(odd.sources)["nvidia_smi_total_mib"]
    assert gpu_from_capacity(int(60 * GiB), nvidia_smi_total_mib=62000).nvidia_smi_total_mib == 62000
    with pytest.raises(BadInputError):
        gpu_from_capacity(int(60 * GiB), nvidia_smi_total_mib=100)
