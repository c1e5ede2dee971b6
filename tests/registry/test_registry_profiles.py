"""Every bundled profile loads, validates, cites its sources, and its parameter count matches the formula."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramctl.core.params import active_param_count, num_moe_layers, param_count_from_spec
from vramctl.core.specs import FULL_ATTENTION, SLIDING_ATTENTION
from vramctl.core.units import GiB, MiB
from vramctl.registry import list_gpus, list_models, load_gpu, load_model
from vramctl.registry._catalog import GPUS, MODELS, _read_head
from vramctl.registry._files import profiles_dir, read_yaml
from vramctl.registry.names import normalize

MODEL_PATHS = sorted((profiles_dir() / "models").glob("*.yaml"))
GPU_PATHS = sorted((profiles_dir() / "gpus").glob("*.yaml"))


def test_counts_meet_the_issue() -> None:
    assert len(list_models()) >= 30
    assert len(list_gpus()) >= 16


@pytest.mark.parametrize("path", MODEL_PATHS, ids=lambda p: p.stem)
def test_model_param_count_equals_formula(path: Path) -> None:
    doc = read_yaml(path)
    spec = load_model(path.stem)
    # extra_params documents the tensors outside the decoder; the formula counts them as vision_params
    assert spec.vision_params == sum(doc.get("extra_params", {}).values())
    if spec.state_space is None:
        assert param_count_from_spec(spec) == doc["param_count"] == spec.param_count
    else:  # Mamba / Gated DeltaNet layers: the registry's per-kind count (vramctl/registry/models.py)
        assert doc["param_count"] == spec.param_count
    assert {"config", "param_count"} <= set(dict(spec.sources))
    if spec.quantization:
        assert "weight_bytes" in dict(spec.sources)
    assert 0 < active_param_count(spec) <= spec.param_count


@pytest.mark.parametrize("path", GPU_PATHS, ids=lambda p: p.stem)
def test_gpu_profile_is_complete(path: Path) -> None:
    gpu = load_gpu(path.stem)
    sources = dict(gpu.sources)
    for fact in (
        "nvidia_smi_total_mib",
        "hbm_bandwidth_tb_s",
        "dense_bf16_tflops",
        "host_link",
        "compute_capability",
    ):
        assert fact in sources, fact
    assert "cuda_total_gib" in sources or "cuda_total_bytes" in sources
    # the driver hands out less than the board's total, never more
    assert 0.9 * gpu.nvidia_smi_total_mib * MiB < gpu.cuda_total_bytes <= gpu.nvidia_smi_total_mib * MiB
    per_lane = {3: 1e9, 4: 2e9, 5: 4e9, 6: 8e9}[gpu.pcie_generation]
    # PCIe (x8 cards too: A2, RTX 4060 Ti), or NVLink-C2C to the Grace CPU (GH200, GB200), said in the source
    assert gpu.host_link_bytes_per_s == per_lane * gpu.pcie_lanes or "NVLink-C2C" in sources["host_link"]
    assert gpu.dense_bf16_flops > 1e13 and gpu.hbm_bandwidth_bytes_per_s > 1e11


@pytest.mark.parametrize("catalog", [MODELS, GPUS], ids=["models", "gpus"])
def test_no_name_answers_for_two_profiles(catalog: object) -> None:
    seen: dict[str, Path] = {}
    for path in catalog.paths():  # type: ignore[attr-defined]
        for name in catalog.names_of(path):  # type: ignore[attr-defined]
            key = normalize(name)
            assert seen.setdefault(key, path) == path, f"{name!r} in {path.name} and {seen[key].name}"


@pytest.mark.parametrize("path", MODEL_PATHS + GPU_PATHS, ids=lambda p: p.stem)
def test_index_head_parse_agrees_with_the_whole_file(path: Path) -> None:
    head, whole = _read_head(path), read_yaml(path)
    assert head["id"] == whole["id"] and head.get("aliases") == whole.get("aliases")


REQUIRED_GPUS = "h100-sxm h100-pcie h100-nvl h200 h20 b200 a100-40gb a100-80gb l40s l4 a10g t4 rtx-3090 rtx-4090 rtx-5090 mi300x"


@pytest.mark.parametrize("name", REQUIRED_GPUS.split())
def test_required_gpus(name: str) -> None:
    assert load_gpu(name).name == name


REQUIRED_MODELS = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "mistral-7b": 7_241_732_096,
    "mistral-7b-v0.3": 7_248_023_552,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,
    "qwen2.5-72b": 72_706_203_648,
    "qwen3-8b": 8_190_735_360,
    "qwen3-14b": 14_768_307_200,
    "qwen3-32b": 32_762_123_264,
    "phi-3-mini": 3_821_079_552,
    "phi-3-medium": 13_960_238_080,
    "gemma-2-2b": 2_614_341_888,
    "gemma-2-9b": 9_241_705_984,
    "gemma-2-27b": 27_227_128_320,
    "gemma-3-1b": 999_885_952,
    "gemma-3-27b": 27_432_406_640,
    "mixtral-8x7b": 46_702_792_704,
    "mixtral-8x22b": 140_630_071_296,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,
    "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672,
    "deepseek-v2-lite": 15_706_484_224,
    "deepseek-v3": 671_026_419_200,
    "deepseek-r1": 671_026_419_200,
    "kimi-k2": 1_026_408_232_448,
}


@pytest.mark.parametrize(("alias", "count"), REQUIRED_MODELS.items())
def test_required_models_and_counts(alias: str, count: int) -> None:
    assert load_model(alias).param_count == count
    assert load_model(alias.upper()) is load_model(alias)


def test_small_qwen3_models() -> None:
    for alias in ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b"):
        spec = load_model(alias)
        assert spec.tie_word_embeddings and spec.qk_norm


def test_llama_3_8b_weights_match_the_seed() -> None:
    spec = load_model("llama-3-8b")
    assert spec.weight_bytes == 8_030_261_248 * 2
    assert f"{spec.weight_bytes / GiB:.2f}" == "14.96"


def test_sliding_and_hybrid_patterns() -> None:
    mistral = load_model("mistral-7b")
    assert mistral.sliding_window == 4096 and mistral.num_sliding_layers == 32
    assert load_model("mistral-7b-v0.3").sliding_window is None
    gemma2 = load_model("gemma-2-9b")
    assert gemma2.sliding_window == 4096
    assert gemma2.attention_kinds()[:2] == (SLIDING_ATTENTION, FULL_ATTENTION)
    assert gemma2.num_sliding_layers == gemma2.num_full_layers == 21
    gemma3 = load_model("gemma-3-27b")
    assert gemma3.sliding_window == 1024 and gemma3.num_hidden_layers == 62
    assert gemma3.attention_kinds()[:6] == (SLIDING_ATTENTION,) * 5 + (FULL_ATTENTION,)
    gpt = load_model("gpt-oss-120b")
    assert gpt.sliding_window == 128 and gpt.num_sliding_layers == gpt.num_full_layers == 18
    assert gpt.attention_kinds()[0] == SLIDING_ATTENTION
    # Qwen2.5 ships sliding_window with use_sliding_window false: full attention
    assert load_model("qwen2.5-7b").sliding_window is None
    # Phi-3-mini-4k: window 2047 below a 4096 context, every layer windowed
    assert load_model("phi-3-mini").sliding_window == 2047


def test_moe_and_mla_facts() -> None:
    v3 = load_model("deepseek-v3")
    assert v3.mla is not None and v3.mla.latent_dim == 576
    assert v3.moe is not None and num_moe_layers(v3) == 58
    assert v3.quantization == "fp8" and v3.num_mtp_layers == 1
    assert 37e9 < active_param_count(v3) < 38e9  # model card: 37B activated
    kimi = load_model("kimi-k2")
    assert kimi.num_attention_heads == 64 and kimi.moe is not None and kimi.moe.num_experts == 384
    assert 32e9 < active_param_count(kimi) < 33.5e9  # model card: 32B activated
    lite = load_model("deepseek-v2-lite")
    assert lite.mla is not None and lite.mla.q_lora_rank is None
    mixtral = load_model("mixtral-8x7b")
    assert mixtral.moe is not None and mixtral.moe.num_experts == 8 and mixtral.moe.num_experts_per_tok == 2
    assert 12.8e9 < active_param_count(mixtral) < 13.0e9  # "12.9B active"
    q = load_model("qwen3-30b-a3b")
    assert 3.3e9 < active_param_count(q) < 3.4e9  # "3.3B activated"


def test_quantised_checkpoint_bytes() -> None:
    # OpenAI's model card: checkpoint 12.8 GiB (20b) and 60.8 GiB (120b), MXFP4 experts
    assert f"{load_model('gpt-oss-20b').weight_bytes / GiB:.1f}" == "12.8"
    assert f"{load_model('gpt-oss-120b').weight_bytes / GiB:.1f}" == "60.8"
    v3 = load_model("deepseek-v3")
    # FP8 weights + scales: just under one byte per parameter plus bf16 embeddings
    assert v3.param_count < v3.weight_bytes < 1.01 * v3.param_count


def test_gpu_reported_totals() -> None:
    assert f"{load_gpu('h100-sxm').cuda_total_bytes / GiB:.2f}" == "79.18"
    assert load_gpu("a100-80gb").nvidia_smi_total_mib == 81920
    assert load_gpu("a100-40gb").nvidia_smi_total_mib == 40960
    assert load_gpu("h200").nvidia_smi_total_mib == 143771
    assert load_gpu("l4").nvidia_smi_total_mib == 23034
    assert load_gpu("t4").nvidia_smi_total_mib == 15360
    assert load_gpu("mi300x").vendor == "amd"


@pytest.mark.parametrize(
    ("driver_name", "gpu_id"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("NVIDIA A800-SXM4-80GB", "a800"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10G", "a10g"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_gpus_by_torch_and_nvml_names(driver_name: str, gpu_id: str) -> None:
    assert load_gpu(driver_name).name == gpu_id


def test_the_docs_count_the_bundled_profiles() -> None:
    """docs/models-and-gpus.md opens with how many models and GPUs are bundled: the numbers of profiles/."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "models-and-gpus.md").read_text()
    found = re.search(r"It knows (\d+) models and (\d+) GPUs", text)
    assert found is not None
    models = len(list((root / "profiles" / "models").glob("*.yaml")))
    gpus = len(list((root / "profiles" / "gpus").glob("*.yaml")))
    assert (int(found[1]), int(found[2])) == (models, gpus)


@pytest.mark.parametrize(
    ("typed", "gpu_id"),
    [
        ("RTX 4060 Ti 16GB", "rtx-4060-ti"),
        ("a100 80g", "a100-80gb"),
        ("A100 40GB", "a100-40gb"),
        ("h100 94gb", "h100-nvl"),
        ("v100-16g", "v100-16gb"),
        ("Tesla V100 32GB", "v100-32gb"),
        ("Tesla V100-SXM2-16GB", "v100-16gb"),
    ],
)
def test_gpu_named_with_its_memory_size(typed: str, gpu_id: str) -> None:
    """A board name with its memory appended (nvidia-smi, cloud catalogues) finds the variant with that memory."""
    assert load_gpu(typed).name == gpu_id


@pytest.mark.parametrize("typed", ["RTX 4060 Ti 8GB", "RTX 3080 20GB", "l4 48gb"])
def test_gpu_named_with_another_memory_size_is_refused(typed: str) -> None:
    """Never a plan of a card with other memory: an 8 GB 4060 Ti planned as the 16 GB board would say "fits"."""
    from vramctl.core.errors import BadInputError

    with pytest.raises(BadInputError, match=r"has \d+ GB, not \d+ GB; pass --gpu \S+ only for that board, or --gpu-memory"):
        load_gpu(typed)


def test_unknown_gpu_suggests_the_variants_of_what_was_typed_first() -> None:
    from vramctl.core.errors import UnknownNameError

    with pytest.raises(UnknownNameError) as caught:
        load_gpu("v100")
    assert caught.value.suggestions[:2] == ("v100-16gb", "v100-32gb")
