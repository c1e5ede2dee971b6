"""`--kv-cache-dtype`: exactly the choices each vLLM release accepts (vramctl.core.engines.vllm.rules.
KV_CACHE_DTYPE_ADDED, read from each release's CacheDType / argparse choices), refused otherwise in one line naming the
release's choices (exit 2), and each accepted dtype's bytes per token with its scales (vramctl.core.kv)."""

from __future__ import annotations

import json

import pytest

from tests.plan.test_plan_kv import _llama8b
from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.core.engines.vllm import rules as V
from vramctl.core.errors import BadInputError

# The CacheDType literal (or argparse choices) of releases read one by one, independent of the table's layout.
RELEASES = {
    "0.6.3": {"auto", "fp8", "fp8_e5m2", "fp8_e4m3"},
    "0.9.0": {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"},
    "0.10.2": {"auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"},
    "0.11.0": {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"},
    "0.17.0": {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"},
    "0.19.0": {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"},
    "0.24.0": {
        "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "turboquant_k8v4",
        "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "int8_per_token_head",
        "fp8_per_token_head", "nvfp4",
    },
    "0.32.0": {
        "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
        "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "ultraquant_4bit",
        "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
    },
    "0.34.0": {
        "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
        "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4",
        "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head",
        "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
    },
}


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_choices_per_release(version: str) -> None:
    assert set(V.kv_cache_dtype_choices(version)) == RELEASES[version]


@pytest.mark.parametrize(
    ("value", "version", "needle"),
    [
        ("int8", "0.34.0", "unknown KV cache dtype"),  # never a vLLM choice (int8_per_token_head is)
        ("bf16", "0.32.0", "unknown KV cache dtype"),
        ("FP8", "0.32.0", "unknown KV cache dtype"),  # argparse compares the exact string
        ("bfloat16", "0.10.2", "vLLM accepts it from 0.11.0"),
        ("float16", "0.17.0", "vLLM accepts it from 0.18.0"),
        ("nvfp4", "0.19.0", "vLLM accepts it from 0.20.0"),
        ("int4_per_token_head", "0.24.0", "vLLM accepts it from 0.25.0"),
        ("octave_k3v4", "0.32.0", "vLLM accepts it from 0.33.0"),
    ],
)
def test_refused_in_one_line_naming_the_release_choices(
    value: str, version: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192",
                 "--engine-version", version, "--kv-cache-dtype", value])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert f"vLLM {version} accepts auto, fp8" in err
    assert len(err.strip().splitlines()) == 1


def test_bytes_per_token_of_each_sized_dtype() -> None:
    """Llama-3-8B: 32 layers × 8 KV heads × head_dim 128."""
    m = _llama8b()
    heads = 32 * 8
    assert kv.kv_bytes_per_token(m, kv_cache_dtype="bfloat16") == heads * 2 * 128 * 2
    assert kv.kv_bytes_per_token(m, kv_cache_dtype="float16") == heads * 2 * 128 * 2
    for fp8 in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"):
        assert kv.kv_bytes_per_token(m, kv_cache_dtype=fp8) == heads * 2 * 128
    # per side: 64 bytes of FP4 data + 8 FP8 block scales (one per 16 values)
    assert kv.kv_bytes_per_token(m, kv_cache_dtype="nvfp4") == heads * 2 * (64 + 8)
    assert kv.kv_bytes_per_token(m, kv_cache_dtype="nvfp4_4over6") == heads * 2 * (64 + 8)
    # per side: the data + one float32 scale per token and head
    assert kv.kv_bytes_per_token(m, kv_cache_dtype="int8_per_token_head") == heads * 2 * (128 + 4)
    assert kv.kv_bytes_per_token(m, kv_cache_dtype="fp8_per_token_head") == heads * 2 * (128 + 4)
    assert kv.kv_bytes_per_token(m, kv_cache_dtype="int4_per_token_head") == heads * 2 * (64 + 4)


@pytest.mark.parametrize("value", ["turboquant_k8v4", "turboquant_3bit_nc", "ultraquant_4bit", "octave_k3v3"])
def test_accepted_but_unsized_layouts_are_one_line(value: str) -> None:
    with pytest.raises(BadInputError) as err:
        kv.kv_bytes_per_token(_llama8b(), kv_cache_dtype=value)
    assert "does not size this packed KV cache" in str(err.value)
    assert "\n" not in str(err.value)


def test_plan_json_with_a_per_token_head_cache(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192", "--json"]
    assert main([*base, "--kv-cache-dtype", "fp8_per_token_head"]) == 0
    per_head = json.loads(capsys.readouterr().out)
    assert main([*base, "--kv-cache-dtype", "fp8"]) == 0
    fp8 = json.loads(capsys.readouterr().out)
    assert per_head["kv_bytes_per_token"] - fp8["kv_bytes_per_token"] == 32 * 8 * 2 * 4
