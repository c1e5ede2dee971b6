"""QA findings in plan, check and tiers: each test failed before its fix (the finding is in its docstring)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.core.check import parse_spec, split_serve_command
from vramctl.core.errors import BadInputError
from vramctl.core.serve_command import parse_serve_command

TRACE_LINES = [
    {"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
    {"timestamp": 10, "input_length": 1024, "output_length": 8, "hash_ids": [1, 3]},
    {"timestamp": 20, "input_length": 1536, "output_length": 8, "hash_ids": [1, 2, 4]},
]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and "internal error" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vramctl: error: "), err
    return lines[0]


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in TRACE_LINES))
    return path


# --- plan: the serve command -------------------------------------------------------------------------------------
def test_qa_plan_serve_command_without_model_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan -- vllm serve` (no model) planned the embedded Llama-3-8B and exited 0; vLLM would serve another
    model (its own default), so the plan answered a question nobody asked."""
    line = one_error_line(*run(capsys, "plan", "--", "vllm", "serve", "--max-model-len", "4096"))
    assert "no model" in line and "vllm serve" in line
    line = one_error_line(*run(capsys, "plan", "--", "python", "-m", "sglang.launch_server", "--tp", "2"))
    assert "no model" in line and "--model-path" in line
    # --model supplies it
    code, out, err = run(
        capsys, "plan", "--json", "--model", "qwen3-8b", "--", "python", "-m", "sglang.launch_server"
    )
    assert code in (0, 1), err
    assert json.loads(out)["model"]["name"] == "Qwen/Qwen3-8B"


def test_qa_plan_serve_command_pasted_as_one_argument(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan -- "vllm serve MODEL --max-model-len 4096"` (the command quoted whole, as people paste it) answered
    "unknown model 'vllm serve …'"."""
    code, out, err = run(
        capsys,
        "plan",
        "--json",
        "--",
        "vllm serve meta-llama/Meta-Llama-3-8B-Instruct --max-model-len 4096 -tp 2",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["max_model_len"] == 4096 and data["settings"]["tensor_parallel_size"] == 2
    line = one_error_line(*run(capsys, "plan", "--", 'vllm serve llama-3-8b --served-model-name "x'))
    assert "cannot split" in line


def test_qa_plan_option_overriding_the_command_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --max-model-len 4096 -- vllm serve M --max-model-len 8192` silently planned 4096: the conflict is now
    a note in the output (the option still wins)."""
    code, out, err = run(
        capsys,
        "plan",
        "--markdown",
        "--max-model-len",
        "4096",
        "--",
        "vllm",
        "serve",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "--max-model-len",
        "8192",
    )
    assert code == 0, err
    assert "--max-model-len 4096 overrides 8192 from the command" in out


# --- one serve-command parser ------------------------------------------------------------------------------------
def test_qa_check_command_uses_the_shared_parser() -> None:
    """check's `command:` had its own splitter: it refused `VAR=value vllm serve …` and `env …` prefixes, which
    `plan -- …` accepts. Both now go through vramctl.core.serve_command.parse_serve_command."""
    spec = parse_spec(
        "gpu: h100-sxm\n"
        "command: CUDA_VISIBLE_DEVICES=0,1 VLLM_LOGGING_LEVEL=DEBUG /opt/venv/bin/vllm serve llama-3-8b -tp 2 "
        "--max-model-len=16k\n"
    )
    assert (spec.engine, spec.model) == ("vllm", "llama-3-8b")
    assert (spec.settings.tensor_parallel_size, spec.settings.max_model_len) == (2, 16000)
    spec = parse_spec(
        "gpu: h100-sxm\ncommand: env CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server "
        "--model-path Qwen/Qwen3-8B --enable-dp-attention --dp 2 --mem-fraction-static 0.8\n"
    )
    assert spec.engine == "sglang" and spec.model == "Qwen/Qwen3-8B"
    assert spec.sglang_options.enable_dp_attention and spec.sglang_options.dp_size == 2
    assert spec.settings.mem_fraction_static == 0.8


def test_qa_serve_command_line_continuations_and_comments() -> None:
    """A multi-line command (YAML `|` block with `\\` continuations) and a trailing `# comment` parse the same in
    check and in plan's parser."""
    text = "vllm serve llama-3-8b \\\n  --gpu-memory-utilization 0.9 \\\n  --enforce-eager  # eager for now\n"
    engine, model, flags = split_serve_command(text)
    assert (engine, model) == ("vllm", "llama-3-8b")
    assert flags == {"gpu-memory-utilization": "0.9", "enforce-eager": True}
    parsed = parse_serve_command(text)
    assert dict(parsed.changes) == {"gpu_memory_utilization": 0.9, "enforce_eager": True}
    assert parsed.flags == (("gpu-memory-utilization", "0.9"), ("enforce-eager", None))


def test_qa_check_command_keeps_its_strictness() -> None:
    """Unified, check still refuses what plan only notes: an unknown flag, a stray word, another engine's flag."""
    with pytest.raises(BadInputError, match="unknown flag --bogus"):
        parse_spec("gpu: h100-sxm\ncommand: vllm serve llama-3-8b --bogus 3\n")
    with pytest.raises(BadInputError, match="unexpected argument 'extra'"):
        parse_spec("gpu: h100-sxm\ncommand: vllm serve llama-3-8b --enforce-eager extra\n")
    with pytest.raises(BadInputError, match="--mem-fraction-static is a sglang flag"):
        parse_spec("gpu: h100-sxm\ncommand: vllm serve llama-3-8b --mem-fraction-static 0.8\n")
    with pytest.raises(BadInputError, match=r"command --max-model-len: needs a value"):
        parse_spec("gpu: h100-sxm\ncommand: vllm serve llama-3-8b --max-model-len\n")
    with pytest.raises(BadInputError, match=r"command --gpu-memory-utilization: 'abc' is not a number"):
        parse_spec("gpu: h100-sxm\ncommand: vllm serve llama-3-8b --gpu-memory-utilization abc\n")
    with pytest.raises(BadInputError, match="cannot split it"):
        parse_spec("gpu: h100-sxm\ncommand: 'vllm serve llama-3-8b \"x'\n")


# --- check ---------------------------------------------------------------------------------------------------------
def test_qa_check_duplicate_yaml_key_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A spec with `model:` twice checked the last one silently (PyYAML keeps the last key)."""
    spec = tmp_path / "deploy.yaml"
    spec.write_text("model: llama-3-8b\nmodel: llama-3-70b\ngpu: h100-sxm\n")
    line = one_error_line(*run(capsys, "check", str(spec)))
    assert "line 2" in line and "duplicate key 'model'" in line and "line 1" in line
    spec.write_text(
        "model: llama-3-8b\ngpu: h100-sxm\nflags:\n  max-model-len: 4096\n  max-model-len: 8192\n"
    )
    line = one_error_line(*run(capsys, "check", str(spec)))
    assert "duplicate key 'max-model-len'" in line


def test_qa_check_directory_is_named_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vramctl check some-dir/` said "no such spec file" about a path that exists."""
    line = one_error_line(*run(capsys, "check", str(tmp_path)))
    assert "is a directory" in line


def test_qa_check_concurrency_beyond_max_model_len_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """min_concurrency at 32,768 tokens PASSED (13.13 sequences) with --max-model-len 8192: the server refuses
    every request over 8,192 tokens, so none of those sequences can run."""
    spec = tmp_path / "deploy.yaml"
    spec.write_text(
        "model: qwen3-8b\ngpu: h100-sxm\nflags: {max-model-len: 8192}\n"
        "requirements:\n  min_concurrency: {context: 32768, value: 4}\n"
    )
    code, out, err = run(capsys, "check", str(spec), "--json")
    assert code == 1, err
    (item,) = json.loads(out)["checks"]
    assert item["ok"] is False and item["actual"] == "0.00"
    assert "refuses requests longer than --max-model-len 8192" in item["message"]
    assert "raise --max-model-len to 32768" in item["message"]  # Qwen3-8B allows 40,960
    # Beyond the model's own limit, raising --max-model-len is no answer (Llama-3-8B stops at 8,192).
    spec.write_text(
        "model: llama-3-8b\ngpu: h100-sxm\nengine: sglang\n"
        "requirements:\n  min_concurrency: {context: 32768, value: 4}\n"
    )
    code, out, _ = run(capsys, "check", str(spec), "--json")
    (item,) = json.loads(out)["checks"]
    assert (
        code == 1
        and "--context-length" in item["message"]
        and "model itself stops at 8,192" in item["message"]
    )


def test_qa_check_hopeless_requirement_does_not_promise_tp16(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A requirement 1,900× what the card holds was told "use more GPUs (-tp ≥ 16)": 16 ranks do not reach it
    (Llama-3-8B has 8 KV heads: past -tp 8 the KV per token stops shrinking)."""
    spec = tmp_path / "deploy.yaml"
    spec.write_text(
        "model: llama-3-8b\ngpu: h100-sxm\nrequirements:\n  min_concurrency: {context: 8192, value: 100000}\n"
    )
    code, out, _ = run(capsys, "check", str(spec), "--json")
    (item,) = json.loads(out)["checks"]
    assert code == 1 and "-tp ≥ 16" not in item["message"]
    assert "no tensor-parallel size up to --tensor-parallel-size 64 reaches it" in item["message"]


# --- tiers -----------------------------------------------------------------------------------------------------------
def test_qa_tiers_simulate_checks_gpu_and_bandwidths_always(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tiers simulate --gpu h100-sxx` and `--bandwidths /missing` exited 0 when no --model was given (they were
    read only for the economics)."""
    line = one_error_line(*run(capsys, "tiers", "simulate", "--trace", str(trace), "--gpu", "h100-sxx"))
    assert "unknown GPU 'h100-sxx'" in line and "h100-sxm" in line
    missing = tmp_path / "nope.json"
    line = one_error_line(
        *run(capsys, "tiers", "simulate", "--trace", str(trace), "--bandwidths", str(missing))
    )
    assert "--bandwidths" in line
    line = one_error_line(
        *run(capsys, "tiers", "simulate", "--trace", str(trace), "--sweep", "1024,2048", "--gpu", "h100-sxx")
    )
    assert "unknown GPU" in line


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_qa_tiers_tensor_parallel_must_fit_the_heads(
    command: str, trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tiers plan llama-3-8b -tp 3` printed 32,768 B/token per rank (2 of 8 KV heads): vLLM and SGLang refuse
    -tp 3 for 32 attention heads, and `vramctl plan` said so; tiers now says the same."""
    args = ["tiers", "plan", "llama-3-8b", "-tp", "3"]
    if command == "simulate":
        args = ["tiers", "simulate", "--trace", str(trace), "--model", "llama-3-8b", "-tp", "3"]
    line = one_error_line(*run(capsys, *args))
    assert "--tensor-parallel-size 3" in line and "divisible" in line


def test_qa_tiers_sweep_items_are_named(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--sweep 1,,2` skipped the empty item, then blamed `--gpu-capacity 1` (a flag not given)."""
    line = one_error_line(*run(capsys, "tiers", "simulate", "--trace", str(trace), "--sweep", "1024,,2048"))
    assert "--sweep" in line and "empty" in line
    line = one_error_line(*run(capsys, "tiers", "simulate", "--trace", str(trace), "--sweep", "1024,1"))
    assert line.startswith("vramctl: error: --sweep 1:") and "--gpu-capacity" not in line


@pytest.mark.parametrize("text", ["8192", "32k", "32K", "1.5k", "16_000", "1e4"])
def test_qa_one_token_count_parser(text: str) -> None:
    """plan's options, plan's serve command and check's flags read token counts with one function
    (vramctl.core.serve_command.parse_human_int): the same text is the same number everywhere."""
    from vramctl.cli.engine_flags import read_engine_options
    from vramctl.core.serve_command import parse_human_int

    try:
        expected = parse_human_int(text, "--max-num-batched-tokens")
    except BadInputError:
        pytest.skip(f"{text!r} is not a count")
    option = read_engine_options({"max_num_batched_tokens": text}, ["max_num_batched_tokens"])
    assert option["max_num_batched_tokens"] == expected
    cmd = parse_serve_command(["vllm", "serve", "m", "--max-num-batched-tokens", text])
    assert dict(cmd.changes)["max_num_batched_tokens"] == expected
    spec = parse_spec(f"model: llama-3-8b\ngpu: h100-sxm\nflags:\n  max-num-batched-tokens: '{text}'\n")
    assert spec.settings.max_num_batched_tokens == expected


def test_qa_plan_explicit_kv_larger_than_the_card_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --kv-cache-memory-bytes 200GiB` on an 80 GB H100 said `fits` (exit 0; a warning only): vLLM skips
    profiling and fails allocating a 200 GiB pool. By hand: 200 GiB + 14.96 GiB of weights > 79.18 GiB."""
    code, out, err = run(capsys, "plan", "--json", "--kv-cache-memory-bytes", "200GiB")
    assert code == 1, err
    data = json.loads(out)
    assert data["verdict"] == "kv-pool-overcommit"
    assert "lower --kv-cache-memory-bytes below" in data["verdict_message"]
    # The seed's 54.4 GiB still fits; so does a pool that leaves the estimated terms no room (a warning only).
    code, out, _ = run(capsys, "plan", "--json", "--kv-cache-memory-bytes", "54.4GiB")
    assert code == 0 and json.loads(out)["verdict"] == "fits"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--mem-fraction-static", "0.8"],
            "--mem-fraction-static 0.8: an SGLang flag, but the plan is for vllm",
        ),
        (["--enable-hierarchical-cache"], "--enable-hierarchical-cache: an SGLang flag"),
        (
            ["--engine", "sglang", "--gpu-memory-utilization", "0.8"],
            "--gpu-memory-utilization 0.8: a vLLM flag",
        ),
        (["--engine", "sglang", "--enforce-eager"], "--enforce-eager: a vLLM flag"),
    ],
)
def test_qa_plan_other_engines_flag_is_refused(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan --mem-fraction-static 0.8` (vLLM by default) and `plan --engine sglang --gpu-memory-utilization 0.8`
    printed a plan that silently ignored the flag."""
    line = one_error_line(*run(capsys, "plan", *args))
    assert needle in line


def test_qa_plan_both_engines_take_both_engines_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "plan", "--json", "--engine", "both", "--mem-fraction-static", "0.8",
        "--gpu-memory-utilization", "0.9",
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert data["settings"]["gpu_memory_utilization"] == 0.9 and data["sglang"]["mem_fraction_static"] == 0.8


def test_qa_plan_engine_version_outside_the_known_range_warns(capsys: pytest.CaptureFixture[str]) -> None:
    """`--engine-version 99.0.0` printed "vLLM 99.0.0's default utilisation" with 0.33.0's rules and no word that
    the version is unknown; 0.1.0 (before the V0 0.6 rules modelled) likewise; SGLang 99 / 0.1 the same."""
    code, out, _ = run(capsys, "plan", "--json", "--engine-version", "99.0.0")
    assert code == 0 and any(
        "newer than the latest version vramctl models" in w for w in json.loads(out)["warnings"]
    )
    code, out, _ = run(capsys, "plan", "--json", "--engine-version", "0.1.0")
    assert any("predates the oldest version" in w for w in json.loads(out)["warnings"])
    code, out, _ = run(capsys, "plan", "--json", "--engine-version", "0.33.0")
    assert not any("vramctl models" in w for w in json.loads(out)["warnings"])
    code, out, _ = run(capsys, "plan", "--json", "--engine", "sglang", "--engine-version", "99")
    assert any("newer than the latest version" in n for n in json.loads(out)["sglang"]["notes"])
    code, out, _ = run(capsys, "plan", "--json", "--engine", "sglang", "--engine-version", "0.1")
    assert any("predates the oldest version" in n for n in json.loads(out)["sglang"]["notes"])


def test_qa_plan_json_and_markdown_together_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --json --markdown` printed JSON and exited 0 (check, explain-oom and read-log refuse the pair)."""
    line = one_error_line(*run(capsys, "plan", "--json", "--markdown"))
    assert "pick one" in line


def test_qa_tiers_plan_context_within_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    """`tiers plan --context 1000000` for an 8,192-token model priced a prefill that cannot run; and the default
    8,192 was used for Llama-2-7B, whose limit is 4,096."""
    line = one_error_line(*run(capsys, "tiers", "plan", "--context", "1000000"))
    assert "--context 1000000" in line and "max_position_embeddings (8192)" in line
    code, out, err = run(capsys, "tiers", "plan", "llama-2-7b", "--json")
    assert code in (0, 1), err
    assert json.loads(out)["prefill_rate"]["context_tokens"] == 4096
    code, out, _ = run(capsys, "tiers", "plan", "--json")
    assert json.loads(out)["prefill_rate"]["context_tokens"] == 8192


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["plan", ""], "empty model name"),
        (["plan", "--model", ""], "empty model name"),
        (["plan", "--gpu", ""], "empty GPU name"),
        (["tiers", "plan", ""], "empty model name"),
        (["tiers", "bench", "", "--skip-device"], "empty model name"),
    ],
)
def test_qa_empty_names_are_bad_input(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan --model ''`, `plan --gpu ''` and `tiers plan ''` planned the defaults (an empty name is falsy) and
    exited 0; `plan ''` failed with an internal error (exit 70) after the quoted-command change."""
    line = one_error_line(*run(capsys, *args))
    assert needle in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--chunked-prefill-size", "99999999999999999999"],
            "--chunked-prefill-size 100000000000000000000: absurdly",
        ),
        (["--cuda-graph-max-bs", "1e9"], "--cuda-graph-max-bs 1000000000: absurdly large"),
        (["--max-total-tokens", "1e15"], "--max-total-tokens 1000000000000000: absurdly large"),
        (["--enable-hierarchical-cache", "--hicache-size", "1e300"], "--hicache-size 1e+300: absurdly large"),
        (
            ["--enable-hierarchical-cache", "--hicache-ratio", "1e300"],
            "--hicache-ratio 1e+300: absurdly large",
        ),
    ],
)
def test_qa_sglang_huge_values_are_bad_input(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by fuzzing `plan --engine sglang`: --chunked-prefill-size 1e20 ran out of memory building the graph
    buckets (internal error, exit 70); --hicache-size 1e300 hit `float NaN to integer` (exit 70);
    --cuda-graph-max-bs 1e9 printed mem_fraction_static=-86827.479 as "heuristic"."""
    line = one_error_line(*run(capsys, "plan", "--engine", "sglang", "--gpu", "l4", *args))
    assert needle in line


def test_qa_vllm_offload_huge_value_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(*run(capsys, "plan", "--kv-offloading-size", "1e300"))
    assert "--kv-offloading-size 1e+300: absurdly large" in line


def test_qa_check_and_plan_know_the_same_flags() -> None:
    """Every flag plan's serve-command parser models is accepted by check's `command:` with the same effect.
    Before: check refused vLLM's `--device-memory-utilization` alias and `--cuda-graph-sizes`, and plan ignored
    SGLang 0.5.23's `--enable-hicache` alias (no host tier planned)."""
    from vramctl.core.engines import flags

    samples = {"float": "0.9", "int": "2", "sizes": "1,2,4", "str": "fp8", "bytes": "8GiB", "len": "4096"}
    for engine in ("vllm", "sglang"):
        head = (
            "vllm serve llama-3-8b"
            if engine == "vllm"
            else "python -m sglang.launch_server --model-path llama-3-8b"
        )
        table = flags.serve_table(engine)  # type: ignore[arg-type]
        for flag, (entry, bool_value) in table.items():
            field = entry.target
            if not entry.is_setting:
                continue
            if bool_value is not None:
                command = f"{head} {flag}"
                spec = parse_spec(f"gpu: h100-sxm\nengine: {engine}\ncommand: {command}\n")
                assert getattr(spec.settings, field) == bool_value, command
                continue
            if field in ("kv_cache_dtype",):
                text = "fp8"
            elif field == "dtype":
                text = "bfloat16"
            elif field == "cudagraph_capture_sizes":
                text = samples["sizes"]
            elif field == "kv_cache_memory_bytes":
                text = samples["bytes"]
            elif field in ("gpu_memory_utilization", "mem_fraction_static"):
                text = "0.8"
            elif field in ("hicache_ratio", "hicache_size_gb", "kv_offloading_size_gib"):
                text = "4"
            elif field == "weight_cache_mode":
                text = "'{\"mode\":\"copy\"}'"
            elif field == "limit_mm_per_prompt":
                text = "'{\"image\":2}'"
            elif field == "mm_max_pixels":
                text = "'{\"max_pixels\":1003520}'"
            elif field == "compilation_config":  # sets the fields its keys name (flags.CompilationConfig)
                text, field = "'{\"cudagraph_mode\":\"PIECEWISE\"}'", "cudagraph_mode"
            elif field == "speculative_config":  # sets method, num_speculative_tokens, model
                text, field = "'{\"method\":\"mtp\",\"num_speculative_tokens\":2}'", "num_speculative_tokens"
            else:
                text = samples["len"] if "len" in field or "tokens" in field else samples["int"]
            command = f"{head} {flag} {text}"
            expected = dict(parse_serve_command(command).changes)[field]
            spec = parse_spec(f"gpu: h100-sxm\nengine: {engine}\ncommand: {command}\n")
            assert getattr(spec.settings, field) == expected, command


def test_qa_tiers_capacity_absurdly_large(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--gpu-capacity 1e300` replayed and printed a 301-digit `capacity_tokens` in the JSON (beyond what JSON
    readers outside Python hold as a number): a capacity above 2^50 tokens is a typo for `unlimited`."""
    line = one_error_line(*run(capsys, "tiers", "simulate", "--trace", str(trace), "--gpu-capacity", "1e300"))
    assert "absurdly large" in line and "unlimited" in line
    code, out, err = run(
        capsys, "tiers", "simulate", "--trace", str(trace), "--gpu-capacity", "unlimited", "--json"
    )
    assert code == 0 and json.loads(out)["tiers"][0]["capacity_tokens"] is None, err


def test_qa_check_deeply_nested_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A spec of 5,000 nested lists crashed with RecursionError (internal error, exit 70)."""
    spec = tmp_path / "deep.yaml"
    spec.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    line = one_error_line(*run(capsys, "check", str(spec)))
    assert "nested too deeply" in line


def test_qa_tiers_deeply_nested_json(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace line or a bandwidths file of 100,000 nested arrays crashed with RecursionError (exit 70)."""
    deep = "[" * 100_000 + "]" * 100_000
    trace.write_text(trace.read_text() + deep + "\n")
    line = one_error_line(*run(capsys, "tiers", "simulate", "--trace", str(trace)))
    assert "line 4" in line and "nested too deeply" in line
    bandwidths = tmp_path / "bw.json"
    bandwidths.write_text(deep)
    line = one_error_line(*run(capsys, "tiers", "plan", "--bandwidths", str(bandwidths)))
    assert "nested too deeply" in line
