"""`read-log --compare-plan --command '…'`: an excerpt without the args line is planned with the settings of the
serve command it came from; where the log states a setting, the log wins (it is what the engine ran with)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vramctl.diagnose.reader import iter_log_lines
from vramctl.diagnose.startup import parse_startup_log, settings_from_report

# A V1 excerpt as threads post it: the budget lines, no args line, no model named.
EXCERPT = """\
(EngineCore_0 pid=101) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 20.50 GiB
(EngineCore_0 pid=101) INFO 09-01 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 167,936 tokens
"""
ARGS_LINE = (
    "(APIServer pid=100) INFO 09-01 09:59:00 [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-8B', "
    "'max_model_len': 16384}\n"
)


def _read_log(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    log = tmp_path / "startup.log"
    log.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "vramctl", "read-log", str(log), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_fills_what_the_log_does_not_state(tmp_path: Path) -> None:
    base = ["--compare-plan", "--gpu", "h100-sxm", "--engine-version", "0.11.0", "--json"]
    without = _read_log(tmp_path, EXCERPT, *base, "--model", "Qwen/Qwen3-8B")
    assert without.returncode == 0, without.stderr
    command = "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --max-model-len 8192"
    with_command = _read_log(tmp_path, EXCERPT, *base, "--command", command)
    assert with_command.returncode == 0, with_command.stderr
    out = json.loads(with_command.stdout)
    notes = " ".join(out["comparison"]["notes"])
    assert "taken from --command" in notes and "tensor_parallel_size" in notes
    planned = {r["name"]: r["planned"] for r in out["comparison"]["rows"]}
    planned_alone = {r["name"]: r["planned"] for r in json.loads(without.stdout)["comparison"]["rows"]}
    # half the weights per rank at TP 2: the KV pool the plan leaves grows
    assert planned["weights"] < 0.6 * planned_alone["weights"]
    assert planned["kv_cache"] > planned_alone["kv_cache"]


def test_the_log_wins_over_the_command(tmp_path: Path) -> None:
    log = tmp_path / "startup.log"
    log.write_text(ARGS_LINE + EXCERPT)
    report = parse_startup_log(iter_log_lines(log))
    settings = settings_from_report(
        report, engine_version="0.11.0", fallback=(("max_model_len", 4096), ("tensor_parallel_size", 4))
    )
    assert settings.max_model_len == 16384  # the args line states it
    assert settings.tensor_parallel_size == 4  # the log does not


def test_command_errors_are_one_line(tmp_path: Path) -> None:
    wrong_engine = _read_log(
        tmp_path, EXCERPT, "--compare-plan", "--gpu", "h100-sxm", "--command", "python -m sglang.launch_server "
        "--model-path Qwen/Qwen3-8B"
    )
    assert wrong_engine.returncode == 2
    assert "--command: a sglang command for a vllm log" in wrong_engine.stderr
    assert "Traceback" not in wrong_engine.stderr
    alone = _read_log(tmp_path, EXCERPT, "--command", "vllm serve Qwen/Qwen3-8B")
    assert alone.returncode == 2 and "--command: only used with --compare-plan" in alone.stderr



def test_engine_config_line_speculative_repr(tmp_path: Path) -> None:
    """V1's engine-config line prints `speculative_config=SpeculativeConfig(method=…, model=…, num_spec_tokens=N)`;
    read as the same settings the non-default args line's dict gives (it ranks above that line)."""
    args = (
        "(APIServer pid=1) INFO 12-03 08:40:19 [api_utils.py:286] non-default args: {'model': 'Qwen/Qwen3-8B', "
        "'speculative_config': {'method': 'qwen3_next_mtp', 'num_speculative_tokens': 2}}\n"
    )
    engine = (
        "(EngineCore pid=2) INFO 12-03 08:40:29 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='Qwen/Qwen3-8B', speculative_config=SpeculativeConfig(method='mtp', model='Qwen/Qwen3-8B', "
        "num_spec_tokens=2), tokenizer='Qwen/Qwen3-8B', max_seq_len=1024\n"
    )
    log = tmp_path / "startup.log"
    log.write_text(args + engine + EXCERPT)
    settings = parse_startup_log(iter_log_lines(log)).settings
    assert settings["speculative_config"].value == "{'num_speculative_tokens': 2, 'method': 'mtp'}"
    log.write_text(engine.replace("SpeculativeConfig(method='mtp', model='Qwen/Qwen3-8B', num_spec_tokens=2)", "None"))
    assert "speculative_config" not in parse_startup_log(iter_log_lines(log)).settings


def test_engine_config_line_keeps_a_draft_models_name(tmp_path: Path) -> None:
    """A draft method's repr names the draft (`model='…'`), which the plan beside the log loads and counts."""
    engine = (
        "(EngineCore pid=2) INFO 12-03 08:40:29 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=SpeculativeConfig(method='draft_model', "
        "model='meta-llama/Llama-3.2-1B-Instruct', num_spec_tokens=3), max_seq_len=1024\n"
    )
    log = tmp_path / "startup.log"
    log.write_text(engine + EXCERPT)
    settings = parse_startup_log(iter_log_lines(log)).settings
    assert settings["speculative_config"].value == (
        "{'num_speculative_tokens': 3, 'method': 'draft_model', 'model': 'meta-llama/Llama-3.2-1B-Instruct'}"
    )
