"""read-log: V1's `num_gpu_blocks is: N`, hard-wrapped lines, the short `Model loading took X GiB` form, and
`--compare-plan` printing what it read when it cannot plan. Lines reconstructed from vLLM's format strings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.diagnose.startup import parse_startup_log

V1_BLOCKS = (
    "(APIServer pid=15) INFO 08-27 21:03:30 [loggers.py:142] Engine 000: vllm cache_config_info with "
    "initialization after num_gpu_blocks is: 9853"
)


def _parse(text: str):  # type: ignore[no-untyped-def]
    return parse_startup_log(text.splitlines())


def test_v1_num_gpu_blocks_is() -> None:
    report = _parse(V1_BLOCKS + "\n")
    assert report.facts["num_gpu_blocks"].value == 9853


@pytest.mark.parametrize(
    ("lines", "key", "value"),
    [
        (["Model loading took 13.7193", "GiB and 31.68 seconds"], "weights_loaded", round(13.7193 * 2**30)),
        (["Available KV cache memory: 50.", "28 GiB"], "kv_cache", round(50.28 * 2**30)),
        (["Available KV cache memory:", "50.28 GiB"], "kv_cache", round(50.28 * 2**30)),
        (
            ["Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is:", "9853"],
            "num_gpu_blocks",
            9853,
        ),
    ],
)
def test_hard_wrapped_lines(lines: list[str], key: str, value: int) -> None:
    prefix = "INFO 08-27 21:03:10 [gpu_worker.py:276] "
    report = _parse("\n".join([prefix + lines[0], *lines[1:]]) + "\n")
    assert report.facts[key].value == value


def test_short_model_loading_form() -> None:
    report = _parse("- **Model loading took:** 13.47 GiB\n")
    assert report.facts["weights_loaded"].value == round(13.47 * 2**30)
    long = _parse("INFO [gpu_model_runner.py:1953] Model loading took 13.47 GiB memory and 31.68 seconds\n")
    assert long.facts["weights_loaded"].format != "model-loading-short"


def test_compare_plan_prints_the_partial_ledger_and_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "start.log"
    log.write_text(
        "INFO [gpu_model_runner.py:1953] Model loading took 13.47 GiB and 31.68 seconds\n"
        "INFO [gpu_worker.py:276] Available KV cache memory: 50.28 GiB\n" + V1_BLOCKS + "\n"
    )
    code = main(["read-log", str(log), "--compare-plan", "--model", "no-such-model-xyz"])
    out, err = capsys.readouterr()
    assert code == 2
    assert "50.28" in out  # what was read is printed
    assert err.strip().startswith("vramctl: error: --compare-plan") and "no-such-model-xyz" in err
    code = main(["read-log", str(log), "--compare-plan", "--model", "no-such-model-xyz", "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    data = json.loads(out)
    assert data["num_blocks"] == 9853 and "no-such-model-xyz" in data["comparison_error"]


def test_compare_plan_from_free_memory_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # SGLang prints free memory, never the device total (scheduler.py / model_runner.py format strings;
    # numbers made up for this test).
    log = tmp_path / "sglang.log"
    log.write_text(
        "[2026-01-05 10:00:00] server_args=ServerArgs(model_path='meta-llama/Meta-Llama-3-8B-Instruct', "
        "mem_fraction_static=0.88, tp_size=1)\n"
        "[2026-01-05 10:00:10 TP0] Load weight begin. avail mem=78.60 GB\n"
        "[2026-01-05 10:00:15 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
        "avail mem=63.55 GB, mem usage=15.05 GB.\n"
        "[2026-01-05 10:00:16 TP0] KV Cache is allocated. #tokens: 430000, K size: 26.24 GB, V size: 26.24 GB\n"
        "[2026-01-05 10:00:16 TP0] Memory pool end. avail mem=9.80 GB\n"
    )
    code = main(["read-log", str(log), "--compare-plan", "--json"])
    out, _err = capsys.readouterr()
    assert code == 0, out
    notes = json.loads(out)["comparison"]["notes"]
    assert "only free memory (78.60 GiB" in notes[0] and "--gpu" in notes[0]


def test_compare_plan_from_free_memory_after_loading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A log without the `Load weight begin` line (cut, or a wrapper that starts later): SGLang's `mem usage` is
    # before − after (model_runner.py load_model), so after + usage is the free memory before the weights.
    log = tmp_path / "sglang.log"
    log.write_text(
        "[2026-01-05 10:00:00] server_args=ServerArgs(model_path='meta-llama/Meta-Llama-3-8B-Instruct', "
        "mem_fraction_static=0.88, tp_size=1)\n"
        "[2026-01-05 10:00:15 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
        "avail mem=63.55 GB, mem usage=15.05 GB.\n"
        "[2026-01-05 10:00:16 TP0] KV Cache is allocated. #tokens: 430000, K size: 26.24 GB, V size: 26.24 GB\n"
    )
    code = main(["read-log", str(log), "--compare-plan", "--json"])
    out, _err = capsys.readouterr()
    assert code == 0, out
    notes = json.loads(out)["comparison"]["notes"]
    assert "only free memory (78.60 GiB before loading: SGLang's avail mem after loading + its mem usage)" in notes[0]
    log.write_text(log.read_text().replace(", mem usage=15.05 GB", ""))  # no usage: no total to plan on
    code = main(["read-log", str(log), "--compare-plan", "--json"])
    _out, err = capsys.readouterr()
    assert code == 2 and "does not print the device total" in err
