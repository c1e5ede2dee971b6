"""`vramctl plan`: will `vllm serve MODEL --flags` (or SGLang's launch) start on this card, and with how much KV?

    vramctl plan                                   # the embedded default: Llama-3-8B-Instruct on one H100 SXM
    vramctl plan qwen3-8b --gpu l40s --max-model-len 32768
    vramctl plan -- vllm serve meta-llama/Meta-Llama-3-8B-Instruct --gpu-memory-utilization 0.95
    vramctl plan --engine both -- python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2

Parse → one library call (`vramctl.core.plan.plan`) → render. Exit 0 fits, 1 does not fit, 2 bad input.
No torch import anywhere on this path.
"""

from __future__ import annotations

import os
import re
from typing import Any

import typer

from vramctl.core.errors import BadInputError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.host_tier import machine_memory_bytes
from vramctl.core.serve_command import parse_human_int, parse_max_model_len
from vramctl.core.settings import ServeSettings
from vramctl.core.units import MiB, parse_bytes, parse_number

DEFAULT_MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
DEFAULT_GPU = "h100-sxm"
DEFAULT_MAX_MODEL_LEN = 8192
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
_LAUNCHERS = ("vllm", "python", "python3", "sglang", "env")
_OPTION_OF = {
    "free_memory_bytes": "free_memory",
    "gpu_memory_bytes": "gpu_memory",
    "hicache_size_gb": "hicache_size",
    "kv_offloading_size_gib": "kv_offloading_size",
    "host_memory_bytes": "host_memory",
}
"""ServeSettings field → the `plan` option it comes from, where the names differ."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _is_launcher(word: str) -> bool:
    """`vllm`, `python3`, `/usr/bin/python3.11`, `sglang`, `env` or a `VAR=value` prefix: a serve command starts."""
    head = word.rsplit("/", 1)[-1]
    return head in _LAUNCHERS or head.startswith("python") or ("=" in word and not word.startswith("-"))


def _int(text: str | None, flag: str) -> int | None:
    """vLLM's human-readable ints (32k = 32,000, 32K = 32,768), as in a serve command."""
    return None if text is None else parse_human_int(text, flag)


def _max_model_len(text: str | None) -> int | None:
    """`auto` / `-1` = vLLM's auto-fit (kept as -1, vLLM's own value)."""
    return None if text is None else parse_max_model_len(text)


def _float(text: str | None, flag: str) -> float | None:
    return None if text is None else parse_number(text, what=flag)


def _size(text: str | None, flag: str, default_unit: str = "B") -> int | None:
    return None if text is None else parse_bytes(text, what=flag, default_unit=default_unit)


_BARE_NUMBER = re.compile(r"\s*[0-9][0-9_]*(\.[0-9]*)?([eE][+-]?[0-9]+)?\s*")


def _memory_size(text: str | None, flag: str) -> int | None:
    """A card's or a host's memory. A bare number is bytes; one below 1 MiB (`--gpu-memory 80`) is a missing unit,
    not a GPU of 80 bytes that nothing fits on (read-log and check read such a number as GiB)."""
    size = _size(text, flag)
    if text is not None and size is not None and 0 < size < MiB and _BARE_NUMBER.fullmatch(text):
        raise BadInputError(f"{flag} {text.strip()}: {size} bytes; write the unit, e.g. {text.strip()}GiB")
    return size


_VLLM_ONLY = (
    "gpu_memory_utilization",
    "max_num_batched_tokens",
    "max_num_seqs",
    "max_num_active_seqs",
    "block_size",
    "enforce_eager",
    "kv_cache_memory_bytes",
    "entrypoint",
    "kv_offloading_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "enable_lora",
    "max_loras",
    "max_lora_rank",
    "fully_sharded_loras",
    "kv_offloading_backend",
    "load_format",
    "weight_cache_mode",
    "enable_sleep_mode",
    "enable_nccl_comm_suspend",
    "sleep_mode_offload_cudagraph",
    "kv_cache_memory_suggestion",
)
_SGLANG_ONLY = (
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_running_requests",
    "max_total_tokens",
    "page_size",
    "cuda_graph_max_bs",
    "disable_cuda_graph",
    "enable_hierarchical_cache",
    "hicache_ratio",
    "hicache_size",
)


def _refuse_other_engines_options(options: dict[str, Any], engine: str) -> None:
    """A flag of the engine not planned changes nothing: say so rather than print a plan that ignores it."""
    other, other_name = (_SGLANG_ONLY, "SGLang") if engine == "vllm" else (_VLLM_ONLY, "vLLM")
    if engine == "both":
        return
    for name in other:
        value = options.get(name)
        if value is not None and value is not False:
            flag = "--" + name.replace("_", "-")
            shown = "" if value is True else f" {value}"
            raise BadInputError(
                f"{flag}{shown}: {'an' if other_name == 'SGLang' else 'a'} {other_name} flag, but the plan is for "
                f"{engine} only (add --engine "
                f"{'sglang' if other_name == 'SGLang' else 'vllm'} or --engine both)"
            )


def run_plan(
    words: list[str],
    options: dict[str, Any],
) -> tuple[Any, str | None, tuple[str, ...]]:
    """Build the settings from the positional words / serve command and the options; plan. Returns
    (PlanResult, model name used, notes about the command)."""
    from vramctl import registry
    from vramctl.core.plan import plan
    from vramctl.core.serve_command import parse_serve_command, split_words

    settings = ServeSettings()
    sglang_options: Any = None
    model_name: str | None = None
    notes: tuple[str, ...] = ()
    command = None
    if words:
        pasted = words[0].split() if len(words) == 1 else []
        if len(pasted) > 1 and _is_launcher(pasted[0]):
            words = split_words(words[0])  # the whole command pasted as one quoted argument
        is_command = len(words) > 1 or _is_launcher(words[0])
        if is_command:
            command = parse_serve_command(words)
            settings = command.apply(settings)
            model_name = command.model
            notes = command.notes
            if command.engine == "sglang":
                sglang_options, notes = _sglang_options(command)
            if model_name is None and options.get("model") is None:
                flag = "MODEL after `vllm serve`" if command.engine == "vllm" else "--model-path MODEL"
                raise BadInputError(f"serve command: no model (give {flag}, or --model)")
        else:
            model_name = words[0]
            if options.get("model") is not None and options["model"] != model_name:
                raise BadInputError(
                    f"MODEL {model_name!r} and --model {options['model']!r}: two models; give one of them"
                )
    if options.get("model") is not None:
        if model_name is not None and model_name != options["model"]:
            notes = (*notes, f"--model {options['model']} overrides {model_name!r} from the command")
        model_name = options["model"]
    embedded = model_name is None
    if model_name is None:
        model_name = DEFAULT_MODEL

    changes: dict[str, Any] = {}
    engine = options.get("engine")
    if engine is not None:
        if engine not in ("vllm", "sglang", "both"):
            raise BadInputError(f"--engine {engine!r}: use vllm, sglang or both")
        changes["engine"] = engine
    if options.get("engine_version") is not None:
        changes["engine_version"] = options["engine_version"]
    numeric: dict[str, Any] = {
        "gpu_memory_utilization": _float(options.get("gpu_memory_utilization"), "--gpu-memory-utilization"),
        "max_model_len": _max_model_len(options.get("max_model_len")),
        "max_num_batched_tokens": _int(options.get("max_num_batched_tokens"), "--max-num-batched-tokens"),
        "max_num_seqs": _int(options.get("max_num_seqs"), "--max-num-seqs"),
        "max_num_active_seqs": _int(options.get("max_num_active_seqs"), "--max-num-active-seqs"),
        "block_size": _int(options.get("block_size"), "--block-size"),
        "tensor_parallel_size": _int(options.get("tensor_parallel_size"), "--tensor-parallel-size"),
        "pipeline_parallel_size": _int(options.get("pipeline_parallel_size"), "--pipeline-parallel-size"),
        "data_parallel_size": _int(options.get("data_parallel_size"), "--data-parallel-size"),
        "max_loras": _int(options.get("max_loras"), "--max-loras"),
        "max_lora_rank": _int(options.get("max_lora_rank"), "--max-lora-rank"),
        "kv_cache_memory_bytes": _size(options.get("kv_cache_memory_bytes"), "--kv-cache-memory-bytes"),
        "free_memory_bytes": _memory_size(options.get("free_memory"), "--free-memory"),
        "gpu_memory_bytes": _memory_size(options.get("gpu_memory"), "--gpu-memory"),
        "mem_fraction_static": _float(options.get("mem_fraction_static"), "--mem-fraction-static"),
        "chunked_prefill_size": _int(options.get("chunked_prefill_size"), "--chunked-prefill-size"),
        "max_running_requests": _int(options.get("max_running_requests"), "--max-running-requests"),
        "max_total_tokens": _int(options.get("max_total_tokens"), "--max-total-tokens"),
        "page_size": _int(options.get("page_size"), "--page-size"),
        "cuda_graph_max_bs": _int(options.get("cuda_graph_max_bs"), "--cuda-graph-max-bs"),
        "hicache_ratio": _float(options.get("hicache_ratio"), "--hicache-ratio"),
        "hicache_size_gb": _float(options.get("hicache_size"), "--hicache-size"),
        "kv_offloading_size_gib": _float(options.get("kv_offloading_size"), "--kv-offloading-size"),
        "host_memory_bytes": _memory_size(options.get("host_memory"), "--host-memory"),
    }
    changes.update({k: v for k, v in numeric.items() if v is not None})
    if command is not None:
        given = dict(command.changes)
        for key, value in numeric.items():
            if value is not None and key in given and given[key] != value:
                flag = "--" + key.replace("_", "-")
                notes = (
                    *notes,
                    f"{flag} {options[_OPTION_OF.get(key, key)]} overrides {given[key]} from the command",
                )
    if options.get("entrypoint") is not None:
        if options["entrypoint"] not in ("server", "llm"):
            raise BadInputError(f"--entrypoint {options['entrypoint']!r}: use server or llm")
        changes["entrypoint"] = options["entrypoint"]
    for flag in ("kv_cache_dtype", "dtype", "quantization", "load_format", "weight_cache_mode", "kv_offloading_backend"):
        if options.get(flag) is not None:
            changes[flag] = options[flag]
    for flag in (
        "enforce_eager",
        "disable_cuda_graph",
        "enable_hierarchical_cache",
        "enable_expert_parallel",
        "enable_lora",
        "fully_sharded_loras",
        "enable_sleep_mode",
        "enable_nccl_comm_suspend",
        "sleep_mode_offload_cudagraph",
        "kv_cache_memory_suggestion",
    ):
        if options.get(flag):
            changes[flag] = True
    if changes.get("tensor_parallel_size", 1) < 1 or changes.get("pipeline_parallel_size", 1) < 1:
        bad = (
            "--tensor-parallel-size"
            if changes.get("tensor_parallel_size", 1) < 1
            else "--pipeline-parallel-size"
        )
        raise BadInputError(f"{bad}: must be at least 1")
    settings = settings.with_changes(**changes)
    _refuse_other_engines_options(options, settings.engine)
    if embedded:
        # The embedded default (issue 2): max_model_len 8192, max_num_batched_tokens 8192 unless given.
        if settings.max_model_len is None:
            settings = settings.with_changes(max_model_len=DEFAULT_MAX_MODEL_LEN)
        if settings.max_num_batched_tokens is None:
            settings = settings.with_changes(max_num_batched_tokens=DEFAULT_MAX_NUM_BATCHED_TOKENS)
    wants_host = (
        settings.kv_offloading_size_gib is not None
        or settings.enable_hierarchical_cache
        or settings.hicache_ratio is not None
        or bool(settings.hicache_size_gb)
    )
    if wants_host and settings.host_memory_bytes is None:
        settings = settings.with_changes(host_memory_bytes=machine_memory_bytes())

    from vramctl.registry.overrides import merged_config, parse_overrides

    revision = options.get("revision")
    offline = bool(options.get("offline"))
    overrides = parse_overrides(options.get("hf_overrides"))
    rope = parse_overrides(options.get("rope_scaling"), "--rope-scaling")
    allow_long = _truthy(os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"))
    if command is not None:
        flags = dict(command.flags)
        if revision is None and flags.get("revision"):
            revision = flags["revision"]
        env = dict(command.env)
        offline = offline or _truthy(env.get("HF_HUB_OFFLINE"))
        allow_long = allow_long or _truthy(env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"))
        if overrides is None:
            overrides = parse_overrides(flags.get("hf-overrides"))
        if rope is None:
            rope = parse_overrides(flags.get("rope-scaling"), "--rope-scaling")
    if rope is not None:
        overrides = merged_config(overrides or {}, rope)
    if allow_long:
        settings = settings.with_changes(allow_long_max_model_len=True)
    model = registry.load_model(model_name, revision=revision, offline=offline, hf_overrides=overrides)
    gpu_name = options.get("gpu")
    if gpu_name is None and settings.gpu_memory_bytes is not None:
        gpu = registry.gpu_from_capacity(settings.gpu_memory_bytes)
    else:
        gpu = registry.load_gpu(DEFAULT_GPU if gpu_name is None else gpu_name)
    return plan(model, gpu, settings, sglang_options=sglang_options), model_name, notes


def _sglang_options(command: Any) -> tuple[Any, tuple[str, ...]]:
    """SGLang's flags that ServeSettings does not hold (`--enable-dp-attention`, `--dp-size`,
    `--moe-a2a-backend`, `--speculative-*`, `--disaggregation-mode`, `--attention-backend`, …) and the env
    `SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1`, folded into SglangOptions the way `vramctl check` folds them; the
    serve command's "ignored" notes for them are dropped."""
    from vramctl.core.check import FLAGS, apply_flags
    from vramctl.core.engines.sglang import SglangOptions

    modelled = {
        name: value
        for name, value in command.flags
        if name in FLAGS and FLAGS[name].target.startswith("options.")
    }
    flags: dict[str, Any] = {name: True if value is None else value for name, value in modelled.items()}
    _, options, _, _ = apply_flags(
        ("sglang",), flags, ServeSettings(), SglangOptions(), source="serve command"
    )
    env = dict(command.env)
    if "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING" in env:
        value = env["SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"].strip().lower()
        options = options.with_changes(post_capture_kv_sizing=value in ("1", "true", "yes", "on"))
    notes = tuple(
        n for n in command.notes if not any(n.startswith(f"ignored --{name}:") for name in modelled)
    )
    return options, notes


def register(app: typer.Typer) -> None:
    @app.command(
        "plan",
        context_settings={"allow_interspersed_args": True},
        help=(
            "Plan the GPU memory of a vLLM / SGLang server before starting it: every term of the budget, KV blocks, "
            "tokens and concurrency, the verdict, and the utilisation trade. MODEL (default "
            f"{DEFAULT_MODEL}) or a whole serve command after `--`. Exit 0 fits, 1 does not fit, 2 bad input."
        ),
    )
    def plan_command(
        words: list[str] = typer.Argument(None, metavar="[MODEL | -- SERVE COMMAND…]", show_default=False),
        model: str = typer.Option(
            None,
            "--model",
            help="HF id (org/name[@rev]: read from the Hub), alias, or local config.json / folder.",
        ),
        revision: str = typer.Option(
            None, "--revision", help="Hub branch, tag or commit of MODEL (or write org/name@rev)."
        ),
        offline: bool = typer.Option(
            False, "--offline", help="Never contact the Hub: the HF cache only (as HF_HUB_OFFLINE=1)."
        ),
        hf_overrides: str = typer.Option(
            None,
            "--hf-overrides",
            help='vLLM: JSON applied to the model config, e.g. \'{"rope_scaling": {"rope_type": "yarn", ...}}\'.',
        ),
        rope_scaling: str = typer.Option(
            None, "--rope-scaling", help="Older vLLM: JSON rope_scaling (as --hf-overrides on that key)."
        ),
        gpu: str = typer.Option(None, "--gpu", help=f"GPU name (default {DEFAULT_GPU}); see `vramctl gpus`."),
        gpu_memory: str = typer.Option(None, "--gpu-memory", help="A card's CUDA total, e.g. 79.18GiB."),
        engine: str = typer.Option(None, "--engine", help="vllm (default), sglang or both."),
        engine_version: str = typer.Option(
            None, "--engine-version", help="e.g. 0.11.0 (default: latest known)."
        ),
        gpu_memory_utilization: str = typer.Option(
            None, "--gpu-memory-utilization", help="vLLM u in (0, 1]."
        ),
        max_model_len: str = typer.Option(None, "--max-model-len"),
        max_num_batched_tokens: str = typer.Option(None, "--max-num-batched-tokens"),
        max_num_seqs: str = typer.Option(None, "--max-num-seqs"),
        max_num_active_seqs: str = typer.Option(
            None, "--max-num-active-seqs", help="vLLM 0.31 →: requests admitted to run at once (≤ --max-num-seqs)."
        ),
        kv_cache_dtype: str = typer.Option(
            None, "--kv-cache-dtype", help="auto, fp8, fp8_e5m2, fp8_ds_mla, …"
        ),
        block_size: str = typer.Option(None, "--block-size"),
        tensor_parallel_size: str = typer.Option(None, "--tensor-parallel-size", "-tp"),
        pipeline_parallel_size: str = typer.Option(None, "--pipeline-parallel-size", "-pp"),
        data_parallel_size: str = typer.Option(
            None,
            "--data-parallel-size",
            "-dp",
            help="vLLM engine replicas (totals across them in the notes).",
        ),
        enable_expert_parallel: bool = typer.Option(
            False,
            "--enable-expert-parallel",
            "-ep",
            help="vLLM: MoE experts spread whole over the TP × DP ranks.",
        ),
        enable_lora: bool = typer.Option(
            False, "--enable-lora", help="vLLM: adapter slots allocated with the weights."
        ),
        max_loras: str = typer.Option(None, "--max-loras", help="vLLM adapter slots per batch (default 1)."),
        max_lora_rank: str = typer.Option(None, "--max-lora-rank", help="vLLM: 1, 8, 16 (default) … 512."),
        fully_sharded_loras: bool = typer.Option(False, "--fully-sharded-loras", help="vLLM."),
        enforce_eager: bool = typer.Option(False, "--enforce-eager", help="No CUDA graphs."),
        kv_cache_memory_bytes: str = typer.Option(
            None, "--kv-cache-memory-bytes", help="Explicit KV size (bytes, 8G, 54.4GiB); skips the estimate."
        ),
        free_memory: str = typer.Option(None, "--free-memory", help="Free memory before start, e.g. 60GiB."),
        dtype: str = typer.Option(None, "--dtype"),
        quantization: str = typer.Option(
            None,
            "--quantization",
            "-q",
            help="The engine's --quantization: fp8 or bitsandbytes quantise an unquantised checkpoint while it "
            "loads; another method must match the checkpoint's.",
        ),
        entrypoint: str = typer.Option(
            None,
            "--entrypoint",
            help="vLLM defaults of `server` (vllm serve, default) or `llm` (the LLM class).",
        ),
        mem_fraction_static: str = typer.Option(None, "--mem-fraction-static", help="SGLang."),
        chunked_prefill_size: str = typer.Option(None, "--chunked-prefill-size", help="SGLang."),
        max_running_requests: str = typer.Option(None, "--max-running-requests", help="SGLang."),
        max_total_tokens: str = typer.Option(None, "--max-total-tokens", help="SGLang."),
        page_size: str = typer.Option(None, "--page-size", help="SGLang."),
        cuda_graph_max_bs: str = typer.Option(None, "--cuda-graph-max-bs", help="SGLang."),
        disable_cuda_graph: bool = typer.Option(False, "--disable-cuda-graph", help="SGLang."),
        enable_hierarchical_cache: bool = typer.Option(
            False, "--enable-hierarchical-cache", help="SGLang HiCache."
        ),
        hicache_ratio: str = typer.Option(None, "--hicache-ratio", help="SGLang, default 2.0."),
        hicache_size: str = typer.Option(None, "--hicache-size", help="SGLang, decimal GB per rank."),
        kv_offloading_size: str = typer.Option(None, "--kv-offloading-size", help="vLLM, GiB across TP."),
        # vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features)
        kv_offloading_backend: str = typer.Option(
            None, "--kv-offloading-backend", help="vLLM: native (default) or lmcache."
        ),
        load_format: str = typer.Option(
            None, "--load-format", help="vLLM: ipc_cache = weights held by a `vllm preload` daemon (0.30 →)."
        ),
        weight_cache_mode: str = typer.Option(
            None, "--weight-cache-mode", help="ipc_cache: zero_copy (default) or copy (the loader's `mode`)."
        ),
        enable_sleep_mode: bool = typer.Option(
            False, "--enable-sleep-mode", help="vLLM: report what /sleep levels 1 and 2 free."
        ),
        enable_nccl_comm_suspend: bool = typer.Option(
            False, "--enable-nccl-comm-suspend", help="vLLM 0.30 →: sleep also frees NCCL communicators."
        ),
        sleep_mode_offload_cudagraph: bool = typer.Option(
            False, "--sleep-mode-offload-cudagraph", help="vLLM 0.32 →: sleep also offloads the graph pool."
        ),
        kv_cache_memory_suggestion: bool = typer.Option(
            False,
            "--kv-cache-memory-suggestion",
            help="vLLM: predict its `--kv-cache-memory=` log line and vramctl's value (graph pool counted once).",
        ),
        host_memory: str = typer.Option(None, "--host-memory", help="Host RAM (default: this machine's)."),
        json_out: bool = typer.Option(False, "--json", help="One JSON object (docs/json.md)."),
        markdown: bool = typer.Option(False, "--markdown", help="GitHub Markdown."),
    ) -> None:
        given = {k: v for k, v in locals().items() if k != "words"}
        from vramctl.cli.own_flags import merge_own_flags, split_own_flags

        command_words, own = split_own_flags(list(words or []))
        flags = merge_own_flags(given, own)
        json_out, markdown = bool(flags.pop("json_out")), bool(flags.pop("markdown"))
        if json_out and markdown:
            raise BadInputError("--json and --markdown: pick one output format")
        result, _, notes = run_plan(command_words, flags)
        if notes:
            result = _with_notes(result, notes)
        if json_out:
            from vramctl.render.jsonout import dumps

            typer.echo(dumps(result.to_json()))
        elif markdown:
            from vramctl.render.plan import plan_markdown

            typer.echo(plan_markdown(result), nl=False)
        else:
            from vramctl.render.plan import print_plan

            print_plan(result)
        raise typer.Exit(int(ExitCode.OK if result.fits else ExitCode.CHECK_FAILED))


def _with_notes(result: Any, notes: tuple[str, ...]) -> Any:
    from dataclasses import replace

    return replace(result, explanations=(*result.explanations, *(f"serve command: {n}" for n in notes)))
