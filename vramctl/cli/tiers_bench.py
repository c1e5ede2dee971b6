"""`vramctl tiers bench`: real KV-block transfers to the host and disk tiers, every block verified.

Parses flags, resolves the block geometry from the model registry, calls
`vramctl.measure.transfer.run_tiers_bench` (torch is imported there, only when the device part runs) and
renders. Exit 0 when every block read back verified, 1 when any was corrupted or torn, 2 on bad input,
4 for `--device cuda` without a CUDA device, 5 when the device runs out of memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from vramctl.core.errors import BadInputError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.units import MiB, parse_bytes

DEFAULT_MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
DEFAULT_SIZE_BYTES = 256 * MiB
DEFAULT_CPU_SIZE_BYTES = 32 * MiB
"""Without CUDA the host-memcpy analogue only proves the path: a smaller default keeps it quick."""
DEVICES = ("auto", "cuda", "cpu")


def _geometry(
    model: str | None, block_bytes: str | None, block_size: int, kv_cache_dtype: str, tp: int
) -> object:
    from vramctl.measure.transfer import BenchGeometry

    if block_size <= 0:
        raise BadInputError(f"--block-size {block_size}: must be a positive number of tokens")
    if tp <= 0:
        raise BadInputError(f"--tensor-parallel-size {tp}: must be at least 1")
    from vramctl.core.kv import KV_CACHE_DTYPES

    if kv_cache_dtype.strip().lower() not in KV_CACHE_DTYPES:  # refused with --block-bytes too, not ignored
        raise BadInputError(
            f"--kv-cache-dtype {kv_cache_dtype!r}: unknown KV cache dtype (use one of {', '.join(KV_CACHE_DTYPES)})"
        )
    if block_bytes is not None:
        if model is not None:
            raise BadInputError(f"--block-bytes {block_bytes} and MODEL {model!r}: give one or the other")
        size = parse_bytes(block_bytes, what="--block-bytes")
        if size <= 0:
            raise BadInputError(f"--block-bytes {block_bytes}: must be positive")
        return BenchGeometry(label=f"--block-bytes {block_bytes}", page_bytes=size, layers=1)
    from vramctl.core.kv import check_tensor_parallel, page_size_bytes
    from vramctl.registry import load_model

    spec = load_model(DEFAULT_MODEL if model is None else model)
    check_tensor_parallel(spec, tp)  # as `tiers plan` / `plan`: -tp 3 on 32 heads is no shape an engine runs
    page = page_size_bytes(spec, block_size=block_size, kv_cache_dtype=kv_cache_dtype, tp=tp)
    tp_note = f", tp={tp} (per rank)" if tp > 1 else ""
    dtype_note = f", kv-cache-dtype {kv_cache_dtype}" if kv_cache_dtype != "auto" else ""
    return BenchGeometry(
        label=f"{spec.name}, {block_size} tokens/block{dtype_note}{tp_note}",
        page_bytes=page,
        layers=spec.num_hidden_layers,
        block_size=block_size,
        hidden_size=spec.hidden_size,
        intermediate_size=max(1, spec.intermediate_size // tp),
    )


def _check_save_target(save: str) -> None:
    from vramctl.core.atomic import output_target

    target = output_target(save, flag="--save")  # never a FIFO / device; a symbolic link: its file
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise BadInputError(f"--save {save}: is a directory, expected a file name")
    if not parent.is_dir():
        raise BadInputError(f"--save {save}: no such directory {str(parent)!r}")
    _refuse_foreign_file(str(target), save)
    import tempfile

    try:  # a read-only folder fails now, not after the transfers
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".vramctl-probe-"):
            pass
    except OSError as exc:
        raise BadInputError(f"--save {save}: cannot write in {parent} ({exc.strerror or exc})") from None


def _refuse_foreign_file(resolved: str, save: str) -> None:
    """An existing file at --save is replaced only when it is a bandwidths file (ours): never a user's file."""
    import json

    from vramctl.tiers.bandwidths import SCHEMA

    target = Path(resolved)
    try:
        if not target.is_file() or target.stat().st_size == 0:
            return
        with target.open("rb") as handle:
            head = handle.read(1 << 20)
        ours = json.loads(head.decode("utf-8")).get("schema") == SCHEMA
    except (OSError, ValueError, AttributeError, RecursionError):
        ours = False
    if not ours:
        raise BadInputError(
            f"--save {save}: the file exists and is not a `tiers bench` bandwidths file; not overwriting it "
            "(remove it or pick another name)"
        )


def register(app: typer.Typer) -> None:
    """Add `bench` to the `tiers` group."""

    @app.command("bench")
    def bench(
        model: Optional[str] = typer.Argument(
            None,
            help=f"Model (HF id, alias or config.json path) whose KV block is moved [default: {DEFAULT_MODEL}].",
        ),
        model_option: Optional[str] = typer.Option(
            None, "--model", help="The model, as the positional (both are accepted, as in `plan`)."
        ),
        device: str = typer.Option("auto", "--device", help="cuda, cpu, or auto (cuda when torch sees one)."),
        directory: Optional[str] = typer.Option(
            None,
            "--dir",
            help="Directory for the disk-tier file (a new file, removed after) [default: the temp dir].",
        ),
        blocks: Optional[int] = typer.Option(
            None, "--blocks", help="Number of KV blocks moved per transfer."
        ),
        size: Optional[str] = typer.Option(
            None,
            "--size",
            help="Bytes moved per transfer instead of --blocks (e.g. 1GiB) [default: 256MiB; 32MiB on cpu].",
        ),
        block_bytes: Optional[str] = typer.Option(
            None, "--block-bytes", help="Bytes per block instead of the model's KV block (e.g. 2MiB)."
        ),
        block_size: int = typer.Option(
            16, "--block-size", help="Tokens per KV block (the engines' --block-size)."
        ),
        kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="KV cache dtype (vLLM's flag)."),
        tp: int = typer.Option(
            1, "--tensor-parallel-size", "-tp", help="KV heads are split over this many ranks."
        ),
        repeat: int = typer.Option(
            3, "--repeat", help="Timed passes per measurement (the median is reported)."
        ),
        io_size: str = typer.Option("8MiB", "--io-size", help="Bytes per disk read/write syscall."),
        checksum: str = typer.Option("crc32", "--checksum", help="Per-block checksum: crc32 or blake2b."),
        skip_disk: bool = typer.Option(False, "--skip-disk", help="Do not measure the disk tier."),
        skip_device: bool = typer.Option(
            False, "--skip-device", help="Do not measure host ↔ device transfers."
        ),
        keep: bool = typer.Option(
            False, "--keep", help="Keep the disk-tier files (their paths are printed)."
        ),
        gpu: Optional[str] = typer.Option(
            None,
            "--gpu",
            help="GPU profile for the link's nominal bandwidth when the device name is not in the registry.",
        ),
        save: Optional[str] = typer.Option(
            None, "--save", help="Write the bandwidths JSON (for `tiers plan --bandwidths FILE`), atomically."
        ),
        as_json: bool = typer.Option(
            False, "--json", help="Print one JSON object (the bandwidths file's content)."
        ),
    ) -> None:
        """Real transfers of real KV blocks to the host and disk tiers, every block verified; GB/s vs baselines."""
        from vramctl.core.atomic import write_text_atomic
        from vramctl.render.bench import render_bench
        from vramctl.render.jsonout import dumps

        if device not in DEVICES:
            raise BadInputError(f"--device {device!r}: use one of {', '.join(DEVICES)}")
        if skip_disk and skip_device:
            raise BadInputError("--skip-disk and --skip-device: nothing left to measure")
        if blocks is not None and size is not None:
            raise BadInputError(f"--blocks {blocks} and --size {size}: give one or the other")
        if blocks is not None and blocks <= 0:
            raise BadInputError(f"--blocks {blocks}: must be at least 1")
        if not 1 <= repeat <= 1000:
            raise BadInputError(f"--repeat {repeat}: must be between 1 and 1000")
        if checksum not in ("crc32", "blake2b"):
            raise BadInputError(f"--checksum {checksum!r}: use crc32 or blake2b")
        io_bytes = parse_bytes(io_size, what="--io-size")
        if io_bytes < 4096:
            raise BadInputError(f"--io-size {io_size}: must be at least 4 KiB")
        size_bytes = parse_bytes(size, what="--size") if size is not None else None
        if size_bytes is not None and size_bytes <= 0:
            raise BadInputError(f"--size {size}: must be positive")
        if save is not None:
            _check_save_target(save)
        if gpu is not None:
            from vramctl.registry import load_gpu

            load_gpu(gpu)  # an unknown --gpu is bad input even when the link it names is not measured

        from vramctl.cli.engine_flags import one_model
        from vramctl.measure import transfer
        from vramctl.measure.transfer import BenchGeometry, run_tiers_bench

        model = one_model(model, model_option)
        geometry = _geometry(model, block_bytes, block_size, kv_cache_dtype, tp)
        assert isinstance(geometry, BenchGeometry)
        if size_bytes is not None and size_bytes < geometry.block_bytes:
            raise BadInputError(
                f"--size {size}: smaller than one KV block ({geometry.block_bytes} bytes, {geometry.label})"
            )

        resolved: str | None = None if device == "auto" else device
        if not skip_device:
            if resolved is None:
                if transfer.torch_available():
                    resolved = "cuda" if transfer.cuda_available() else "cpu"
            elif resolved == "cuda" and not transfer.cuda_available():
                from vramctl.core.errors import NoDeviceError

                raise NoDeviceError(
                    "--device cuda: torch sees no CUDA device (use --device cpu or --skip-device)"
                )
        if save is not None and skip_disk and resolved != "cuda":
            raise BadInputError(
                f"--save {save}: nothing to save with --skip-disk on a machine without CUDA "
                "(host-memcpy is not a tier; measure the disk tier or run on a GPU)"
            )

        def count(default_bytes: int) -> int:
            if blocks is not None:
                return blocks
            return max(1, (size_bytes if size_bytes is not None else default_bytes) // geometry.block_bytes)

        device_default = DEFAULT_CPU_SIZE_BYTES if resolved == "cpu" else DEFAULT_SIZE_BYTES
        report = run_tiers_bench(
            geometry=geometry,
            device=resolved,
            device_blocks=count(device_default),
            disk_blocks=count(DEFAULT_SIZE_BYTES),
            directory=directory,
            repeat=repeat,
            skip_disk=skip_disk,
            skip_device=skip_device,
            io_bytes=io_bytes,
            checksum=checksum,
            keep=keep,
            gpu=gpu,
        )
        saved: str | None = None
        payload = report.to_json()
        if save is not None and report.ok:
            try:
                write_text_atomic(
                    save, dumps(payload) + "\n", flag="--save"
                )  # on failure the old file stays as it was
            except OSError as exc:
                raise BadInputError(f"--save {save}: cannot write it ({exc.strerror or exc})") from None
            saved = save
        if as_json:
            typer.echo(dumps(payload))
        else:
            from vramctl.render.console import wrap_lines

            typer.echo(wrap_lines(render_bench(report, saved_to=saved)))
        if not report.ok:
            raise typer.Exit(int(ExitCode.CHECK_FAILED))
