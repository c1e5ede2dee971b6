"""The SGLang start-up datapoints of ../shared/samples/startup, as inputs to plan_sglang and the numbers logged.

Used by tests/sglang/test_sglang_samples.py and by `python tests/sglang/sglang_samples.py`, which prints the
accuracy table of docs/sglang.md ("Accuracy"). Each datapoint is checked two ways:

- `engine`: SGLang's own arithmetic fed with the logged `Load weight begin/end avail mem` (GiB, 2 decimals) and
  the logged mem_fraction_static: how well vramctl reproduces the engine (error = the logs' rounding).
- `plan`: nothing from the log but the flags: free-before-load estimated from the card's CUDA total, weights
  from the checkpoint. This is what `vramctl plan --engine sglang` does before a GPU exists.
And, where the log shows the default, the default mem_fraction_static / chunked_prefill_size / graph max_bs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT.parent / "shared" / "samples" / "startup"

from vramctl.core.engines.sglang import SglangOptions, SglangPlan, plan_sglang  # noqa: E402
from vramctl.core.settings import ServeSettings  # noqa: E402
from vramctl.core.specs import GpuSpec, ModelSpec  # noqa: E402
from vramctl.core.units import GiB  # noqa: E402
from vramctl.registry import load_model  # noqa: E402


def gpu(name: str, cuda_gib: float, smi_mib: int) -> GpuSpec:
    """A card by its two totals (../shared/reference/gpu_capacity.yaml; nvidia-smi MiB totals)."""
    return GpuSpec(
        name=name,
        display_name=name,
        cuda_total_bytes=int(cuda_gib * GiB),
        nvidia_smi_total_mib=smi_mib,
        hbm_bandwidth_bytes_per_s=1e12,
        pcie_generation=4,
        pcie_lanes=16,
        host_link_bytes_per_s=32e9,
        dense_bf16_flops=1e14,
    )


H100 = gpu("h100-sxm", 79.18, 81559)
H800 = gpu("h800", 79.18, 81559)
H200 = gpu("h200", 139.81, 143771)
A100_80 = gpu("a100-80gb", 79.15, 81920)
A800 = gpu("a800", 79.33, 81920)
A100_40 = gpu("a100-40gb", 39.50, 40960)
A40 = gpu("a40", 44.35, 46068)
RTX3090 = gpu("rtx-3090", 23.57, 24576)
RTX4090 = gpu("rtx-4090", 23.64, 24564)
L4 = gpu("l4", 22.05, 23034)
A10G = gpu("a10g", 21.99, 23028)


def xverse_moe() -> ModelSpec:
    """xverse/XVERSE-MoE-A4.2B-Chat: 28 layers, 32 heads (MHA) of 80; weights as logged (48.29 GiB)."""
    return ModelSpec(
        name="xverse/XVERSE-MoE-A4.2B-Chat",
        architecture="XverseForCausalLM",
        hidden_size=2560,
        intermediate_size=1728,
        num_hidden_layers=28,
        num_attention_heads=32,
        num_key_value_heads=32,
        head_dim=80,
        vocab_size=100534,
        max_position_embeddings=8192,
        torch_dtype="bfloat16",
        param_count=25_800_000_000,
        weight_bytes=int(48.29 * GiB),
    )


@dataclass(frozen=True)
class Datapoint:
    id: str
    model: str | ModelSpec
    """Registry name, or a spec; `as` notes a same-architecture stand-in."""
    gpu: GpuSpec
    version: str
    tp: int
    mfs: float
    begin_gib: float
    end_gib: float
    tokens: int | None
    """Logged max_total_num_tokens / #tokens (None: only K+V size logged)."""
    kv_gib: float | None = None
    """Logged K size + V size (or KV size)."""
    context_len: int | None = None
    chunked: int | None = None
    max_total_tokens: int | None = None
    max_running_requests_logged: int | None = None
    default_mfs: bool = False
    """The log's mem_fraction_static is SGLang's default (not passed)."""
    default_chunked: int | None = None
    default_graph_bs: int | None = None
    role: str = "null"
    stand_in: str = ""


DATAPOINTS: tuple[Datapoint, ...] = (
    Datapoint(
        "021",
        "meta-llama/Llama-3.1-8B-Instruct",
        H100,
        "0.4.1",
        1,
        0.88,
        78.81,
        63.72,
        444500,
        27.13 * 2,
        context_len=131072,
        max_running_requests_logged=2049,
        default_mfs=True,
        default_chunked=8192,
        default_graph_bs=160,
        stand_in="80 GB class card, not named: H100 assumed",
    ),
    Datapoint(
        "037",
        "Qwen/Qwen2.5-7B-Instruct",
        RTX3090,
        "0.4.2",
        1,
        0.88,
        22.76,
        8.37,
        105531,
        2.82 * 2,
        context_len=131072,
        max_running_requests_logged=2049,
        default_mfs=True,
        default_chunked=2048,
        default_graph_bs=8,
        stand_in="DeepSeek-R1-Distill-Qwen-7B = Qwen2.5-7B architecture",
    ),
    Datapoint(
        "104",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        L4,
        "0.2.13",
        8,
        0.83,
        21.65,
        10.75,
        463405,
        context_len=8192,
        default_mfs=True,
    ),
    Datapoint(
        "105",
        "Qwen/Qwen2.5-72B-Instruct",
        H100,
        "0.3.0",
        8,
        0.83,
        76.63,
        59.64,
        1218251,
        context_len=32768,
        max_running_requests_logged=5119,
        default_mfs=True,
        stand_in="Qwen2-72B = Qwen2.5-72B KV shape; MIN over the ranks shown",
    ),
    Datapoint(
        "106",
        "mistralai/Mistral-7B-v0.1",
        RTX4090,
        "0.3.2",
        1,
        0.88,
        23.16,
        9.59,
        55807,
        context_len=32768,
        max_running_requests_logged=2049,
        default_mfs=True,
        stand_in="zephyr-7b = Mistral-7B; sliding window ignored by SGLang",
    ),
    Datapoint(
        "107",
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
        A40,
        "0.4.2.post3",
        1,
        0.88,
        43.85,
        14.34,
        313444,
        context_len=163840,
        max_running_requests_logged=2049,
        default_mfs=True,
        default_chunked=8192,
        default_graph_bs=160,
    ),
    Datapoint(
        "108",
        "Qwen/Qwen2.5-32B-Instruct",
        A100_80,
        "0.4.3.post2",
        2,
        0.5,
        78.49,
        47.70,
        None,
        4.23 * 2,
        context_len=32768,
        chunked=4096,
        stand_in="DeepSeek-R1-Distill-Qwen-32B = Qwen2.5-32B architecture",
    ),
    Datapoint(
        "109",
        "deepseek-ai/DeepSeek-R1",
        H800,
        "0.4.3.post2",
        16,
        0.7,
        76.94,
        36.48,
        201681,
        context_len=163840,
        max_running_requests_logged=2049,
        stand_in="node-0 ranks only",
    ),
    Datapoint(
        "110",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        H200,
        "0.4.6.post5",
        1,
        0.8717961202189594,
        139.20,
        124.23,
        871371,
        53.18 * 2,
        context_len=8192,
        max_running_requests_logged=4097,
        default_mfs=True,
        default_chunked=16384,
        role="prefill",
    ),
    Datapoint(
        "111",
        "Qwen/Qwen3-0.6B",
        H100,
        "0.4.7.post1",
        1,
        0.874,
        75.02,
        74.28,
        606832,
        32.41 * 2,
        context_len=40960,
        default_mfs=True,
        default_chunked=8192,
        stand_in="Qwen3-0.6B-FP8: same KV shape; weights from the log",
    ),
    Datapoint(
        "112",
        "Qwen/Qwen2.5-7B-Instruct",
        A100_40,
        "0.4.3.post2",
        1,
        0.88,
        38.97,
        24.59,
        372945,
        9.96 * 2,
        context_len=32768,
        max_running_requests_logged=4097,
        default_mfs=True,
        default_chunked=8192,
        default_graph_bs=160,
        stand_in="40 GB card not named: A100-40GB assumed",
    ),
    Datapoint(
        "113",
        "Qwen/Qwen2.5-14B-Instruct",
        A100_40,
        "0.4.3.post4",
        2,
        0.87,
        38.71,
        24.71,
        10240,
        0.47 * 2,
        context_len=131072,
        max_total_tokens=10240,
        max_running_requests_logged=2049,
        default_mfs=True,
        default_chunked=8192,
        stand_in="DeepSeek-R1-Distill-Qwen-14B = Qwen2.5-14B",
    ),
    Datapoint(
        "114",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        A10G,
        "0.1.17",
        4,
        0.75,
        21.52,
        17.76,
        405784,
        context_len=8192,
    ),
    Datapoint(
        "116",
        xverse_moe(),
        A800,
        "0.2.12",
        1,
        0.88,
        78.94,
        30.65,
        79301,
        context_len=8192,
        max_running_requests_logged=4955,
        default_mfs=True,
    ),
)


def model_of(dp: Datapoint) -> ModelSpec:
    model = dp.model if isinstance(dp.model, ModelSpec) else load_model(dp.model)
    if dp.context_len is not None and dp.context_len > model.max_position_embeddings:
        # A stand-in of the same KV shape with a shorter config context (e.g. R1-Distill-Qwen-7B has 131,072).
        model = replace(model, max_position_embeddings=dp.context_len)
    return model


def settings_of(dp: Datapoint, *, default_mfs: bool = False) -> ServeSettings:
    return ServeSettings(
        engine="sglang",
        engine_version=dp.version,
        tensor_parallel_size=dp.tp,
        mem_fraction_static=None if default_mfs else dp.mfs,
        chunked_prefill_size=dp.chunked,
        max_total_tokens=dp.max_total_tokens,
        max_model_len=dp.context_len,
    )


def options_of(dp: Datapoint) -> SglangOptions:
    return SglangOptions(disaggregation_mode=dp.role)  # type: ignore[arg-type]


def engine_mode(dp: Datapoint) -> SglangPlan:
    """SGLang's arithmetic on the logged free memory: reproduces the engine (up to the logs' 0.01 GB rounding)."""
    opts = replace(
        options_of(dp),
        free_before_load_bytes=int(dp.begin_gib * GiB),
        free_after_load_bytes=int(dp.end_gib * GiB),
    )
    return plan_sglang(model_of(dp), dp.gpu, settings_of(dp), options=opts)


def plan_mode(dp: Datapoint) -> SglangPlan:
    """Nothing from the log but the flags and the logged mem_fraction_static."""
    return plan_sglang(model_of(dp), dp.gpu, settings_of(dp), options=options_of(dp))


def default_mode(dp: Datapoint) -> SglangPlan:
    return plan_sglang(model_of(dp), dp.gpu, settings_of(dp, default_mfs=True), options=options_of(dp))


def logged_kv_bytes(dp: Datapoint, plan: SglangPlan) -> int:
    if dp.tokens is not None:
        return dp.tokens * plan.bytes_per_token
    assert dp.kv_gib is not None
    return int(dp.kv_gib * GiB)


def error(predicted: int, logged: int) -> float:
    return (predicted - logged) / logged


def accuracy_table() -> str:
    lines = [
        "| id | model (card, version, tp) | logged tokens | engine mode | err | plan mode | err | default mfs "
        "(logged → vramctl) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for dp in DATAPOINTS:
        e, p = engine_mode(dp), plan_mode(dp)
        logged = dp.tokens if dp.tokens is not None else round(logged_kv_bytes(dp, e) / e.bytes_per_token)
        unit = "" if dp.tokens is not None else " (from K+V GB)"
        d = default_mode(dp) if dp.default_mfs else None
        dflt = f"{dp.mfs:.4g} → {d.mem_fraction_static:.4g} ({d.rules} rules)" if d is not None else "given"
        name = dp.model.name if isinstance(dp.model, ModelSpec) else dp.model
        lines.append(
            f"| {dp.id} | {name.split('/')[-1]} ({dp.gpu.name}, {dp.version}, tp{dp.tp}) | {logged:,}{unit} | "
            f"{e.max_total_num_tokens:,} | {error(e.max_total_num_tokens, logged):+.2%} | "
            f"{p.max_total_num_tokens:,} | {error(p.max_total_num_tokens, logged):+.2%} | {dflt} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(accuracy_table() + "\n")
