"""explain-oom on the failures the engine tier induced in vLLM 0.32's CPU build (tests/engine/failures.yaml), kept
here as unit tests so the plain suite guards them: an explicit KV size is fixed by that size (not the utilisation,
which the engine ignores then), the CPU worker's KV check above the node's memory, vLLM's answer to a request
longer than the context, and an exception logged as a warning ranked below the real error."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramctl.diagnose import diagnose, diagnose_text

QWEN3 = Path(__file__).resolve().parent.parent / "engine" / "configs" / "qwen3-gqa"

HEAD = (
    "(APIServer pid=1) INFO 12-02 11:21:52 [entrypoints/.../utils/api_utils.py:286] non-default args: "
    "{{'host': '127.0.0.1', 'port': 8000, 'model': '{model}', 'max_model_len': {mml}, 'enforce_eager': True, "
    "'load_format': 'dummy'{extra}}}\n"
    "(EngineCore pid=2) INFO 12-02 11:22:16 [v1/engine/core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
    "config: model='{model}', dtype=torch.bfloat16, max_seq_len={mml}, load_format=dummy\n"
)


def _head(*, mml: int = 512, kv: int | None = None, model: Path = QWEN3) -> str:
    extra = f", 'kv_cache_memory_bytes': {kv}" if kv is not None else ""
    return HEAD.format(model=model, mml=mml, extra=extra)


NO_KV = (
    "(EngineCore pid=2) ERROR 12-02 11:22:31 [v1/engine/core.py:1510] ValueError: No available memory for the cache "
    "blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
    "memory reservation on the CPU backend, despite its name).\n"
)


def test_an_explicit_kv_size_is_raised_not_the_utilisation(tmp_path: Path) -> None:
    log = tmp_path / "no-room.log"
    log.write_text(_head(kv=1000) + NO_KV)
    d = diagnose(log)
    assert d.cause == "no-kv-cache-memory"
    first = d.fixes[0]
    # 512 tokens of a 2-layer, 2-KV-head, head_dim 64 bf16 model: 1,024 B per token, 0.5 MiB + a block -> 1 MiB
    assert (first.flag, first.value) == ("--kv-cache-memory-bytes", str(1 << 20))
    assert "checked with plan" in first.reason
    assert all(f.flag != "--gpu-memory-utilization" for f in d.fixes)
    assert d.do_not and "ignores the utilisation" in d.do_not[0]


def test_without_the_model_the_explicit_kv_fix_says_how_to_size_it() -> None:
    d = diagnose_text(_head(kv=1000, model=Path("/nowhere/model")) + NO_KV)
    assert d.cause == "no-kv-cache-memory"
    assert d.fixes[0].flag == "--kv-cache-memory-bytes" and d.fixes[0].value is None
    assert all(f.flag != "--gpu-memory-utilization" for f in d.fixes)


def test_without_an_explicit_kv_size_the_utilisation_fix_stands() -> None:
    d = diagnose_text(_head(model=Path("/nowhere/model")) + NO_KV)
    assert d.fixes[0].flag == "--gpu-memory-utilization"


def test_kv_too_small_with_an_explicit_size_caps_the_length_then_raises_the_size() -> None:
    d = diagnose_text(
        _head(mml=4096, kv=2097152, model=Path("/nowhere/model"))
        + "(EngineCore pid=2) ERROR 12-02 11:22:31 [v1/engine/core.py:1510] ValueError: To serve at least one "
        "request with the model's max seq len (4096), (0.01 GiB KV cache is needed, which is larger than the "
        "available KV cache memory (0.0 GiB). Based on the available memory, the estimated maximum model length is "
        "1920. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n"
    )
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert (d.fixes[0].flag, d.fixes[0].value) == ("--max-model-len", "1920")
    second = d.fixes[1]
    # the message's 0.01 GiB, rounded up by its own rounding: 0.02 GiB -> 21 MiB
    assert (second.flag, second.value) == ("--kv-cache-memory-bytes", str(21 << 20))
    assert all(f.flag != "--gpu-memory-utilization" for f in d.fixes)


def test_the_gpu_start_up_check_keeps_its_utilisation_fix_with_an_explicit_kv_size() -> None:
    d = diagnose_text(
        _head(kv=10 << 30, model=Path("/nowhere/model"))
        + "ValueError: Free memory on device cuda:0 (31.44/79.19 GiB) on startup is less than desired GPU memory "
        "utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n"
    )
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert d.fixes[0].flag == "--gpu-memory-utilization"


CPU_KV = (
    "(Worker pid=3) ERROR 12-02 11:24:53 [v1/executor/multiproc_executor.py:1063] ValueError: Available memory on "
    "node 0 ({free}/10.96 GiB) on kv cache allocation is less than requested memory for kv ({kv} GiB). {tail}\n"
)
EXPLICIT_TAIL = "Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes."


def test_cpu_kv_space_above_the_node_lowers_the_space() -> None:
    d = diagnose_text(_head() + CPU_KV.format(free="8.98", kv="100000.0", tail=EXPLICIT_TAIL))
    assert (d.cause, d.phase, d.signature) == (
        "gpu-util-exceeds-free-memory",
        "kv-alloc",
        "vllm-cpu-kv-above-node-memory",
    )
    # half of the 8.98 GiB available, in whole GiB
    assert (d.fixes[0].flag, d.fixes[0].value) == ("VLLM_CPU_KVCACHE_SPACE", "4")
    assert all(f.flag != "--gpu-memory-utilization" for f in d.fixes)


def test_cpu_kv_flag_above_the_node_lowers_the_flag() -> None:
    d = diagnose_text(_head(kv=100 << 30) + CPU_KV.format(free="8.98", kv="100.0", tail=EXPLICIT_TAIL))
    assert d.fixes[0].flag == "--kv-cache-memory-bytes"
    assert int(str(d.fixes[0].value)) == int(0.5 * 8.98 * 1024) * (1 << 20)


def test_cpu_auto_mode_moves_the_utilisation() -> None:
    tail = "Reduce CPU memory used by other processes."
    lower = diagnose_text(_head() + CPU_KV.format(free="1.52", kv="2.1/3.6", tail=tail))
    assert lower.cause == "gpu-util-exceeds-free-memory"
    assert lower.fixes[0].flag == "--gpu-memory-utilization"
    # the process holds 3.6 - 2.1 = 1.5 GiB; half the 1.52 GiB available beside it, of 10.96 GiB
    assert lower.fixes[0].value == "0.2"
    raise_ = diagnose_text(_head() + CPU_KV.format(free="4.66", kv="-0.39/3.6", tail=tail))
    assert raise_.cause == "no-kv-cache-memory"
    assert raise_.fixes[0].flag == "--gpu-memory-utilization"
    assert float(str(raise_.fixes[0].value)) > 3.6 / 10.96


@pytest.mark.parametrize(
    ("message", "value"),
    [
        # vLLM 0.32 (renderers/params.py), as the API server answers it
        (
            'POST /v1/completions -> HTTP 400: {"error":{"message":"This model\'s maximum context length is 256 '
            "tokens. However, your prompt contains 300 input tokens, which exceeds this limit even without any output "
            'tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=300)","type":'
            '"BadRequestError","param":"input_tokens","code":400}}',
            "301",
        ),
        # 0.22 - 0.31
        (
            "openai.BadRequestError: Error code: 400 - This model's maximum context length is 8192 tokens. However, "
            "you requested 64 output tokens and your prompt contains at least 8129 input tokens, for a total of at "
            "least 8193 tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
            "8193",
        ),
        # 0.8 - 0.10
        (
            "openai.BadRequestError: Error code: 400 - {'error': {'message': \"'max_tokens' or 'max_completion_tokens' "
            "is too large: 2048. This model's maximum context length is 4096 tokens and your request has 2524 input "
            "tokens (2048 > 4096 - 2524). None\", 'type': 'BadRequestError'}}",
            "4572",
        ),
        # 0.4 - 0.7
        (
            "ERROR: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in "
            "the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
            "5000",
        ),
        # V1 input processor, a prompt of exactly max_model_len tokens (0.32)
        (
            "vllm.exceptions.VLLMValidationError: The decoder prompt (length 256) plus the number of requested output "
            "tokens (at least 1) is longer than the maximum model length of 256. Make sure that `max_model_len` is no "
            "smaller than the number of text tokens (prompt + requested output tokens).",
            "257",
        ),
    ],
)
def test_a_request_longer_than_the_context_is_not_oom_with_a_length_fix(message: str, value: str) -> None:
    d = diagnose_text(_head(model=Path("/nowhere/model")) + message + "\n")
    assert d.cause == "not-oom"
    assert d.fixes[0].flag == "--max-model-len" and str(d.fixes[0].value).replace(",", "") == value
    assert any("maximum" in e.text for e in d.evidence)


WARNED = (
    "(APIServer pid=1) WARNING 12-02 11:27:13 [renderers/base.py:380] Chat template warmup failed\n"
    "(APIServer pid=1) WARNING 12-02 11:27:13 [renderers/base.py:380] Traceback (most recent call last):\n"
    '(APIServer pid=1) WARNING 12-02 11:27:13 [renderers/base.py:380]   File "/x/vllm/renderers/base.py", line 217, '
    "in get_tokenizer\n"
    "(APIServer pid=1) WARNING 12-02 11:27:13 [renderers/base.py:380] ValueError: Tokenizer not available when "
    "`skip_tokenizer_init=True`\n"
)


def test_an_exception_logged_as_a_warning_ranks_below_an_error() -> None:
    later = (
        "(APIServer pid=1) ERROR 12-02 11:27:15 [serving.py:1] Traceback (most recent call last):\n"
        '(APIServer pid=1) ERROR 12-02 11:27:15 [serving.py:1]   File "/x/serving.py", line 3, in create\n'
        "(APIServer pid=1) ERROR 12-02 11:27:15 [serving.py:1] KeyError: 'choices'\n"
    )
    d = diagnose_text(WARNED + later)
    assert d.cause == "not-oom" and "KeyError" in (d.what or "")
    far = diagnose_text(WARNED + "".join(f"INFO line {i}\n" for i in range(300)) + later)
    assert "KeyError" in (far.what or "")
    assert [o.line for o in far.other_failures] == [4]


def test_an_exception_logged_as_a_warning_alone_is_still_reported() -> None:
    d = diagnose_text(WARNED)
    assert d.cause == "not-oom" and "ValueError" in (d.what or "")
