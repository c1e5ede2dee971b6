"""`vramctl tiers plan`: does a host / disk / network KV tier beat recomputing, for this model on this card?

    vramctl tiers plan                                        # Llama-3-8B-Instruct on an H100 SXM
    vramctl tiers plan llama-3-8b --gpu h100-sxm --achieved-flops 400e12
    vramctl tiers plan qwen3-8b --gpu l40s --tier cxl=64 --bandwidths bench.json
    vramctl tiers plan --gpu-tokens 445632 --arrival-rate 2000 --host-memory 128GiB

Parse → `vramctl.tiers.crossover` → render. No GPU, no torch. Exit 0, or 2 on bad input; a host tier that
does not fit the machine's RAM is exit 1.
"""

from __future__ import annotations

import re
from typing import Optional

import typer

from vramctl.cli.engine_flags import read_memory
from vramctl.core.errors import BadInputError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.host_tier import machine_memory_bytes
from vramctl.core.units import parse_number

DEFAULT_MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
DEFAULT_GPU = "h100-sxm"
DEFAULT_CONTEXT = 8192


def _count(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    value = parse_number(text, what=flag)
    if value != int(value):
        raise BadInputError(f"{flag} {text!r}: not a whole number of tokens")
    if value <= 0:
        raise BadInputError(f"{flag} {text}: must be positive")
    return int(value)


_SCALED = re.compile(
    r"^\s*([0-9.,_eE+-]+)\s*([kKMGTP]?)\s*(?:tok/s|tokens/s|flop/s|flops|tflop/s)?\s*$", re.I
)
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_rate(text: str | None, flag: str) -> float | None:
    """A positive rate: `22000`, `2.2e4`, `22k`, `400T`, `400 TFLOP/s` (decimal suffixes k M G T P)."""
    if text is None:
        return None
    match = _SCALED.match(text)
    if match is None:
        raise BadInputError(f"{flag} {text!r}: not a number (e.g. 400e12, 400T, 22k)")
    value = parse_number(match.group(1), what=flag) * _SCALE[match.group(2).lower()]
    if "tflop" in text.lower() and not match.group(2):
        value *= 1e12
    if value <= 0:
        raise BadInputError(f"{flag} {text}: must be positive")
    return value


def _ranks(value: int, flag: str) -> int:
    if value < 1:
        raise BadInputError(f"{flag} {value}: must be at least 1")
    return value


def register(app: typer.Typer) -> None:
    """Add `plan` to the `tiers` group."""

    @app.command("plan")
    def tiers_plan(
        model: Optional[str] = typer.Argument(
            None, help=f"HF id, alias or config.json path [default: {DEFAULT_MODEL}]."
        ),
        model_option: Optional[str] = typer.Option(
            None, "--model", help="The model, as the positional (both are accepted, as in `plan`)."
        ),
        gpu: str = typer.Option(
            DEFAULT_GPU, "--gpu", help="GPU profile: its HBM and host-link bandwidth and FLOP/s."
        ),
        tensor_parallel_size: int = typer.Option(
            1, "--tensor-parallel-size", "-tp", help="TP ranks (KV per rank)."
        ),
        pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp", help="PP stages."),
        kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto, fp8, fp8_e5m2, ..."),
        prefill_rate: Optional[str] = typer.Option(
            None, "--prefill-rate", help="The engine's achieved prefill rate in tokens/s (instead of FLOPs)."
        ),
        achieved_flops: Optional[str] = typer.Option(
            None,
            "--achieved-flops",
            help="Achieved FLOP/s per GPU, e.g. 400e12 [default: 40% of the card's dense bf16].",
        ),
        context: Optional[int] = typer.Option(
            None,
            "--context",
            help="Prefill length the FLOPs per token are averaged over [default: 8192, or the model's "
            "max_position_embeddings if shorter].",
            show_default=False,
        ),
        tier: Optional[list[str]] = typer.Option(
            None, "--tier", help="Another tier, NAME=GB/s (repeatable)."
        ),
        bandwidths: Optional[str] = typer.Option(
            None, "--bandwidths", help="Measured bandwidths from `vramctl tiers bench --save FILE`."
        ),
        tokens: str = typer.Option("8192", "--tokens", help="Prefix length to fetch or recompute."),
        gpu_tokens: Optional[str] = typer.Option(
            None,
            "--gpu-tokens",
            help="GPU KV pool in tokens, or auto (vramctl plan's vLLM pool) (residency).",
        ),
        host_tokens: Optional[str] = typer.Option(
            None,
            "--host-tokens",
            help="Host tier, tokens per rank [default: 2 × --gpu-tokens, SGLang's ratio].",
        ),
        arrival_rate: Optional[str] = typer.Option(
            None, "--arrival-rate", help="New (unique) tokens entering the cache per second (residency)."
        ),
        host_memory: Optional[str] = typer.Option(
            None, "--host-memory", help="The machine's RAM, e.g. 128GiB [default: MemTotal of this machine]."
        ),
        json_out: bool = typer.Option(False, "--json", help="One JSON object (docs/tiers.md)."),
        plot: Optional[str] = typer.Option(
            None, "--plot", help="Write the crossover chart to FILE.png or FILE.svg."
        ),
    ) -> None:
        """When fetching KV from host, disk or network beats recomputing it; residency windows; host RAM."""
        from vramctl.core.kv import check_tensor_parallel, kv_bytes_per_token
        from vramctl.registry import load_gpu, load_model
        from vramctl.tiers.bandwidths import load_bandwidths
        from vramctl.tiers.crossover import (
            HostMemoryCheck,
            measured_tiers,
            nominal_tiers,
            parse_tier_option,
            plan_tiers,
            residency_model,
        )
        from vramctl.tiers.crossover import (
            prefill_rate as derive_rate,
        )

        tp = _ranks(tensor_parallel_size, "--tensor-parallel-size")
        pp = _ranks(pipeline_parallel_size, "--pipeline-parallel-size")
        if prefill_rate is not None and achieved_flops is not None:
            raise BadInputError(
                f"--prefill-rate {prefill_rate} and --achieved-flops {achieved_flops}: give one or the other"
            )
        if context is not None and context <= 0:
            raise BadInputError(f"--context {context}: must be a positive number of tokens")
        n_tokens = _count(tokens, "--tokens")
        assert n_tokens is not None
        gpu_tokens_source = "--gpu-tokens"
        auto_pool = gpu_tokens is not None and gpu_tokens.strip().lower() == "auto"
        c_gpu = None if auto_pool else _count(gpu_tokens, "--gpu-tokens")
        c_host = _count(host_tokens, "--host-tokens")
        arrival = parse_rate(arrival_rate, "--arrival-rate")
        if (c_gpu is None and not auto_pool) != (arrival is None):
            raise BadInputError("--gpu-tokens and --arrival-rate go together (the residency window is C / λ)")
        if c_host is not None and c_gpu is None and host_memory is None:
            raise BadInputError(
                "--host-tokens needs --gpu-tokens and --arrival-rate (residency) or --host-memory"
            )
        if plot is not None:
            from vramctl.render.plots import check_plot_target

            check_plot_target(plot)

        if model is not None and model_option is not None and model != model_option:
            raise BadInputError(f"MODEL {model!r} and --model {model_option!r}: two models; give one of them")
        model = model if model is not None else model_option
        spec = load_model(DEFAULT_MODEL if model is None else model)
        card = load_gpu(gpu)
        check_tensor_parallel(spec, tp)
        if context is None:
            context = min(DEFAULT_CONTEXT, spec.max_position_embeddings)
        elif context > spec.max_position_embeddings:
            raise BadInputError(
                f"--context {context}: longer than {spec.name}'s max_position_embeddings "
                f"({spec.max_position_embeddings}); no prefill runs that long"
            )
        bpt = kv_bytes_per_token(spec, kv_cache_dtype=kv_cache_dtype, tp=tp, pp=pp)
        rate = derive_rate(
            spec,
            card,
            tp=tp,
            prefill_rate_tokens_per_s=parse_rate(prefill_rate, "--prefill-rate"),
            achieved_flops=parse_rate(achieved_flops, "--achieved-flops"),
            context=context,
        )
        links = nominal_tiers(card)
        if bandwidths is not None:
            links.extend(measured_tiers(load_bandwidths(bandwidths)))
        links.extend(parse_tier_option(text) for text in tier or [])

        if auto_pool:
            from vramctl.core.plan import plan_vllm
            from vramctl.core.settings import ServeSettings

            pool = plan_vllm(
                spec,
                card,
                ServeSettings(
                    tensor_parallel_size=tp,
                    pipeline_parallel_size=pp,
                    kv_cache_dtype=kv_cache_dtype,
                    max_model_len=8192,
                ),
            )
            if pool.kv_tokens <= 0:
                raise BadInputError(
                    f"--gpu-tokens auto: {spec.name} leaves no KV cache on {card.name} (see vramctl plan)"
                )
            c_gpu = pool.kv_tokens
            gpu_tokens_source = "vramctl plan (vLLM defaults, max-model-len 8192)"
        residency = None
        if c_gpu is not None and arrival is not None:
            residency = residency_model(
                gpu_tokens=c_gpu,
                host_tokens=c_host,
                arrival_tokens_per_s=arrival,
                gpu_tokens_source=gpu_tokens_source,
            )
        if host_memory is not None:
            machine = read_memory(host_memory, "--host-memory") or 0
            if machine <= 0:
                raise BadInputError(f"--host-memory {host_memory}: must be positive")
            machine_source = f"--host-memory {host_memory}"
        else:
            found = machine_memory_bytes()
            machine = found or 0
            machine_source = "MemTotal, /proc/meminfo of this machine"
        memory = None
        if machine > 0:
            host_for_check = c_host if c_host is not None else (residency.host_tokens if residency else None)
            memory = HostMemoryCheck(
                host_tokens=host_for_check,
                bytes_per_token=bpt,
                ranks=tp * pp,
                machine_bytes=machine,
                machine_source=machine_source,
            )
        plan = plan_tiers(
            model=spec,
            gpu=card,
            bytes_per_token=bpt,
            rate=rate,
            links=links,
            tokens=n_tokens,
            tp=tp,
            kv_cache_dtype=kv_cache_dtype,
            residency=residency,
            host_memory=memory,
        )
        if plot is not None:
            from vramctl.render.plots import plot_crossover

            plot_crossover(plan, plot)
        if json_out:
            from vramctl.render.jsonout import dumps

            typer.echo(dumps(plan.to_json()))
        else:
            from vramctl.render.tiers import print_tiers_plan

            print_tiers_plan(plan)
            if plot is not None:
                typer.echo(f"wrote {plot}")
        if memory is not None and memory.fits is False:
            raise typer.Exit(int(ExitCode.CHECK_FAILED))
