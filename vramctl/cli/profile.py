"""`vramctl profile`, `vramctl suggest`, `vramctl validate`: measure on a real device, size, prove.

Parsing and rendering only; the measurement lives in vramctl/measure (torch is imported inside the command
bodies, never at import time), the arithmetic in vramctl/core/suggest.py, the file format in
vramctl/core/profile_file.py. Exit codes: 0 ok / fits / pass; 1 does not fit, validate failed, or free
memory below the requested utilisation at start-up; 2 bad input; 4 no usable device; 5 out of memory
during a measurement (explained); 130 interrupted.
"""

from __future__ import annotations

import contextlib
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from vramctl.cli.engine_flags import flag_help, one_model, read_engine_options, read_memory
from vramctl.core.engines.flags import by_name
from vramctl.core.errors import BadInputError, VramctlError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.settings import ServeSettings

if TYPE_CHECKING:
    from vramctl.core.profile_file import ProfileFile
    from vramctl.core.specs import ModelSpec
    from vramctl.core.suggest import SuggestInput
    from vramctl.measure.profiler import ProfileRequest, ProfileResult


class _NoRoomError(VramctlError):
    """The suggestion leaves no KV block: the configuration does not fit (exit 1, like a failed check)."""

    exit_code = ExitCode.CHECK_FAILED


_DEVICE_HELP = "cuda, cuda:N or cpu (the host: process RSS, for CI and laptops)."
_DEVICE_MEMORY_HELP = (
    "Treat the device as having only this much memory (e.g. 4GiB; a bare number is GiB): the cpu device's "
    "capacity, or a share of a GPU."
)


# The engine flags `profile`, `suggest` and `validate` share, declared once; their meaning, help and value reading
# come from the one flag registry (vramctl.core.engines.flags): `--max-model-len 32k` works as in `plan`.
EngineVersionOpt = Annotated[
    Optional[str],
    typer.Option("--engine-version", help="vLLM version whose semantics to use [default: latest]."),
]
GpuMemoryUtilizationOpt = Annotated[
    Optional[str],
    typer.Option(
        "--gpu-memory-utilization",
        "--device-memory-utilization",
        help=flag_help("--gpu-memory-utilization", "[default: 0.92 from 0.20]"),
    ),
]
MaxModelLenOpt = Annotated[
    Optional[str], typer.Option("--max-model-len", help=flag_help("--max-model-len", "[default: the model's context]"))
]
MaxNumBatchedTokensOpt = Annotated[
    Optional[str],
    typer.Option(
        "--max-num-batched-tokens", help=flag_help("--max-num-batched-tokens", "[default: vLLM's for the device]")
    ),
]
MaxNumSeqsOpt = Annotated[
    Optional[str],
    typer.Option("--max-num-seqs", help=flag_help("--max-num-seqs", "[default: vLLM's for the device]")),
]
KvCacheDtypeOpt = Annotated[Optional[str], typer.Option("--kv-cache-dtype", help=flag_help("--kv-cache-dtype"))]
BlockSizeOpt = Annotated[
    Optional[str], typer.Option("--block-size", help=flag_help("--block-size", "[default: 16]"))
]
EnforceEagerOpt = Annotated[
    Optional[bool],
    typer.Option("--enforce-eager/--no-enforce-eager", help=flag_help("--enforce-eager"), show_default=False),
]
TensorParallelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--tensor-parallel-size",
        "-tp",
        help=flag_help("--tensor-parallel-size", "One process per rank (gloo on cpu, NCCL on cuda)."),
    ),
]
DtypeOpt = Annotated[Optional[str], typer.Option("--dtype", help=flag_help("--dtype"))]
NumLayersOpt = Annotated[
    Optional[int], typer.Option("--num-layers", help="Build only N layers; weights scaled to the full depth.")
]
MemFractionStaticOpt = Annotated[
    Optional[str],
    typer.Option(
        "--mem-fraction-static",
        help=flag_help("--mem-fraction-static", "For SGLang's numbers [default: SGLang's heuristic]."),
    ),
]
ModelOpt = Annotated[
    Optional[str], typer.Option("--model", help="The model, as the positional (both are accepted, as in `plan`).")
]
DeviceOpt = Annotated[str, typer.Option("--device", help=_DEVICE_HELP)]
DeviceMemoryOpt = Annotated[Optional[str], typer.Option("--device-memory", help=_DEVICE_MEMORY_HELP)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]

_ABSURD_TOKENS = 1 << 26  # the bound `plan` puts on token counts (vramctl.core.plan)
_ABSURD_SEQS = 1 << 20

_ENGINE_FLAGS = (
    "engine_version",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "kv_cache_dtype",
    "block_size",
    "enforce_eager",
    "tensor_parallel_size",
    "dtype",
    "mem_fraction_static",
)


_ENGINE_FLAG_DEFAULTS: dict[str, Any] = {name: None for name in (*_ENGINE_FLAGS, "num_layers")}


def _refuse_flags_with_profile(command: str, flags: dict[str, Any]) -> None:
    """With --from-profile the profile's own settings are used: an engine flag given too would be ignored silently."""
    given = [
        f"--{name.replace('_', '-')}" + ("" if flags[name] is True else f" {flags[name]}")
        for name, default in _ENGINE_FLAG_DEFAULTS.items()
        if name in flags and flags[name] != default
    ]
    if given:
        raise BadInputError(
            f"{command} --from-profile uses the settings the profile was measured with; {', '.join(given)} would be "
            f"ignored: drop it, or run `vramctl {command} MODEL` with it to measure anew"
        )


def _engine_settings(flags: dict[str, Any]) -> ServeSettings:
    """ServeSettings from a command's engine flags (its parameters, by name), read by the flag registry."""
    values = read_engine_options(flags, [name for name in _ENGINE_FLAGS if name != "engine_version"])
    return _settings(
        engine_version=flags.get("engine_version"),
        gpu_memory_utilization=values.get("gpu_memory_utilization"),
        max_model_len=values.get("max_model_len"),
        max_num_batched_tokens=values.get("max_num_batched_tokens"),
        max_num_seqs=values.get("max_num_seqs"),
        kv_cache_dtype=values.get("kv_cache_dtype", "auto"),
        block_size=values.get("block_size"),
        enforce_eager=bool(values.get("enforce_eager", False)),
        tensor_parallel_size=values.get("tensor_parallel_size", 1),
        dtype=values.get("dtype", "auto"),
        mem_fraction_static=values.get("mem_fraction_static"),
    )


def _stderr_console() -> Any:

    from vramctl.render.console import make_console

    return make_console(stderr=True, highlight=False)


def _stdout_console() -> Any:

    from vramctl.render.console import make_console

    return make_console(highlight=False)


def _progress(enabled: bool) -> Any:
    if not enabled:
        return None
    console = _stderr_console()

    def on_phase(name: str, message: str) -> None:
        console.print(f"[bold cyan]{name:>14}[/] {message}")

    return on_phase


def _settings(
    *,
    engine_version: str | None,
    gpu_memory_utilization: float | None,
    max_model_len: int | None,
    max_num_batched_tokens: int | None,
    max_num_seqs: int | None,
    kv_cache_dtype: str,
    block_size: int | None,
    enforce_eager: bool,
    tensor_parallel_size: int,
    dtype: str,
    mem_fraction_static: float | None,
) -> ServeSettings:
    for flag, value in (
        ("--max-model-len", max_model_len),
        ("--max-num-batched-tokens", max_num_batched_tokens),
        ("--max-num-seqs", max_num_seqs),
        ("--block-size", block_size),
        ("--tensor-parallel-size", tensor_parallel_size),
    ):
        if value is not None and value <= 0:
            raise BadInputError(f"{flag} {value}: must be positive")
    from vramctl.core.plan import VALID_BLOCK_SIZES

    for flag, value, upper in (
        ("--max-model-len", max_model_len, _ABSURD_TOKENS),
        ("--max-num-batched-tokens", max_num_batched_tokens, _ABSURD_TOKENS),
        ("--max-num-seqs", max_num_seqs, _ABSURD_SEQS),
    ):
        if value is not None and value > upper:  # as `plan`: no tensor of that shape is built
            raise BadInputError(f"{flag} {value}: absurdly large (at most {upper:,})")
    if block_size is not None and block_size not in VALID_BLOCK_SIZES:
        raise BadInputError(
            f"--block-size {block_size}: vLLM accepts {', '.join(str(b) for b in VALID_BLOCK_SIZES)}"
        )
    if tensor_parallel_size > 64:
        raise BadInputError(f"--tensor-parallel-size {tensor_parallel_size}: at most 64 ranks")
    return ServeSettings(
        engine="vllm",
        engine_version=engine_version,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        enforce_eager=enforce_eager,
        tensor_parallel_size=tensor_parallel_size,
        dtype=dtype,
        mem_fraction_static=mem_fraction_static,
    )


def _device_memory(text: str | None) -> int | None:
    size = read_memory(text, "--device-memory")
    if size is not None and size <= 0:
        raise BadInputError(f"--device-memory {text}: must be positive")
    return size


def _request(
    model: str, settings: ServeSettings, device: str, device_memory: str | None, num_layers: int | None
) -> ProfileRequest:
    from vramctl.measure.model import check_supported
    from vramctl.measure.profiler import ProfileRequest
    from vramctl.registry import load_model

    if num_layers is not None and num_layers <= 0:
        raise BadInputError(f"--num-layers {num_layers}: must be positive")
    spec = load_model(model)
    check_supported(spec)
    if num_layers is not None and num_layers > spec.num_hidden_layers:
        raise BadInputError(
            f"--num-layers {num_layers}: {spec.name} has only {spec.num_hidden_layers} layers"
        )
    return ProfileRequest(
        spec=spec,
        settings=settings,
        device=device,
        device_memory_bytes=_device_memory(device_memory),
        num_layers=num_layers,
    )


def _model_source(model: str) -> str:
    path = Path(model)
    return str(path.resolve()) if path.exists() else model


def _document(result: ProfileResult, spec: ModelSpec, model_arg: str) -> dict[str, Any]:
    from vramctl.core.profile_file import build_document

    created = result.environment.get("time_utc") or datetime.now(UTC).isoformat(timespec="seconds")
    return build_document(
        result.to_json(), spec=spec, created_utc=str(created), model_source=_model_source(model_arg)
    )


def _suggest_input(result: ProfileResult, spec: ModelSpec, model_arg: str) -> SuggestInput:
    from vramctl.core.profile_file import parse_document

    return parse_document(_document(result, spec, model_arg), Path("<this run>")).suggest_input


def _check_save(save: str | None) -> None:
    if save is None:
        return
    from vramctl.core.atomic import output_target
    from vramctl.core.profile_file import dump_document

    target = output_target(save, flag="--save")  # never a FIFO / device; a symbolic link: its file
    if target.is_dir():
        raise BadInputError(f"--save {save}: is a folder, expected a file name")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise BadInputError(f"--save {save}: the folder {parent} does not exist")
    dump_document({}, target)  # checks the extension before anything is measured
    from vramctl.core.profile_file import check_overwrite

    check_overwrite(target)  # and that an existing file there is a profile, before minutes of measuring
    _check_writable(parent, f"--save {save}")


def _check_writable(folder: Path, what: str) -> None:
    """Create and remove a file in `folder` now: a read-only folder fails before the measurement, not after."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".vramctl-probe-"):
            pass
    except OSError as exc:
        raise BadInputError(f"{what}: cannot write in {folder} ({exc.strerror or exc})") from None


def _interrupted(exc: KeyboardInterrupt) -> typer.Exit:
    """Ctrl-C (exit 130) or SIGTERM (exit 143) during a measurement: memory released, nothing saved, one line."""
    from vramctl.core.interrupts import Terminated, answered, exit_code_for
    from vramctl.measure.oom import release

    answered()
    release()  # never imports torch itself: an interrupt inside `import torch` leaves it half-initialised
    what = "terminated" if isinstance(exc, Terminated) else "interrupted"
    with contextlib.suppress(OSError, ValueError):
        print(f"vramctl: {what}; device memory released, nothing saved", file=sys.stderr)
    return typer.Exit(exit_code_for(exc))


def _settings_from_profile(pf: ProfileFile) -> ServeSettings:
    s = pf.settings
    try:
        return ServeSettings(
            engine="vllm",
            engine_version=str(s["engine_version"]),
            gpu_memory_utilization=float(s["gpu_memory_utilization"]),
            max_model_len=int(s["max_model_len"]),
            max_num_batched_tokens=int(s["max_num_batched_tokens"]),
            max_num_seqs=int(s["max_num_seqs"]),
            block_size=int(s["block_size"]),
            kv_cache_dtype=str(s["kv_cache_dtype"]),
            enforce_eager=bool(s["enforce_eager"]),
            tensor_parallel_size=int(s["tensor_parallel_size"]),
            dtype=str(s["dtype"]),
            cudagraph_capture_sizes=tuple(int(x) for x in s["cudagraph_capture_sizes"]) or None,
            mem_fraction_static=None
            if s.get("mem_fraction_static") is None
            else float(s["mem_fraction_static"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"--from-profile {pf.path}: result.settings is incomplete ({exc})") from None


def _profiled_device_bytes(pf: ProfileFile, device: str | None) -> int | None:
    """The size of the device the profile measured, for `validate --from-profile` on the same kind of device: a
    cpu device (or a cuda one emulated with --device-memory) is emulated at that size again, so the pool is
    proven on the device it was sized for; a real card is used whole. None: the real device."""
    kind = (device or pf.device_kind).split(":", 1)[0]
    if kind != pf.device_kind:
        return None
    recorded = pf.result.get("device", {})
    emulated = recorded.get("emulated_capacity_bytes") if isinstance(recorded, dict) else None
    if pf.device_kind == "cpu" or emulated:
        return int(pf.suggest_input.total_bytes)
    return None


def _load_profile_for(path: str, model: str | None) -> tuple[ProfileFile, ModelSpec]:
    from vramctl.core.profile_file import check_model, load_profile
    from vramctl.registry import load_model

    pf = load_profile(path)
    source = model or pf.model_source
    try:
        spec = load_model(source)
    except BadInputError as exc:
        if model is None:
            raise BadInputError(
                f"--from-profile {path}: its model {source!r} cannot be loaded here ({exc}); pass MODEL"
            ) from None
        raise
    check_model(pf, spec)
    return pf, spec


def register(app: typer.Typer) -> None:
    """Add `profile`, `suggest` and `validate`."""

    @app.command("profile")
    def profile(
        model: Optional[str] = typer.Argument(
            None, help="Model: HF id, alias, or a local config.json / model folder (or --model)."
        ),
        model_option: ModelOpt = None,
        device: DeviceOpt = "cuda",
        device_memory: DeviceMemoryOpt = None,
        engine_version: EngineVersionOpt = None,
        gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
        max_model_len: MaxModelLenOpt = None,
        max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
        max_num_seqs: MaxNumSeqsOpt = None,
        kv_cache_dtype: KvCacheDtypeOpt = None,
        block_size: BlockSizeOpt = None,
        enforce_eager: EnforceEagerOpt = None,
        tensor_parallel_size: TensorParallelOpt = None,
        dtype: DtypeOpt = None,
        num_layers: NumLayersOpt = None,
        mem_fraction_static: MemFractionStaticOpt = None,
        compare: list[str] = typer.Option(
            [],
            "--compare",
            help="Re-run with one flag flipped, e.g. max-num-seqs=64 or enforce-eager (repeatable).",
        ),
        save: Optional[str] = typer.Option(
            None, "--save", help="Write the profile (.json / .yaml) atomically."
        ),
        as_json: JsonOpt = False,
    ) -> None:
        """Measure every memory term on the device, the way vLLM ≥0.28 profiles at start-up."""
        model = one_model(model, model_option)
        if model is None:
            raise BadInputError("profile: give MODEL (or --model MODEL)")
        from vramctl.measure.run import compare as compare_results
        from vramctl.measure.run import noise_threshold, parse_compare, run_profile, with_flag

        settings = _engine_settings(locals())
        flips = [parse_compare(text) for text in compare]
        base_flags = {name: value for name, value in locals().items() if name in _ENGINE_FLAGS}
        for flag, value in flips:  # a compared value gets the checks the flag itself gets
            if flag.replace("-", "_") in base_flags:
                try:
                    _engine_settings({**base_flags, flag.replace("-", "_"): value})
                except BadInputError as exc:
                    raise BadInputError(f"--compare {flag}={value}: {exc}") from None
        _check_save(save)
        request = _request(model, settings, device, device_memory, num_layers)
        on_phase = _progress(not as_json)
        # On the cpu device each compared run gets a fresh process: RSS is the measurement.
        isolated = bool(flips) and device.strip().lower() in ("cpu", "host")
        try:
            result = run_profile(request, on_phase=on_phase, isolated=isolated)
            comparisons = []
            for name, value in flips:
                if on_phase is not None:
                    on_phase("compare", f"re-running with {name}={value}")
                other = run_profile(with_flag(request, name, value), on_phase=on_phase, isolated=isolated)
                comparisons.append(
                    compare_results(result, other, name, value, noise_bytes=noise_threshold(result.device))
                )
            from vramctl.core.interrupts import commit, raise_if_pending

            raise_if_pending()  # a Ctrl-C a library swallowed (inside `import torch`) must not let the save happen
            if save is not None:
                from vramctl.core.profile_file import save_profile

                save_profile(_document(result, request.spec, model), save)
                commit()  # saved: an interrupt from here on (while the result prints) cannot undo it
        except KeyboardInterrupt as exc:
            raise _interrupted(exc) from None
        if as_json:
            from vramctl.render.jsonout import dumps

            out = result.to_json()
            if comparisons:
                out["comparisons"] = [c.to_json() for c in comparisons]
            if save is not None:
                out["saved_to"] = save
            typer.echo(dumps(out))
        else:
            from vramctl.render.profile import render_comparisons, render_profile

            console = _stdout_console()
            console.print(render_profile(result))
            if comparisons:
                console.print(render_comparisons(result, comparisons))
            if save is not None:
                console.print(f"saved {save}")
        if result.verdict != "fits":
            raise typer.Exit(ExitCode.CHECK_FAILED)

    @app.command("suggest")
    def suggest(
        model: Optional[str] = typer.Argument(
            None, help="Model to profile (not needed with --from-profile; or --model)."
        ),
        model_option: ModelOpt = None,
        kv_cache_memory: bool = typer.Option(
            True,
            "--kv-cache-memory/--no-kv-cache-memory",
            help="Suggest an explicit KV cache size (the default and only suggestion).",
        ),
        from_profile: Optional[str] = typer.Option(
            None, "--from-profile", help="A profile saved by `vramctl profile --save`."
        ),
        device: DeviceOpt = "cuda",
        device_memory: DeviceMemoryOpt = None,
        engine_version: EngineVersionOpt = None,
        gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
        max_model_len: MaxModelLenOpt = None,
        max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
        max_num_seqs: MaxNumSeqsOpt = None,
        kv_cache_dtype: KvCacheDtypeOpt = None,
        block_size: BlockSizeOpt = None,
        enforce_eager: EnforceEagerOpt = None,
        tensor_parallel_size: TensorParallelOpt = None,
        dtype: DtypeOpt = None,
        num_layers: NumLayersOpt = None,
        mem_fraction_static: MemFractionStaticOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The --kv-cache-memory-bytes that fits the requested memory and the one that fills the card."""
        from vramctl.core.suggest import suggest_kv_cache_memory

        model = one_model(model, model_option)
        if not kv_cache_memory:
            raise BadInputError(
                "suggest: --kv-cache-memory is the only suggestion there is; drop --no-kv-cache-memory"
            )
        if from_profile is not None:
            _refuse_flags_with_profile("suggest", locals())
            pf, spec = _load_profile_for(from_profile, model)
            inp, device_name, source = pf.suggest_input, pf.device_name, from_profile
        else:
            if model is None:
                raise BadInputError("suggest: give MODEL (it is profiled first) or --from-profile FILE")
            settings = _engine_settings(locals())
            request = _request(model, settings, device, device_memory, num_layers)
            from vramctl.measure.run import run_profile

            try:
                result = run_profile(request, on_phase=_progress(not as_json))
            except KeyboardInterrupt as exc:
                raise _interrupted(exc) from None
            spec = request.spec
            inp, device_name, source = _suggest_input(result, spec, model), result.device.name, "this run"
        suggestion = suggest_kv_cache_memory(inp)
        if as_json:
            from vramctl.render.jsonout import dumps

            out = {"model": spec.name, "gpu": device_name, "from": source, **suggestion.to_json()}
            typer.echo(dumps(out))
        else:
            from vramctl.render.profile import render_suggest

            _stdout_console().print(render_suggest(suggestion, model=spec.name, device=device_name))
        if suggestion.fit_requested.num_blocks < 1 and suggestion.fill_gpu.num_blocks < 1:
            raise typer.Exit(ExitCode.CHECK_FAILED)

    @app.command("validate")
    def validate(
        model: Optional[str] = typer.Argument(None, help="Model (not needed with --from-profile; or --model)."),
        model_option: ModelOpt = None,
        from_profile: Optional[str] = typer.Option(
            None, "--from-profile", help="A profile saved by `vramctl profile --save`."
        ),
        kv_cache_memory_bytes: Optional[str] = typer.Option(
            None,
            "--kv-cache-memory-bytes",
            "--kv-cache-memory",
            help=flag_help("--kv-cache-memory-bytes", "The KV pool to prove [default: the suggestion for --target]."),
        ),
        target: str = typer.Option(
            "requested", "--target", help="Which suggestion to prove: requested or gpu."
        ),
        min_free: str = typer.Option(
            "0", "--min-free", help="Fail unless at least this much stays free (e.g. 512MiB; a bare number is GiB)."
        ),
        device: Optional[str] = typer.Option(
            None,
            "--device",
            help="cuda, cuda:N or cpu [default: the profile's device with --from-profile, else cuda].",
        ),
        device_memory: Optional[str] = typer.Option(
            None,
            "--device-memory",
            help="Emulate a device of this size [default: the profile's device size with --from-profile].",
        ),
        engine_version: EngineVersionOpt = None,
        gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
        max_model_len: MaxModelLenOpt = None,
        max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
        max_num_seqs: MaxNumSeqsOpt = None,
        kv_cache_dtype: KvCacheDtypeOpt = None,
        block_size: BlockSizeOpt = None,
        enforce_eager: EnforceEagerOpt = None,
        tensor_parallel_size: Optional[str] = typer.Option(
            None,
            "--tensor-parallel-size",
            "-tp",
            help=flag_help("--tensor-parallel-size", "Validate rank 0's shard (the per-rank pool) on this device."),
        ),
        dtype: DtypeOpt = None,
        mem_fraction_static: MemFractionStaticOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Allocate the real KV pool, run the max-shape forward (and graphs) under it: pass or fail."""
        from vramctl.core.suggest import suggest_kv_cache_memory
        from vramctl.measure.profiler import ProfileRequest
        from vramctl.measure.run import run_profile, run_validate

        if target not in ("requested", "gpu"):
            raise BadInputError(f"--target {target!r}: expected requested or gpu")
        model = one_model(model, model_option)
        min_free_bytes = read_memory(min_free, "--min-free") or 0
        explicit = (
            None
            if kv_cache_memory_bytes is None
            else by_name("--kv-cache-memory-bytes").parse(kv_cache_memory_bytes)
        )
        on_phase = _progress(not as_json)
        try:
            if from_profile is not None:
                _refuse_flags_with_profile("validate", locals())
                pf, spec = _load_profile_for(from_profile, model)
                request = ProfileRequest(
                    spec=spec,
                    settings=_settings_from_profile(pf),
                    device=device or pf.device_kind,
                    device_memory_bytes=_device_memory(device_memory)
                    if device_memory is not None
                    else _profiled_device_bytes(pf, device),
                )
                inp = pf.suggest_input
            else:
                if model is None:
                    raise BadInputError("validate: give MODEL (it is profiled first) or --from-profile FILE")
                settings = _engine_settings(locals())
                request = _request(model, settings, device or "cuda", device_memory, None)
                inp = None
                if explicit is None:
                    result = run_profile(request, on_phase=on_phase)
                    inp = _suggest_input(result, request.spec, model)
            if explicit is not None:
                kv_bytes = explicit
            else:
                assert inp is not None
                suggestion = suggest_kv_cache_memory(inp)
                chosen = suggestion.fit_requested if target == "requested" else suggestion.fill_gpu
                kv_bytes = chosen.kv_cache_memory_bytes
                if not chosen.fits:
                    raise _NoRoomError(
                        f"validate: the --target {target} suggestion leaves no KV block ({kv_bytes} bytes after "
                        f"non-KV {suggestion.non_kv_bytes} bytes and the 150 MiB buffer): the configuration does not "
                        "fit, nothing to prove; lower --max-num-batched-tokens / --max-num-seqs, raise "
                        "--gpu-memory-utilization, or try --target gpu"
                    )
            outcome = run_validate(
                request, kv_cache_memory_bytes=kv_bytes, min_free_bytes=min_free_bytes, on_phase=on_phase
            )
        except KeyboardInterrupt as exc:
            raise _interrupted(exc) from None
        if as_json:
            from vramctl.render.jsonout import dumps

            typer.echo(dumps(outcome.to_json()))
        else:
            from vramctl.render.profile import render_validate

            _stdout_console().print(render_validate(outcome))
        if not outcome.passed:
            raise typer.Exit(ExitCode.CHECK_FAILED)
