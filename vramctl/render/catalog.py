"""Tables for `vramctl models` and `vramctl gpus` (rich)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import GiB, format_bytes
from vramctl.registry.describe import attention_kind, param_parts, weights_per_rank


def _params(count: int) -> str:
    if count >= 10**12:
        return f"{count / 10**12:.2f}T"
    if count >= 10**8:
        return f"{count / 10**9:.2f}B"
    if count >= 10**6:
        return f"{count / 10**6:.0f}M"
    return f"{count:,}"


def _attention(spec: ModelSpec) -> str:
    kind = attention_kind(spec)
    if kind == "hybrid":
        return f"hybrid {spec.num_sliding_layers}×w{spec.sliding_window}+{spec.num_full_layers}×full"
    if kind == "sliding":
        return f"sliding w{spec.sliding_window}"
    if kind == "mla":
        assert spec.mla is not None
        return f"mla {spec.mla.latent_dim}"
    return f"{kind} {spec.num_attention_heads}/{spec.num_key_value_heads}"


def models_table(models: Sequence[ModelSpec]) -> Table:
    title = f"{len(models)} bundled models (profiles/models)" if len(models) > 1 else "model"
    table = Table(title=title, title_justify="left")
    for header, justify in (
        ("id", "left"),
        ("aliases", "left"),
        ("architecture", "left"),
        ("params", "right"),
        ("weights", "right"),
        ("dtype", "left"),
        ("layers", "right"),
        ("attention", "left"),
        ("experts", "right"),
        ("context", "right"),
    ):
        table.add_column(header, justify=justify, no_wrap=header != "aliases")  # type: ignore[arg-type]
    for spec in models:
        experts = f"{spec.moe.num_experts_per_tok}/{spec.moe.num_experts}" if spec.moe else "-"
        table.add_row(
            spec.name,
            ", ".join(spec.aliases[:3]),
            spec.architecture.removesuffix("ForCausalLM").removesuffix("ForConditionalGeneration"),
            _params(spec.param_count),
            format_bytes(spec.weight_bytes),
            spec.quantization or spec.torch_dtype,
            str(spec.num_hidden_layers),
            _attention(spec),
            experts,
            f"{spec.max_position_embeddings:,}",
        )
    return table


def gpus_table(gpus: Sequence[GpuSpec]) -> Table:
    title = f"{len(gpus)} bundled GPUs (profiles/gpus)" if len(gpus) > 1 else "GPU"
    table = Table(title=title, title_justify="left")
    for header in ("id", "name", "CUDA total", "smi MiB", "HBM TB/s", "host link", "bf16 TFLOP/s", "cc"):
        justify = "left" if header in ("id", "name", "host link", "cc") else "right"
        table.add_column(header, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for gpu in gpus:
        table.add_row(
            gpu.name,
            gpu.display_name,
            f"{gpu.cuda_total_bytes / GiB:.2f} GiB",
            f"{gpu.nvidia_smi_total_mib:,}",
            f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f}",
            f"PCIe{gpu.pcie_generation} x{gpu.pcie_lanes} {gpu.host_link_bytes_per_s / 1e9:.0f} GB/s",
            f"{gpu.dense_bf16_flops / 1e12:,.1f}",
            gpu.compute_capability or "-",
        )
    return table


def model_details(spec: ModelSpec) -> str:
    """Parameters by part, weights per TP rank, and the source of each fact (one model's view)."""
    parts = {name: count for name, count in param_parts(spec).items() if count}
    lines = ["  parameters: " + ", ".join(f"{name} {count:,}" for name, count in parts.items())]
    ranks = ", ".join(f"tp {tp}: {format_bytes(size)}" for tp, size in weights_per_rank(spec).items())
    lines.append(f"  weights per rank: {ranks}")
    lines += [f"  {fact}: {source}" for fact, source in spec.sources]
    return "\n".join(lines)


def print_table(table: Table) -> None:
    console = Console(soft_wrap=False)
    if not console.is_terminal:
        console = Console(width=220, soft_wrap=False)
    console.print(table)
