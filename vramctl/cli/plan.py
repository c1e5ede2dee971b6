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
from typing import Any, Optional

import typer

from vramctl.cli.engine_flags import MEMORY_HELP, flag_help, read_engine_options, read_memory
from vramctl.core.engines import flags as registry
from vramctl.core.errors import BadInputError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.host_tier import machine_memory_bytes
from vramctl.core.settings import ServeSettings

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
_ENGINE_OPTIONS = tuple(entry.key.replace("-", "_") for entry in registry.REGISTRY if entry.cli and entry.is_setting)
"""`plan`'s options that are engine flags: every registry entry `plan` takes (vramctl.core.engines.flags), read
by its entry."""
_COMMON_CONTEXT = ("max_model_len",)
"""`plan --max-model-len` is the context length of either engine (SGLang's --context-length)."""
_VLLM_ONLY = (
    *(
        name
        for name in _ENGINE_OPTIONS
        if registry.by_name(name).engines == ("vllm",) and name not in _COMMON_CONTEXT
    ),
    "entrypoint",
)
_SGLANG_ONLY = tuple(name for name in _ENGINE_OPTIONS if registry.by_name(name).engines == ("sglang",))


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _is_launcher(word: str) -> bool:
    """`vllm`, `python3`, `/usr/bin/python3.11`, `sglang`, `env` or a `VAR=value` prefix: a serve command starts."""
    head = word.rsplit("/", 1)[-1]
    return head in _LAUNCHERS or head.startswith("python") or ("=" in word and not word.startswith("-"))


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
    from vramctl.core.engines.sglang.speculative import draft_numbers as sglang_draft_numbers
    from vramctl.core.engines.sglang.speculative import needs_draft as needs_sglang_draft
    from vramctl.core.engines.vllm_speculative import needs_draft_model
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
    sources: dict[str, str] = {}
    numeric = read_engine_options(options, _ENGINE_OPTIONS, sources)
    for field, flag in (("free_memory_bytes", "free_memory"), ("gpu_memory_bytes", "gpu_memory"), ("host_memory_bytes", "host_memory")):
        size = read_memory(options.get(flag), "--" + flag.replace("_", "-"))
        if size is not None:
            numeric[field] = size
    changes.update(numeric)
    if command is not None:
        given = dict(command.changes)
        for key, value in numeric.items():
            if key in given and given[key] != value:
                option = sources.get(key, _OPTION_OF.get(key, key))
                flag = "--" + option.replace("_", "-")
                notes = (*notes, f"{flag} {options[option]} overrides {given[key]} from the command")
    if options.get("entrypoint") is not None:
        if options["entrypoint"] not in ("server", "llm"):
            raise BadInputError(f"--entrypoint {options['entrypoint']!r}: use server or llm")
        changes["entrypoint"] = options["entrypoint"]
    if options.get("weight_cache_mode") is not None:  # vramctl's spelling of the ipc_cache loader's `mode`
        changes["weight_cache_mode"] = options["weight_cache_mode"]
    if options.get("kv_cache_memory_suggestion"):
        changes["kv_cache_memory_suggestion"] = True
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
    sampler_env = os.environ.get("VLLM_USE_FLASHINFER_SAMPLER")
    if sampler_env is not None and settings.flashinfer_sampler is None and settings.engine != "sglang":
        # the environment the plan runs in, as vLLM's envs.py reads it; a serve command's own prefix wins
        settings = settings.with_changes(flashinfer_sampler=sampler_env.strip() not in ("0", ""))
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
    if settings.engine != "sglang" and needs_draft_model(settings.speculative_method, settings.speculative_model):
        assert settings.speculative_model is not None
        draft = registry.load_draft_model(settings.speculative_model, offline=offline)
        settings = settings.with_changes(speculative_draft=draft)
    if sglang_options is not None and needs_sglang_draft(
        sglang_options.speculative_algorithm, sglang_options.speculative_draft_model_path
    ):
        draft = registry.load_draft_model(sglang_options.speculative_draft_model_path, offline=offline)
        layers, draft_bytes = sglang_draft_numbers(model, sglang_options.speculative_algorithm, draft)
        sglang_options = sglang_options.with_changes(
            speculative_draft_layers=sglang_options.speculative_draft_layers or layers,
            speculative_draft_weight_bytes=sglang_options.speculative_draft_weight_bytes or draft_bytes,
        )
    gpu_name = options.get("gpu")
    if gpu_name is None and settings.gpu_memory_bytes is not None:
        gpu = registry.gpu_from_capacity(settings.gpu_memory_bytes)
    else:
        gpu = registry.load_gpu(DEFAULT_GPU if gpu_name is None else gpu_name)
    return plan(model, gpu, settings, sglang_options=sglang_options), model_name, notes


def _sglang_options(command: Any) -> tuple[Any, tuple[str, ...]]:
    """SGLang's flags that ServeSettings does not hold (`--enable-dp-attention`, `--dp-size`,
    `--moe-a2a-backend`, `--speculative-*`, `--disaggregation-mode`, `--attention-backend`, …) and the env
    `SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1`, folded into SglangOptions the way `vramctl check` folds them (the
    flag registry's `options.` entries, vramctl.core.engines.flags)."""
    from vramctl.core.check import apply_flags
    from vramctl.core.engines import flags as registry
    from vramctl.core.engines.sglang import SglangOptions

    def sglang_option(name: str) -> bool:
        match = registry.lookup(name, ("sglang",))
        return match is not None and match.entry.target.startswith("options.")

    modelled = {name: value for name, value in command.flags if sglang_option(name)}
    flags: dict[str, Any] = {name: True if value is None else value for name, value in modelled.items()}
    _, options, _, _ = apply_flags(
        ("sglang",), flags, ServeSettings(), SglangOptions(), source="serve command"
    )
    env = dict(command.env)
    if "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING" in env:
        value = env["SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"].strip().lower()
        options = options.with_changes(post_capture_kv_sizing=value in ("1", "true", "yes", "on"))
    notes = command.notes
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
        revision: str = typer.Option(None, "--revision", help=flag_help("--revision")),
        offline: bool = typer.Option(
            False, "--offline", help="Never contact the Hub: the HF cache only (as HF_HUB_OFFLINE=1)."
        ),
        hf_overrides: str = typer.Option(None, "--hf-overrides", help=flag_help("--hf-overrides")),
        rope_scaling: str = typer.Option(None, "--rope-scaling", help=flag_help("--rope-scaling")),
        gpu: str = typer.Option(None, "--gpu", help=f"GPU name (default {DEFAULT_GPU}); see `vramctl gpus`."),
        gpu_memory: str = typer.Option(
            None, "--gpu-memory", help=f"A card's CUDA total, e.g. 79.18GiB ({MEMORY_HELP})."
        ),
        engine: str = typer.Option(None, "--engine", help="vllm (default), sglang or both."),
        engine_version: str = typer.Option(
            None, "--engine-version", help="e.g. 0.11.0 (default: latest known)."
        ),
        gpu_memory_utilization: str = typer.Option(
            None, "--gpu-memory-utilization", "--device-memory-utilization", help=flag_help("--gpu-memory-utilization")
        ),
        max_model_len: str = typer.Option(None, "--max-model-len", help=flag_help("--max-model-len")),
        max_num_batched_tokens: str = typer.Option(
            None, "--max-num-batched-tokens", help=flag_help("--max-num-batched-tokens")
        ),
        max_num_seqs: str = typer.Option(None, "--max-num-seqs", help=flag_help("--max-num-seqs")),
        max_num_active_seqs: str = typer.Option(
            None, "--max-num-active-seqs", help=flag_help("--max-num-active-seqs")
        ),
        kv_cache_dtype: str = typer.Option(None, "--kv-cache-dtype", help=flag_help("--kv-cache-dtype")),
        block_size: str = typer.Option(None, "--block-size", help=flag_help("--block-size")),
        tensor_parallel_size: str = typer.Option(
            None, "--tensor-parallel-size", "-tp", help=flag_help("--tensor-parallel-size")
        ),
        pipeline_parallel_size: str = typer.Option(
            None, "--pipeline-parallel-size", "-pp", help=flag_help("--pipeline-parallel-size")
        ),
        data_parallel_size: str = typer.Option(
            None, "--data-parallel-size", "-dp", help=flag_help("--data-parallel-size")
        ),
        enable_expert_parallel: Optional[bool] = typer.Option(
            None,
            "--enable-expert-parallel/--no-enable-expert-parallel",
            "-ep",
            help=flag_help("--enable-expert-parallel"),
            show_default=False,
        ),
        enable_lora: Optional[bool] = typer.Option(
            None, "--enable-lora/--no-enable-lora", help=flag_help("--enable-lora"), show_default=False
        ),
        max_loras: str = typer.Option(None, "--max-loras", help=flag_help("--max-loras")),
        max_lora_rank: str = typer.Option(None, "--max-lora-rank", help=flag_help("--max-lora-rank")),
        fully_sharded_loras: bool = typer.Option(
            False, "--fully-sharded-loras", help=flag_help("--fully-sharded-loras")
        ),
        enable_prefix_caching: Optional[bool] = typer.Option(
            None,
            "--enable-prefix-caching/--no-enable-prefix-caching",
            help=flag_help("--enable-prefix-caching"),
            show_default=False,
        ),
        disable_custom_all_reduce: bool = typer.Option(
            False, "--disable-custom-all-reduce", help=flag_help("--disable-custom-all-reduce")
        ),
        enforce_eager: Optional[bool] = typer.Option(
            None, "--enforce-eager/--no-enforce-eager", help=flag_help("--enforce-eager"), show_default=False
        ),
        enable_chunked_prefill: Optional[bool] = typer.Option(
            None,
            "--enable-chunked-prefill/--no-enable-chunked-prefill",
            help=flag_help("--enable-chunked-prefill"),
            show_default=False,
        ),
        async_scheduling: Optional[bool] = typer.Option(
            None,
            "--async-scheduling/--no-async-scheduling",
            help=flag_help("--async-scheduling"),
            show_default=False,
        ),
        mamba_cache_dtype: str = typer.Option(None, "--mamba-cache-dtype", help=flag_help("--mamba-cache-dtype")),
        mamba_ssm_cache_dtype: str = typer.Option(
            None, "--mamba-ssm-cache-dtype", help=flag_help("--mamba-ssm-cache-dtype")
        ),
        mamba_cache_mode: str = typer.Option(None, "--mamba-cache-mode", help=flag_help("--mamba-cache-mode")),
        mamba_block_size: str = typer.Option(None, "--mamba-block-size", help=flag_help("--mamba-block-size")),
        max_cudagraph_capture_size: str = typer.Option(
            None, "--max-cudagraph-capture-size", help=flag_help("--max-cudagraph-capture-size")
        ),
        cudagraph_capture_sizes: str = typer.Option(
            None,
            "--cudagraph-capture-sizes",
            "--cuda-graph-sizes",
            help=flag_help("--cudagraph-capture-sizes", "Quote a list: '1 2 4 8'."),
        ),
        compilation_config: str = typer.Option(
            None, "--compilation-config", "-cc", help=flag_help("--compilation-config", "Quote the JSON.")
        ),
        optimization_level: str = typer.Option(
            None, "--optimization-level", "-O", help=flag_help("--optimization-level")
        ),
        speculative_config: str = typer.Option(
            None, "--speculative-config", "-sc", help=flag_help("--speculative-config", "Quote the JSON.")
        ),
        kv_cache_memory_bytes: str = typer.Option(
            None, "--kv-cache-memory-bytes", "--kv-cache-memory", help=flag_help("--kv-cache-memory-bytes")
        ),
        free_memory: str = typer.Option(
            None, "--free-memory", help=f"Free memory before start, e.g. 60GiB ({MEMORY_HELP})."
        ),
        dtype: str = typer.Option(None, "--dtype", help=flag_help("--dtype")),
        quantization: str = typer.Option(None, "--quantization", "-q", help=flag_help("--quantization")),
        entrypoint: str = typer.Option(
            None,
            "--entrypoint",
            help="vLLM defaults of `server` (vllm serve, default) or `llm` (the LLM class).",
        ),
        mem_fraction_static: str = typer.Option(
            None, "--mem-fraction-static", help=flag_help("--mem-fraction-static")
        ),
        chunked_prefill_size: str = typer.Option(
            None, "--chunked-prefill-size", help=flag_help("--chunked-prefill-size")
        ),
        max_running_requests: str = typer.Option(
            None, "--max-running-requests", help=flag_help("--max-running-requests")
        ),
        max_total_tokens: str = typer.Option(None, "--max-total-tokens", help=flag_help("--max-total-tokens")),
        context_length: str = typer.Option(
            None, "--context-length", help=flag_help("--context-length", "As --max-model-len.")
        ),
        max_prefill_tokens: str = typer.Option(
            None, "--max-prefill-tokens", help=flag_help("--max-prefill-tokens")
        ),
        page_size: str = typer.Option(None, "--page-size", help=flag_help("--page-size")),
        cuda_graph_max_bs: str = typer.Option(None, "--cuda-graph-max-bs", help=flag_help("--cuda-graph-max-bs")),
        disable_cuda_graph: bool = typer.Option(
            False, "--disable-cuda-graph", help=flag_help("--disable-cuda-graph")
        ),
        enable_hierarchical_cache: bool = typer.Option(
            False, "--enable-hierarchical-cache", "--enable-hicache", help=flag_help("--enable-hierarchical-cache")
        ),
        hicache_ratio: str = typer.Option(None, "--hicache-ratio", help=flag_help("--hicache-ratio")),
        hicache_size: str = typer.Option(None, "--hicache-size", help=flag_help("--hicache-size")),
        kv_offloading_size: str = typer.Option(
            None, "--kv-offloading-size", help=flag_help("--kv-offloading-size")
        ),
        host_memory: str = typer.Option(
            None, "--host-memory", help=f"Host RAM (default: this machine's; {MEMORY_HELP})."
        ),
        # vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features)
        kv_offloading_backend: str = typer.Option(
            None, "--kv-offloading-backend", help=flag_help("--kv-offloading-backend")
        ),
        load_format: str = typer.Option(None, "--load-format", help=flag_help("--load-format")),
        weight_cache_mode: str = typer.Option(
            None, "--weight-cache-mode", help="ipc_cache: zero_copy (default) or copy (the loader's `mode`)."
        ),
        enable_sleep_mode: Optional[bool] = typer.Option(
            None, "--enable-sleep-mode/--no-enable-sleep-mode", help=flag_help("--enable-sleep-mode"), show_default=False
        ),
        enable_nccl_comm_suspend: Optional[bool] = typer.Option(
            None, "--enable-nccl-comm-suspend/--no-enable-nccl-comm-suspend", help=flag_help("--enable-nccl-comm-suspend"), show_default=False
        ),
        sleep_mode_offload_cudagraph: Optional[bool] = typer.Option(
            None, "--sleep-mode-offload-cudagraph/--no-sleep-mode-offload-cudagraph", help=flag_help("--sleep-mode-offload-cudagraph"), show_default=False
        ),
        enable_extensible_kv_cache: Optional[bool] = typer.Option(
            None,
            "--enable-extensible-kv-cache/--no-enable-extensible-kv-cache",
            help=flag_help("--enable-extensible-kv-cache"),
            show_default=False,
        ),
        kv_cache_memory_suggestion: bool = typer.Option(
            False,
            "--kv-cache-memory-suggestion",
            help="vLLM: predict its `--kv-cache-memory=` log line and vramctl's value (graph pool counted once).",
        ),
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
