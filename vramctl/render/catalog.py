"""Tables for `vramctl models` and `vramctl gpus` (rich)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import GiB, format_bytes
from vramctl.registry.describe import attention_kind, param_parts, weights_per_rank
from vramctl.render.console import make_console


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


def _fitted_table(
    title: str,
    columns: Sequence[tuple[str, str, int]],
    rows: Sequence[Sequence[str]],
    width: int | None,
) -> Table:
    """A table of the columns that fit in `width` (None: all of them): columns are dropped lowest priority first
    (the third item; 0 is never dropped) until every kept cell shows whole, so no cell is cut to `…` and no column
    is left empty at 80 columns."""
    keep = list(range(len(columns)))

    def needed(kept: list[int]) -> int:
        # cells + one space of padding either side + a border between and around the columns
        return sum(max(len(columns[i][0]), *(len(row[i]) for row in rows)) + 3 for i in kept) + 1

    if width is not None:
        for drop in sorted(range(len(columns)), key=lambda i: columns[i][2], reverse=True):
            if needed(keep) <= width or columns[drop][2] == 0:
                break
            keep.remove(drop)
    dropped = [columns[i][0] for i in range(len(columns)) if i not in keep]
    if dropped:
        title += f" — {', '.join(dropped)} left out at {width} columns (COLUMNS, docs/cli.md)"
    table = Table(title=title, title_justify="left")
    for i in keep:
        header, justify, _ = columns[i]
        table.add_column(header, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _width() -> int | None:
    from vramctl.render.console import output_width

    return output_width()


def models_table(models: Sequence[ModelSpec], width: int | None = -1) -> Table:
    """The models, with the columns that fit `width` (-1: the output's width, docs/cli.md; None: all)."""
    title = f"{len(models)} bundled models (profiles/models)" if len(models) > 1 else "model"
    columns = (
        ("id", "left", 0),
        ("aliases", "left", 8),
        ("architecture", "left", 7),
        ("params", "right", 2),
        ("weights", "right", 1),
        ("dtype", "left", 5),
        ("layers", "right", 6),
        ("attention", "left", 3),
        ("experts", "right", 9),
        ("context", "right", 4),
    )
    rows = []
    for spec in models:
        experts = f"{spec.moe.num_experts_per_tok}/{spec.moe.num_experts}" if spec.moe else "-"
        rows.append(
            (
                spec.name,
                ", ".join(spec.aliases[:3]),
                spec.architecture.removesuffix("ForCausalLM").removesuffix("ForConditionalGeneration"),
                _params(spec.param_count),
                format_bytes(spec.weight_bytes),
                spec.quantization or spec.torch_dtype,
                str(spec.num_hidden_layers),
                _attention(spec),
                experts,
                str(spec.max_position_embeddings),
            )
        )
    return _fitted_table(title, columns, rows, _width() if width == -1 else width)


def gpus_table(gpus: Sequence[GpuSpec], width: int | None = -1) -> Table:
    """The cards, with the columns that fit `width` (as models_table)."""
    title = f"{len(gpus)} bundled GPUs (profiles/gpus)" if len(gpus) > 1 else "GPU"
    columns = (
        ("id", "left", 0),
        ("name", "left", 6),
        ("CUDA total", "right", 1),
        ("smi MiB", "right", 5),
        ("HBM TB/s", "right", 3),
        ("host link", "left", 4),
        ("bf16 TFLOP/s", "right", 7),
        ("cc", "left", 2),
    )
    rows = [
        (
            gpu.name,
            gpu.display_name,
            f"{gpu.cuda_total_bytes / GiB:.2f} GiB",
            f"{gpu.nvidia_smi_total_mib:,}",
            f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f}",
            f"PCIe{gpu.pcie_generation} x{gpu.pcie_lanes} {gpu.host_link_bytes_per_s / 1e9:.0f} GB/s",
            f"{gpu.dense_bf16_flops / 1e12:.1f}",
            gpu.compute_capability or "-",
        )
        for gpu in gpus
    ]
    return _fitted_table(title, columns, rows, _width() if width == -1 else width)


def model_details(spec: ModelSpec) -> str:
    """Parameters by part, weights per TP rank, and the source of each fact (one model's view)."""
    parts = {name: count for name, count in param_parts(spec).items() if count}
    lines = ["  parameters: " + ", ".join(f"{name} {count:,}" for name, count in parts.items())]
    ranks = ", ".join(f"tp {tp}: {format_bytes(size)}" for tp, size in weights_per_rank(spec).items())
    lines.append(f"  weights per rank: {ranks}")
    lines += [f"  {fact}: {source}" for fact, source in spec.sources]
    return "\n".join(lines)


def print_text(text: str) -> None:
    """Plain lines, wrapped at the output's width (no markup: model names may hold brackets)."""
    from rich.text import Text

    make_console(highlight=False).print(Text(text))


def print_table(table: Table) -> None:
    make_console().print(table)
