"""explain-oom scan speed and peak memory against `grep -E` with ten failure phrases and with the catalogue's phrases.

Generates a realistic vLLM server log (start-up lines, then hours of request and metrics lines, one
CUDA OOM traceback near the end), then times on the same file:
  - `grep -E -c` with the ten failure phrases of issue 9 (`out of memory|OutOfMemory|Free memory on device|No
    available memory|KV cache|Killed|SIGBUS|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure`): what a user's own
    one-line check costs (the headline baseline),
  - `grep -E -c -f PATTERNS` with every key phrase of the catalogue (the catalogue baseline),
  - `grep -F -c -f PATTERNS` (the same phrases as fixed strings),
  - `diagnose(path)` in this process (the library call),
  - `vramctl explain-oom --json FILE` in a fresh process (the CLI, start-up included), in this environment and with
    the package's bytecode compiled as a wheel install has it (a scratch PYTHONPYCACHEPREFIX; differs only where
    PYTHONDONTWRITEBYTECODE is set or the checkout is read-only),
and reports the ratios and each child's peak RSS at two sizes (peak memory must not grow with the file).

and, for the headline, `--rounds` interleaved rounds of the ten-phrase grep and the CLI with bytecode (best and median
of CPU time and of wall time, with the load average before and after).

Usage: python benchmarks/bench_explain_oom.py [--size 1GiB] [--small 256MiB] [--repeat 3] [--rounds 9] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vramctl.core.units import parse_bytes
from vramctl.diagnose import diagnose, load_catalogue

STARTUP = """\
INFO 11-30 09:00:01 [__init__.py:244] Automatically detected platform cuda.
INFO 11-30 09:00:04 [api_server.py:1395] vLLM API server version 0.9.1
INFO 11-30 09:00:04 [cli_args.py:325] non-default args: {'model': 'meta-llama/Meta-Llama-3-8B-Instruct', 'max_model_len': 8192, 'gpu_memory_utilization': 0.9}
INFO 11-30 09:00:12 [config.py:823] This model supports multiple tasks: {'generate', 'embed'}. Defaulting to 'generate'.
INFO 11-30 09:00:13 [core.py:455] Waiting for init message from front-end.
INFO 11-30 09:00:13 [core.py:70] Initializing a V1 LLM engine (v0.9.1) with config: model='meta-llama/Meta-Llama-3-8B-Instruct', dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size=1
INFO 11-30 09:00:15 [gpu_model_runner.py:1595] Starting to load model meta-llama/Meta-Llama-3-8B-Instruct...
INFO 11-30 09:00:16 [weight_utils.py:292] Using model weights format ['*.safetensors']
INFO 11-30 09:00:21 [default_loader.py:272] Loading weights took 4.72 seconds
INFO 11-30 09:00:21 [gpu_model_runner.py:1624] Model loading took 14.9596 GiB and 5.341 seconds
INFO 11-30 09:00:29 [backends.py:508] Using cache directory: /root/.cache/vllm/torch_compile_cache
INFO 11-30 09:00:40 [gpu_worker.py:227] Available KV cache memory: 54.35 GiB
INFO 11-30 09:00:40 [kv_cache_utils.py:715] GPU KV cache size: 445,232 tokens
INFO 11-30 09:00:40 [kv_cache_utils.py:719] Maximum concurrency for 8,192 tokens per request: 54.35x
INFO 11-30 09:01:02 [gpu_model_runner.py:2048] Graph capturing finished in 22 secs, took 0.52 GiB
INFO 11-30 09:01:02 [core.py:171] init engine (profile, create kv cache, warmup model) took 41.02 seconds
INFO 11-30 09:01:03 [api_server.py:1457] Starting vLLM API server 0 on http://0.0.0.0:8000
INFO:     Started server process [1]
INFO:     Application startup complete.
"""

OOM = """\
ERROR 11-30 17:42:10 [core.py:517] EngineCore encountered a fatal error.
ERROR 11-30 17:42:10 [core.py:517] Traceback (most recent call last):
ERROR 11-30 17:42:10 [core.py:517]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 508, in run_engine_core
ERROR 11-30 17:42:10 [core.py:517]     engine_core.run_busy_loop()
ERROR 11-30 17:42:10 [core.py:517]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 535, in run_busy_loop
ERROR 11-30 17:42:10 [core.py:517]     self._process_engine_step()
ERROR 11-30 17:42:10 [core.py:517]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 1319, in execute_model
ERROR 11-30 17:42:10 [core.py:517]     hidden_states = self.model(
ERROR 11-30 17:42:10 [core.py:517] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.16 GiB. GPU 0 has a total capacity of 79.19 GiB of which 3.55 GiB is free. Including non-PyTorch memory, this process has 75.62 GiB memory in use. Of the allocated memory 72.31 GiB is allocated by PyTorch, with 412.00 MiB allocated in private pools (e.g., CUDA Graphs), and 1.21 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
ERROR 11-30 17:42:11 [async_llm.py:420] AsyncLLM output_handler failed.
"""


def _serving_lines(rng: random.Random, count: int, clock: list[int]) -> str:
    out: list[str] = []
    for _ in range(count):
        clock[0] += 1
        t = clock[0]
        stamp = f"11-30 {9 + (t // 3600) % 9:02d}:{(t // 60) % 60:02d}:{t % 60:02d}"
        r = rng.random()
        if r < 0.45:
            out.append(
                f"INFO:     10.0.{rng.randrange(256)}.{rng.randrange(256)}:{rng.randrange(30000, 60000)} - "
                f'"POST /v1/chat/completions HTTP/1.1" 200 OK'
            )
        elif r < 0.75:
            out.append(
                f"INFO {stamp} [logger.py:43] Received request chatcmpl-{rng.getrandbits(64):016x}: prompt: "
                f"'<|begin_of_text|><|start_header_id|>user<|end_header_id|>\\n\\nSummarise the attached "
                f"report in {rng.randrange(3, 12)} bullet points.<|eot_id|>', params: SamplingParams(n=1, "
                f"temperature={rng.random():.2f}, top_p=1.0, max_tokens={rng.randrange(64, 2048)}), "
                f"prompt_token_ids: None, lora_request: None."
            )
        elif r < 0.9:
            out.append(f"INFO {stamp} [async_llm.py:261] Added request chatcmpl-{rng.getrandbits(64):016x}.")
        else:
            out.append(
                f"INFO {stamp} [loggers.py:118] Engine 000: Avg prompt throughput: {rng.random() * 9000:.1f} "
                f"tokens/s, Avg generation throughput: {rng.random() * 3000:.1f} tokens/s, Running: "
                f"{rng.randrange(1, 96)} reqs, Waiting: 0 reqs, GPU KV cache usage: {rng.random() * 80:.1f}%, "
                f"Prefix cache hit rate: {rng.random() * 60:.1f}%"
            )
    return "\n".join(out) + "\n"


def generate(path: Path, size: int, seed: int = 0) -> int:
    """Write a server log of about `size` bytes with one OOM in its last 0.1%; returns the OOM's line."""
    rng = random.Random(seed)
    clock = [0]
    block = _serving_lines(rng, 20000, clock).encode()  # ~4 MB, reused with fresh lines now and then
    with path.open("wb") as fh:
        fh.write(STARTUP.encode())
        written = len(STARTUP)
        lines = STARTUP.count("\n")
        oom_at = int(size * 0.999)
        while written + len(block) < oom_at:
            fh.write(block)
            written += len(block)
            lines += block.count(b"\n")
            if rng.random() < 0.1:
                block = _serving_lines(rng, 20000, clock).encode()
        tail = _serving_lines(rng, max(1, (oom_at - written) // 160), clock).encode()
        fh.write(tail)
        lines += tail.count(b"\n")
        oom_line = lines + 9  # the torch.OutOfMemoryError line of OOM
        fh.write(OOM.encode())
        fh.write(_serving_lines(rng, 200, clock).encode())
    return oom_line


def _child_run(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    """Wall seconds, CPU seconds (user + system), peak RSS bytes and stdout of a command run in a fresh wrapper (its
    own RUSAGE_CHILDREN). stdout is a pipe: GNU grep stops at the first match when it writes to /dev/null."""
    wrapper = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)\n"
        "dt = time.perf_counter() - t\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'s': dt, 'cpu': ru.ru_utime + ru.ru_stime, 'rss': ru.ru_maxrss * 1024, 'rc': p.returncode,"
        " 'out': p.stdout.decode(errors='replace')[-4000:]}))\n"
    )
    res = subprocess.run([sys.executable, "-c", wrapper, *cmd], check=True, stdout=subprocess.PIPE, env=env)
    data: dict[str, object] = json.loads(res.stdout)
    return data


def _child(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    """(seconds, peak RSS bytes, stdout) of a command run in a fresh wrapper (see `_child_run`)."""
    data = _child_run(cmd, env)
    return float(str(data["s"])), int(str(data["rss"])), str(data["out"])


def _best(runs: list[tuple[float, int, str]]) -> tuple[float, int, str]:
    return min(runs, key=lambda r: r[0])


TEN_PHRASES = (
    "out of memory|OutOfMemory|Free memory on device|No available memory|KV cache|Killed|SIGBUS|"
    "CUBLAS_STATUS_ALLOC_FAILED|Cuda failure"
)
"""The baseline of issue 9: a user's `grep -E -c` for the usual failure phrases (nine alternatives; the issue
counts `out of memory` and `OutOfMemory` as the two spellings of the first)."""


def interleaved(path: Path, rounds: int, env: dict[str, str]) -> dict[str, object]:
    """The headline ratio, measured as the machine allows: `rounds` rounds, each running the ten-phrase `grep -E -c`
    and then the CLI (with `env`) back to back, so both see the same load; best and median of CPU time (user + system)
    and of wall time, and their ratios. On a shared machine a command's time moves by 20 % from round to round: only
    the pairs of one run are compared."""
    grep = shutil.which("grep") or "grep"
    cli_cmd = [sys.executable, "-m", "vramctl", "explain-oom", "--json", str(path)]
    grep_runs: list[dict[str, object]] = []
    cli_runs: list[dict[str, object]] = []
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for _ in range(rounds):
        grep_runs.append(_child_run([grep, "-E", "-c", TEN_PHRASES, str(path)]))
        cli_runs.append(_child_run(cli_cmd, env))
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    def stats(runs: list[dict[str, object]], key: str) -> tuple[float, float]:
        values = [float(str(r[key])) for r in runs]
        return min(values), statistics.median(values)

    out: dict[str, object] = {"rounds": rounds, "load_average_before": load_before, "load_average_after": load_after}
    for key, name in (("cpu", "cpu"), ("s", "wall")):
        g_best, g_med = stats(grep_runs, key)
        c_best, c_med = stats(cli_runs, key)
        out[f"grep_ten_{name}_best_s"] = g_best
        out[f"grep_ten_{name}_median_s"] = g_med
        out[f"cli_{name}_best_s"] = c_best
        out[f"cli_{name}_median_s"] = c_med
        out[f"ratio_{name}_best"] = c_best / g_best
        out[f"ratio_{name}_median"] = c_med / g_med
    out["cli_peak_rss_bytes"] = max(int(str(r["rss"])) for r in cli_runs)
    return out


def measure(path: Path, patterns: Path, repeat: int, oom_line: int, rounds: int = 0) -> dict[str, object]:
    size = path.stat().st_size
    grep = shutil.which("grep") or "grep"
    for _ in range(2):  # warm the page cache
        subprocess.run(
            [grep, "-c", "-F", "-f", str(patterns), str(path)], stdout=subprocess.DEVNULL, check=False
        )
    grep_ten = _best([_child([grep, "-E", "-c", TEN_PHRASES, str(path)]) for _ in range(repeat)])
    grep_e = _best([_child([grep, "-c", "-E", "-f", str(patterns), str(path)]) for _ in range(repeat)])
    grep_f = _best([_child([grep, "-c", "-F", "-f", str(patterns), str(path)]) for _ in range(repeat)])
    lib_times = []
    result = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = diagnose(path)
        lib_times.append(time.perf_counter() - t)
    assert result is not None
    cli_cmd = [  # what the `vramctl` script runs (`vramctl.__main__:run`)
        sys.executable,
        "-m",
        "vramctl",
        "explain-oom",
        "--json",
        str(path),
    ]
    cli = _best([_child(cli_cmd) for _ in range(repeat)])
    # the CLI as a wheel install runs it: with the package's bytecode compiled (pip compiles it at install). Where the
    # environment sets PYTHONDONTWRITEBYTECODE (or the checkout is not writable) every run above compiled the
    # package's sources first (~0.1 s); here the bytecode goes to a scratch PYTHONPYCACHEPREFIX, written by an
    # untimed first run
    bytecode_env = dict(os.environ, PYTHONPYCACHEPREFIX=str(path.parent / "pycache"))
    bytecode_env.pop("PYTHONDONTWRITEBYTECODE", None)
    _child(cli_cmd, bytecode_env)
    cli_bytecode = _best([_child(cli_cmd, bytecode_env) for _ in range(repeat)])
    ratios = interleaved(path, rounds, bytecode_env) if rounds > 0 else {}
    cli_json = json.loads(cli[2]) if cli[2].strip().startswith("{") else {}
    root_line = result.evidence[0].line if result.evidence else None
    return {
        "size_bytes": size,
        "oom_line": oom_line,
        "cause": result.cause,
        "phase": result.phase,
        "found_oom_line": any(e.line == oom_line for e in result.evidence),
        "first_evidence_line": root_line,
        "cli_cause": cli_json.get("cause"),
        "grep_ten_s": grep_ten[0],
        "grep_E_s": grep_e[0],
        "grep_F_s": grep_f[0],
        "library_s": min(lib_times),
        "cli_s": cli[0],
        "cli_bytecode_s": cli_bytecode[0],
        "compiled_each_run": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
        "ratio_cli_bytecode_vs_grep_ten": cli_bytecode[0] / grep_ten[0],
        "ratio_cli_vs_grep_ten": cli[0] / grep_ten[0],
        "ratio_library_vs_grep_ten": min(lib_times) / grep_ten[0],
        "ratio_library_vs_grep_E": min(lib_times) / grep_e[0],
        "ratio_cli_vs_grep_E": cli[0] / grep_e[0],
        "grep_E_peak_rss_bytes": grep_e[1],
        "cli_peak_rss_bytes": cli[1],
        "library_MiB_per_s": size / min(lib_times) / 2**20,
        "grep_E_MiB_per_s": size / grep_e[0] / 2**20,
        "interleaved": ratios,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", default="1GiB", help="size of the large log (default 1GiB)")
    parser.add_argument("--small", default=None, help="size of the small log (default size/4)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", default=None, help="directory to write the logs to (kept)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=9,
        help="interleaved rounds of the ten-phrase grep and the CLI with bytecode (best / median, CPU and wall; 0: skip)",
    )
    args = parser.parse_args()
    big = parse_bytes(args.size, what="--size")
    small = parse_bytes(args.small, what="--small") if args.small else big // 4
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-explain-oom-"))
    workdir.mkdir(parents=True, exist_ok=True)
    patterns = workdir / "patterns.txt"
    phrases = load_catalogue().key_phrases()
    patterns.write_text("\n".join(re.escape(p) for p in phrases) + "\n")
    print(
        f"# catalogue key phrases: {len(phrases)}; cpu count {os.cpu_count()}; python {sys.version.split()[0]}"
    )
    results = []
    try:
        for size in (small, big):
            path = workdir / f"server-{size}.log"
            oom_line = generate(path, size)
            results.append(measure(path, patterns, args.repeat, oom_line, args.rounds))
            print(json.dumps(results[-1], indent=2))
            if not args.keep:
                path.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(
        "\n| log | grep -E ten phrases | CLI | CLI / grep ten | CLI with bytecode | its / grep ten "
        "| library / grep ten | CLI peak RSS |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {int(r['size_bytes']) / 2**20:,.0f} MiB | {r['grep_ten_s']:.2f} s | {r['cli_s']:.2f} s "
            f"| {r['ratio_cli_vs_grep_ten']:.2f}x | {r['cli_bytecode_s']:.2f} s "
            f"| {r['ratio_cli_bytecode_vs_grep_ten']:.2f}x | {r['ratio_library_vs_grep_ten']:.2f}x "
            f"| {int(r['cli_peak_rss_bytes']) / 2**20:.0f} MiB |"
        )
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("(PYTHONDONTWRITEBYTECODE is set: the CLI column compiled the package's sources at every run)")
    if args.rounds > 0:
        print(
            f"\nInterleaved, {args.rounds} rounds of the ten-phrase grep then the CLI with bytecode (best / median):\n"
            "| log | load average | grep CPU | CLI CPU | CLI / grep, CPU | grep wall | CLI wall | CLI / grep, wall |"
        )
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in results:
            i = r["interleaved"]
            assert isinstance(i, dict)
            print(
                f"| {int(r['size_bytes']) / 2**20:,.0f} MiB | {i['load_average_before']:.1f}–{i['load_average_after']:.1f} "
                f"| {i['grep_ten_cpu_best_s']:.3f} / {i['grep_ten_cpu_median_s']:.3f} s "
                f"| {i['cli_cpu_best_s']:.3f} / {i['cli_cpu_median_s']:.3f} s "
                f"| **{i['ratio_cpu_best']:.2f}x / {i['ratio_cpu_median']:.2f}x** "
                f"| {i['grep_ten_wall_best_s']:.3f} / {i['grep_ten_wall_median_s']:.3f} s "
                f"| {i['cli_wall_best_s']:.3f} / {i['cli_wall_median_s']:.3f} s "
                f"| {i['ratio_wall_best']:.2f}x / {i['ratio_wall_median']:.2f}x |"
            )
    print(
        "\n| log | grep -E catalogue | grep -F | diagnose() | CLI | library / grep -E | CLI / grep -E | CLI peak RSS | grep peak RSS |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {int(r['size_bytes']) / 2**20:,.0f} MiB | {r['grep_E_s']:.2f} s | {r['grep_F_s']:.2f} s "
            f"| {r['library_s']:.2f} s | {r['cli_s']:.2f} s | {r['ratio_library_vs_grep_E']:.2f}x "
            f"| {r['ratio_cli_vs_grep_E']:.2f}x | {int(r['cli_peak_rss_bytes']) / 2**20:.0f} MiB "
            f"| {int(r['grep_E_peak_rss_bytes']) / 2**20:.0f} MiB |"
        )
    growth = int(results[1]["cli_peak_rss_bytes"]) - int(results[0]["cli_peak_rss_bytes"])
    print(
        f"\nCLI peak RSS growth from {small / 2**20:,.0f} MiB to {big / 2**20:,.0f} MiB of log: {growth / 2**20:+.1f} MiB"
    )
    for r in results:
        if r["cause"] != "activation-spike" or not r["found_oom_line"]:
            print(
                f"WARNING: wrong answer at {r['size_bytes']} bytes: {r['cause']} (evidence {r['first_evidence_line']})"
            )


if __name__ == "__main__":
    main()
