"""Run INSIDE the engine's virtual environment (not vramctl's): parse serve command lines with vLLM's own CLI parser.

Reads a JSON list of command lines on stdin (each: {"id": …, "argv": [words after the launcher], "launcher":
"serve" | "api_server", "env": {VAR: value}}) and prints one JSON object per line: the id and the EngineArgs
fields that decide memory, as vLLM itself resolved them from the command (`FlexibleArgumentParser` +
`make_arg_parser`, the parser `vllm serve` builds, then `AsyncEngineArgs.from_cli_args`), or the error the
parser raised. No engine is started and nothing here copies vLLM's code: it calls it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
from typing import Any

FIELDS = (
    "model",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_batched_tokens",
    "max_num_seqs",
    "kv_cache_dtype",
    "quantization",
    "block_size",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "max_loras",
    "max_lora_rank",
    "enable_lora",
    "fully_sharded_loras",
    "kv_cache_memory_bytes",
    "dtype",
    "enforce_eager",
    "enable_expert_parallel",
    "mamba_cache_dtype",
    "mamba_ssm_cache_dtype",
    "kv_offloading_size",
    "enable_chunked_prefill",
    "async_scheduling",
    "max_cudagraph_capture_size",
    "cudagraph_capture_sizes",
    # vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features)
    "load_format",
    "kv_offloading_backend",
    "enable_sleep_mode",
    "enable_nccl_comm_suspend",
    "sleep_mode_offload_cudagraph",
    # `-O N` and `--compilation-config`'s `cudagraph_mode` (vLLM ≥ 0.12): which CUDA graphs are captured
    "optimization_level",
)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def parse_one(item: dict[str, Any]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    saved = dict(os.environ)
    os.environ.update(item.get("env", {}))
    try:
        if item["launcher"] == "serve":
            top = FlexibleArgumentParser(prog="vllm")
            subs = top.add_subparsers(dest="subparser")
            make_arg_parser(subs.add_parser("serve"))
            words = ["serve", *item["argv"]]
            parser = top
        else:
            parser = make_arg_parser(FlexibleArgumentParser(prog="api_server"))
            words = list(item["argv"])
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = parser.parse_args(words)
        except SystemExit:
            return {"id": item["id"], "error": err.getvalue().strip().splitlines()[-1:] or ["argparse exit"]}
        except Exception as exc:
            return {"id": item["id"], "error": [f"{type(exc).__name__}: {exc}"]}
        if getattr(ns, "model_tag", None) is not None:
            ns.model = ns.model_tag
        args = AsyncEngineArgs.from_cli_args(ns)
        out: dict[str, Any] = {"id": item["id"]}
        for name in FIELDS:
            value = getattr(args, name, None)
            if value is None and name in ("cudagraph_capture_sizes", "max_cudagraph_capture_size"):
                # `--compilation-config '{…}'` / `-cc.…` land in the compilation config, the flags on EngineArgs
                value = getattr(args.compilation_config, name, None)
            out[name] = _plain(value)
        level = getattr(args, "optimization_level", None)  # `OptimizationLevel.O2` by default, the raw '1' for -O1
        out["optimization_level"] = None if level is None else int(getattr(level, "value", level))
        mode = getattr(args.compilation_config, "cudagraph_mode", None)  # None unless the command sets it
        out["compilation_config.cudagraph_mode"] = None if mode is None else str(getattr(mode, "name", mode))
        # environment variables that change memory, as vLLM reads them
        envs = importlib.import_module("vllm.envs")
        out["env.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] = _plain(
            getattr(envs, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", None)
        )
        out["env.VLLM_CPU_KVCACHE_SPACE"] = _plain(getattr(envs, "VLLM_CPU_KVCACHE_SPACE", None))
        return out
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> int:
    items = json.load(sys.stdin)
    for item in items:
        print(json.dumps(parse_one(item)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
