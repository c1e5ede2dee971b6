"""Check 2's two readers of one serve command: vramctl's (`vramctl.core.serve_command`) and vLLM's own
(`engine_args_driver.py`, run in the engine's environment).

`FIELDS` pairs each ServeSettings field vramctl plans with with the EngineArgs field it mirrors. For a field the
command does not set, vramctl's resolved default is compared with EngineArgs' default; fields whose default the
platform or the model decides (EngineArgs leaves them None: max_model_len, max_num_seqs, max_num_batched_tokens,
block_size, enable_chunked_prefill, the capture sizes) are compared only when the command sets them.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any

from engine_harness import HERE, engine_python

CORPUS = HERE / "serve_commands.txt"
SERVE_CONFIGS = HERE / "serve_configs"

# vramctl ServeSettings field -> EngineArgs field (or `env.VAR`: vllm.envs as the engine reads it)
FIELDS: dict[str, str] = {
    "model": "model",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "block_size": "block_size",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "max_loras": "max_loras",
    "max_lora_rank": "max_lora_rank",
    "enable_lora": "enable_lora",
    "fully_sharded_loras": "fully_sharded_loras",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "dtype": "dtype",
    "enforce_eager": "enforce_eager",
    "enable_expert_parallel": "enable_expert_parallel",
    "mamba_cache_dtype": "mamba_cache_dtype",
    "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype",
    "kv_offloading_size_gib": "kv_offloading_size",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "async_scheduling": "async_scheduling",
    "max_cudagraph_capture_size": "max_cudagraph_capture_size",
    "cudagraph_capture_sizes": "cudagraph_capture_sizes",
    "estimate_cudagraphs": "env.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS",
    # vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features)
    "load_format": "load_format",
    "kv_offloading_backend": "kv_offloading_backend",
    "enable_sleep_mode": "enable_sleep_mode",
    "enable_nccl_comm_suspend": "enable_nccl_comm_suspend",
    "sleep_mode_offload_cudagraph": "sleep_mode_offload_cudagraph",
    # which CUDA graphs are captured (vramctl.core.engines.flags.CompilationConfig, VllmRules.cudagraph_mode)
    "optimization_level": "optimization_level",
    "cudagraph_mode": "compilation_config.cudagraph_mode",
}


@dataclass(frozen=True)
class Command:
    line_no: int
    text: str
    """The line with {here} filled in."""
    env: dict[str, str]
    launcher: str
    """`serve` (vllm serve …) or `api_server` (python -m vllm.entrypoints.openai.api_server …)."""
    argv: list[str]
    """The words after the launcher."""

    @property
    def id(self) -> str:
        return f"L{self.line_no}"


def load_corpus() -> list[Command]:
    commands: list[Command] = []
    for line_no, raw in enumerate(CORPUS.read_text().splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        text = raw.replace("{here}", str(SERVE_CONFIGS))
        words = shlex.split(text)
        env: dict[str, str] = {}
        if words[0] == "env":
            words.pop(0)
        while "=" in words[0] and not words[0].startswith("-"):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        if words[0] == "vllm" and words[1] == "serve":
            launcher, argv = "serve", words[2:]
        elif words[1] == "-m" and words[2] == "vllm.entrypoints.openai.api_server":
            launcher, argv = "api_server", words[3:]
        else:  # pragma: no cover - the corpus is data; a bad line is a bug in it
            raise ValueError(f"{CORPUS.name}:{line_no}: not a vLLM serve command: {raw}")
        commands.append(Command(line_no, text, env, launcher, argv))
    return commands


def engine_parse(commands: list[Command], timeout_s: float = 600) -> dict[str, dict[str, Any]]:
    """Every command through vLLM's own parser (one engine-venv process for the whole corpus)."""
    items = [{"id": c.id, "argv": c.argv, "launcher": c.launcher, "env": c.env} for c in commands]
    # The suite sets HF_HUB_OFFLINE=1 for vramctl (tests/conftest.py); vLLM's parser, given the local model folders
    # of serve_configs/, runs as a user's would: without it (this machine has no route to the Hub either way).
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    proc = subprocess.run(
        [str(engine_python()), str(HERE / "engine_args_driver.py")],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=str(SERVE_CONFIGS),
        env=env,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"engine_args_driver.py exited {proc.returncode}: {tail}")
    out: dict[str, dict[str, Any]] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            out[record["id"]] = record
    return out


def vramctl_parse(command: Command, engine_version: str) -> dict[str, Any]:
    """The settings vramctl reads from the command, each unset field at the default vramctl resolves."""
    from vramctl.core.engines import vllm as V
    from vramctl.core.lora import DEFAULT_MAX_LORA_RANK, DEFAULT_MAX_LORAS
    from vramctl.core.serve_command import parse_serve_command
    from vramctl.core.settings import ServeSettings

    parsed = parse_serve_command(command.text)
    settings = parsed.apply(ServeSettings())
    values: dict[str, Any] = {name: getattr(settings, name, None) for name in FIELDS if name != "model"}
    values["model"] = parsed.model
    set_fields = {name for name, _ in parsed.changes}
    if "gpu_memory_utilization" not in set_fields:
        values["gpu_memory_utilization"] = V.default_gpu_memory_utilization(engine_version)
    if "estimate_cudagraphs" not in set_fields:
        values["estimate_cudagraphs"] = V.estimate_cudagraphs_default(engine_version)
    if values["max_loras"] is None:
        values["max_loras"] = DEFAULT_MAX_LORAS
    if values["max_lora_rank"] is None:
        values["max_lora_rank"] = DEFAULT_MAX_LORA_RANK
    if values["load_format"] is None:
        values["load_format"] = "auto"  # EngineArgs' default; vramctl reads only ipc_cache
    if values["kv_offloading_backend"] is None:
        values["kv_offloading_backend"] = "native"
    if values["optimization_level"] is None:
        values["optimization_level"] = 2  # EngineArgs' default, `-O2` ([0.12.0] vllm/config/vllm.py)
    if values["cudagraph_capture_sizes"] is not None:
        values["cudagraph_capture_sizes"] = list(values["cudagraph_capture_sizes"])
    return values


def _same(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, float) or isinstance(theirs, float):
        return ours is not None and theirs is not None and abs(float(ours) - float(theirs)) < 1e-9
    if isinstance(ours, list) and isinstance(theirs, list):
        return sorted(ours) == sorted(theirs)
    return bool(ours == theirs)


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> list[tuple[str, Any, Any, bool]]:
    """(field, vramctl's value, the engine's, agree) for every field both decide."""
    rows: list[tuple[str, Any, Any, bool]] = []
    for field, engine_field in FIELDS.items():
        mine = ours.get(field)
        engine = theirs.get(engine_field)
        if engine is None and field == "enable_lora":
            engine = False  # EngineArgs.enable_lora None: vLLM builds no LoRA config (`if self.enable_lora`)
        if engine is None and mine is None:
            continue
        if engine is None and field in (
            "max_model_len",
            "max_num_seqs",
            "max_num_batched_tokens",
            "block_size",
            "enable_chunked_prefill",
            "async_scheduling",
        ):
            continue  # the model / platform / usage context decides it later
        rows.append((field, mine, engine, _same(mine, engine)))
    return rows
