"""vLLM's multimodal encoder profiling in the activation term (vramctl.core.engines.vllm.multimodal): the encoder
budget and dummy item count per version, the flags that change them, the parts of the activation term, `plan --json`
and read-log's comparison of vLLM's "Encoder cache will be initialized ..." line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vramctl.cli.main import main
from vramctl.core.engines import flags
from vramctl.core.engines.vllm import rules as V
from vramctl.core.engines.vllm.multimodal import mm_encoder_profile, tokens_per_item
from vramctl.core.errors import BadInputError
from vramctl.core.ledger import ACTIVATION_PEAK
from vramctl.core.plan import plan
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model

H100 = load_gpu("h100-sxm")
QWEN25_VL = load_model("qwen2.5-vl-7b")
LLAVA_NEXT = load_model("llava-v1.6-mistral-7b")
GEMMA3 = load_model("gemma-3-27b")
VL_MODELS = [
    "qwen2-vl-7b-instruct",
    "qwen2.5-vl-7b",
    "qwen3-vl-30b-a3b-instruct",
    "gemma-3-27b",
    "llama-4-scout-17b-16e-instruct",
    "mistral-small-3.1-24b-instruct-2503",
    "llava-1.5-7b-hf",
    "llava-v1.6-mistral-7b",
]


def _profile(model_name: str, version: str, **kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {"max_num_batched_tokens": 8192, "max_model_len": 4096, "max_num_seqs": 256, "tp": 1}
    args.update(kw)
    return mm_encoder_profile(load_model(model_name), V.rules_for(version), **args)  # type: ignore[arg-type]


def _settings(command: str) -> ServeSettings:
    return parse_serve_command(command).apply(ServeSettings())


def _activation(model_name: str, command_flags: str = "", version: str = "0.32.0") -> int:
    s = replace(_settings(f"vllm serve m {command_flags}"), engine_version=version)
    result = plan(load_model(model_name), H100, s)
    return result.ledger.bytes_of(ACTIVATION_PEAK)


# --- the budget and the item count, per version -------------------------------------------------------------------


def test_llava_next_budget_and_items_follow_the_version_rules() -> None:
    # LLaVA-NeXT's largest image: the base crop (576) + the 672 × 672 pinpoint's 48 × 48 grid and 48 newlines = 2,928
    tokens, patches = tokens_per_item(LLAVA_NEXT.vision, "image", V.rules_for("0.32.0"), max_model_len=4096)  # type: ignore[arg-type]
    assert (tokens, patches) == (2928, 5 * 577)
    # 0.10.2 → floor(16384 / 2928) = 5 items; 0.8.x rounded up: ceil = 6
    new = _profile("llava-v1.6-mistral-7b", "0.10.2", max_num_batched_tokens=16384)
    old = _profile("llava-v1.6-mistral-7b", "0.8.5", max_num_batched_tokens=16384)
    assert (new.budget_tokens, new.items, new.modality) == (16384, 5, "image")
    assert (old.budget_tokens, old.items) == (16384, 6)
    # 0.8.0 – 0.8.4: one item per prompt by default, so max_num_seqs × 1 caps the batch
    assert _profile("llava-v1.6-mistral-7b", "0.8.3", max_num_batched_tokens=16384, max_num_seqs=2).items == 2
    assert _profile("llava-v1.6-mistral-7b", "0.8.5", max_num_batched_tokens=16384, max_num_seqs=2).items == 6


def test_the_budget_is_at_least_one_item() -> None:
    p = _profile("qwen2.5-vl-7b", "0.32.0", max_num_batched_tokens=2048, limits=(("video", 0),))
    assert (p.tokens_per_item, p.budget_tokens, p.items) == (16384, 16384, 1)


def test_qwen_video_frames_fill_max_model_len_up_to_the_version_cap() -> None:
    # 0.11 →: 14 frames = 7 temporal pairs × 16,384 tokens; 0.10.2: 16 frames would need 131,072 > 128,000, so 14
    assert _profile("qwen2.5-vl-7b", "0.32.0", max_model_len=128000).tokens_per_item == 7 * 16384
    assert _profile("qwen2.5-vl-7b", "0.32.0", max_model_len=262144).tokens_per_item == 7 * 16384
    assert _profile("qwen2.5-vl-7b", "0.10.2", max_model_len=262144).tokens_per_item == 8 * 16384
    # before 0.10.2 one image's tokens come off max_model_len first: 128,000 − 16,384 holds 6 pairs
    assert _profile("qwen2.5-vl-7b", "0.10.0", max_model_len=128000).tokens_per_item == 6 * 16384


def test_a_tie_names_the_modality_as_the_version_does() -> None:
    # at max_model_len 4096 the one-frame video has the image's 16,384 tokens
    assert _profile("qwen2.5-vl-7b", "0.32.0").modality == "video"
    assert _profile("qwen2.5-vl-7b", "0.11.0").modality == "image"
    assert _profile("qwen3-vl-30b-a3b-instruct", "0.32.0").modality == "image"  # its video processor is smaller


def test_max_pixels_sizes_the_qwen_image() -> None:
    p = _profile("qwen2.5-vl-7b", "0.32.0", max_pixels=1280 * 28 * 28, limits=(("video", 0),))
    assert (p.tokens_per_item, p.items) == (1280, 6)  # 8192 // 1280
    old = _profile("qwen2.5-vl-7b", "0.11.0", max_pixels=1280 * 28 * 28, limits=(("video", 0),))
    assert old.tokens_per_item == 35 * 35  # a square resize before the factorised grid


def test_without_chunked_prefill_the_batch_of_requests_is_capped() -> None:
    chunked = _profile("gemma-3-27b", "0.32.0", max_num_seqs=4)
    unchunked = _profile("gemma-3-27b", "0.32.0", max_num_seqs=4, chunked_prefill=False, max_num_batched_tokens=512)
    assert chunked.items == 32  # 8192 // 256 < 4 requests × min(999, 4096 // 256)
    assert unchunked.items == 2  # min(4, 512 // 256) requests × 16 per prompt, above 512 // 256


@pytest.mark.parametrize("name", VL_MODELS)
def test_every_bundled_vision_model_is_profiled(name: str) -> None:
    p = _profile(name, "0.32.0")
    assert p is not None and p.profiled
    assert p.items >= 1 and p.budget_tokens >= p.tokens_per_item > 0
    assert p.forward_bytes > 0 and p.outputs_bytes > 0
    assert p.log_line().startswith(f"Encoder cache will be initialized with a budget of {p.budget_tokens} tokens")


def test_text_models_and_v0_have_no_encoder_profile() -> None:
    assert _profile("llama-3-8b", "0.32.0") is None
    assert _profile("gemma-3-27b", "0.7.3") is None


def test_skip_and_zero_limits_and_language_model_only() -> None:
    assert _profile("gemma-3-27b", "0.32.0", skip=True).skipped.startswith("--skip-mm-profiling")
    assert not _profile("gemma-3-27b", "0.32.0", limits=(("image", 0),)).profiled
    assert not _profile("qwen2.5-vl-7b", "0.32.0", limits=(("image", 0), ("video", 0))).profiled
    assert _profile("qwen2.5-vl-7b", "0.32.0", limits=(("image", 0),)).modality == "video"
    assert not _profile("gemma-3-27b", "0.32.0", language_model_only=True).profiled
    # flags a version does not have change nothing there
    assert _profile("gemma-3-27b", "0.10.0", skip=True).profiled
    assert _profile("gemma-3-27b", "0.16.0", language_model_only=True).profiled


def test_qwen3_vl_video_before_0_15_is_said_not_modelled() -> None:
    old = _profile("qwen3-vl-30b-a3b-instruct", "0.14.0")
    assert old is not None and not old.profiled and "before 0.15" in old.unmodelled
    assert _profile("qwen3-vl-30b-a3b-instruct", "0.14.0", limits=(("video", 0),)).profiled
    assert _profile("qwen3-vl-30b-a3b-instruct", "0.15.0").profiled
    # the activation term leaves an unmodelled pass out, and the plan warns
    s = replace(ServeSettings(), engine_version="0.14.0")
    result = plan(load_model("qwen3-vl-30b-a3b-instruct"), H100, s)
    assert any("before 0.15" in w for w in result.warnings)
    assert result.to_json()["multimodal_encoder"]["profiled"] is True  # vLLM does profile it


@pytest.mark.parametrize("name", ["qwen2.5-vl-7b", "gemma-3-27b", "llava-v1.6-mistral-7b"])
def test_zero_limits_leave_the_tower_unloaded_from_0_15(name: str) -> None:
    from vramctl.core.ledger import WEIGHTS
    from vramctl.core.params import rank_weight_bytes

    model = load_model(name)
    tower = rank_weight_bytes(model, 1).vision
    assert tower > 0

    def weights(version: str, flags_: str) -> int:
        s = replace(_settings(f"vllm serve m {flags_}"), engine_version=version)
        return plan(model, H100, s).ledger.bytes_of(WEIGHTS)

    off = """--limit-mm-per-prompt '{"image": 0, "video": 0}'"""
    assert weights("0.32.0", "") - weights("0.32.0", off) == pytest.approx(tower, abs=2)
    assert weights("0.32.0", "--language-model-only") == weights("0.32.0", off)
    assert weights("0.32.0", "--skip-mm-profiling") == weights("0.32.0", "")  # profiling skipped, tower loaded
    assert weights("0.14.0", off) == weights("0.14.0", "")  # before the generic skip (0.15)


def test_data_parallel_encoder_splits_items_not_weights() -> None:
    weights = _profile("qwen2.5-vl-7b", "0.32.0", tp=4, max_pixels=1280 * 28 * 28, limits=(("video", 0),))
    data = _profile(
        "qwen2.5-vl-7b", "0.32.0", tp=4, max_pixels=1280 * 28 * 28, limits=(("video", 0),), tp_mode="data"
    )
    assert (weights.items_on_rank, data.items_on_rank) == (6, 2)
    assert data.outputs_bytes == weights.outputs_bytes  # gathered on every rank
    # a tower without supports_encoder_tp_data falls back to weights
    assert _profile("gemma-3-27b", "0.32.0", tp=4, tp_mode="data").items_on_rank == 32


# --- properties of the activation term ----------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    pixels=st.integers(min_value=28 * 28 * 4, max_value=12_845_056),
    more=st.integers(min_value=0, max_value=4_000_000),
    tokens=st.sampled_from([2048, 8192, 16384]),
)
def test_the_encoder_peak_is_monotone_in_max_pixels(pixels: int, more: int, tokens: int) -> None:
    def total(px: int) -> tuple[int, int]:
        p = _profile("qwen2.5-vl-7b", "0.32.0", max_pixels=px, limits=(("video", 0),), max_num_batched_tokens=tokens)
        return p.items * p.tokens_per_item, p.forward_bytes + p.outputs_bytes

    small, large = total(pixels), total(pixels + more)
    # larger images: fewer items, but never fewer tokens per item; the single-item peak grows
    assert large[0] >= 1 and small[0] >= 1
    one_small = _profile("qwen2.5-vl-7b", "0.32.0", max_pixels=pixels, limits=(("video", 0), ("image", 1)),
                         max_num_seqs=1, max_num_batched_tokens=tokens)
    one_large = _profile("qwen2.5-vl-7b", "0.32.0", max_pixels=pixels + more, limits=(("video", 0), ("image", 1)),
                         max_num_seqs=1, max_num_batched_tokens=tokens)
    assert one_large.forward_bytes >= one_small.forward_bytes
    assert one_large.outputs_bytes >= one_small.outputs_bytes


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(VL_MODELS),
    tokens=st.sampled_from([512, 2048, 8192, 16384]),
    seqs=st.integers(min_value=1, max_value=1024),
    version=st.sampled_from(["0.10.2", "0.11.0", "0.32.0", "0.34.0"]),
)
def test_items_fit_the_budget_from_0_10(name: str, tokens: int, seqs: int, version: str) -> None:
    p = _profile(name, version, max_num_batched_tokens=tokens, max_num_seqs=seqs)
    assume(not p.unmodelled)  # Qwen3-VL's video before 0.15
    assert p.budget_tokens == max(tokens, p.tokens_per_item)
    assert p.items >= 1
    assert p.items == 1 or p.items * p.tokens_per_item <= p.budget_tokens


@settings(max_examples=200, deadline=None)
@given(
    image=st.integers(min_value=1, max_value=20000),
    room=st.integers(min_value=-100, max_value=50000),
    temporal=st.integers(min_value=1, max_value=3),
    cap=st.integers(min_value=1, max_value=30),
)
def test_video_frames_match_vllms_frame_loop(image: int, room: int, temporal: int, cap: int) -> None:
    from vramctl.core.engines.vllm.multimodal import _qwen_video_tokens

    frames = 1  # `_get_max_video_frames(max_tokens, start_num_frames=1)`, qwen2_vl.py (0.32.0), then the cap
    while -(-(frames + 1) // temporal) * image <= room:
        frames += 1
    frames = max(1, min(frames, cap))
    assert _qwen_video_tokens(image, temporal, room, cap) == -(-frames // temporal) * image


@pytest.mark.parametrize("name", ["gemma-3-27b", "qwen2.5-vl-7b", "llava-v1.6-mistral-7b"])
def test_skip_or_zero_limits_take_the_encoder_out_of_the_activation(name: str) -> None:
    profiled = _activation(name)
    skipped = _activation(name, "--skip-mm-profiling")
    zero = _activation(name, """--limit-mm-per-prompt '{"image": 0, "video": 0}'""")
    assert skipped == zero < profiled


def test_the_activation_parts_add_up_and_the_ledger_sums() -> None:
    for name in VL_MODELS:
        s = replace(ServeSettings(), engine_version="0.32.0")
        result = plan(load_model(name), H100, s)
        term = result.ledger.get(ACTIVATION_PEAK)
        assert term is not None
        assert sum(t.bytes for t in result.ledger.terms) == result.ledger.capacity_bytes
        mm = result.settings.mm_encoder
        assert mm is not None
        text_only = plan(load_model(name), H100, replace(s, skip_mm_profiling=True)).ledger.get(ACTIVATION_PEAK)
        assert text_only is not None
        # max(LM, encoder forward) + outputs
        assert term.bytes == max(text_only.bytes, mm.forward_bytes) + mm.outputs_bytes


# --- flags ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("""--limit-mm-per-prompt '{"image": 0}'""", (("image", 0),)),
        ("""--limit-mm-per-prompt '{"video": {"count": 1, "num_frames": 32}, "image": 16}'""",
         (("image", 16), ("video", 1))),
        ("--limit-mm-per-prompt image=50,video=2", (("image", 50), ("video", 2))),
    ],
)
def test_limit_spellings(words: str, expected: tuple[tuple[str, int], ...]) -> None:
    assert _settings(f"vllm serve m {words}").limit_mm_per_prompt == expected


def test_processor_kwargs_and_booleans() -> None:
    s = _settings(
        """vllm serve m --mm-processor-kwargs '{"max_pixels": 1003520, "min_pixels": 3136}' --skip-mm-profiling """
        "--mm-encoder-tp-mode data --language-model-only"
    )
    assert (s.mm_max_pixels, s.skip_mm_profiling, s.mm_encoder_tp_mode, s.language_model_only) == (
        1003520, True, "data", True
    )
    assert _settings("""vllm serve m --mm-processor-kwargs '{"size": {"longest_edge": 50176}}'""").mm_max_pixels == 50176
    assert _settings("""vllm serve m --mm-processor-kwargs '{"num_crops": 4}'""").mm_max_pixels is None


@pytest.mark.parametrize(
    ("value", "match"),
    [("{image: 1}", "not a JSON object"), ('{"image": -1}', "negative"), ('{"image": "many"}', "not a count")],
)
def test_bad_limits_are_one_clear_error(value: str, match: str) -> None:
    with pytest.raises(BadInputError, match=match):
        flags.parse_mm_limits(value)


def test_an_unknown_encoder_tp_mode_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--gpu", "h100-sxm", "--", "vllm", "serve", "google/gemma-3-27b-it", "--mm-encoder-tp-mode",
                 "pipeline"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "weights or data" in err


def test_bad_limits_exit_2_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--gpu", "h100-sxm", "--", "vllm", "serve", "Qwen/Qwen2.5-VL-7B-Instruct",
                 "--limit-mm-per-prompt", "{image"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--limit-mm-per-prompt" in err


# --- the CLI: plan --json, and read-log --compare-plan ------------------------------------------------------------


def _plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    code = main(["plan", "--json", "--gpu", "h100-sxm", *args])
    out = capsys.readouterr()
    assert code in (0, 1) and out.err == ""
    return json.loads(out.out)  # type: ignore[no-any-return]


def test_plan_json_reports_the_encoder_profile(capsys: pytest.CaptureFixture[str]) -> None:
    data = _plan_json(capsys, "--engine-version", "0.32.0", "--max-model-len", "32768", "--", "vllm", "serve",
                      "Qwen/Qwen2.5-VL-7B-Instruct", "--limit-mm-per-prompt", '{"video": 0}')
    mm = data["multimodal_encoder"]
    assert (mm["profiled"], mm["modality"], mm["tokens_per_item"], mm["encoder_budget_tokens"], mm["items"]) == (
        True, "image", 16384, 16384, 1
    )
    assert mm["forward_bytes"] > mm["outputs_bytes"] == 16384 * 3584 * 2
    assert sum(t["bytes"] for t in data["terms"].values()) == data["capacity_bytes"]
    assert "vision encoder forward" in data["terms"]["activation_peak"]["formula"]
    assert any("Encoder cache will be initialized with a budget of 16384 tokens" in n for n in data["explanations"])


def test_plan_json_of_a_text_model_has_no_encoder_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert "multimodal_encoder" not in _plan_json(capsys, "--model", "llama-3-8b")


def test_skip_mm_profiling_warns(capsys: pytest.CaptureFixture[str]) -> None:
    data = _plan_json(capsys, "--", "vllm", "serve", "google/gemma-3-27b-it", "--skip-mm-profiling")
    mm = data["multimodal_encoder"]
    assert (mm["profiled"], mm["tower_loaded"]) == (False, True) and mm["skipped"].startswith("--skip-mm-profiling")
    assert any("--skip-mm-profiling" in w for w in data["warnings"])


def test_read_log_compares_the_encoder_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a log in vLLM 0.32.0's own format strings (gpu_model_runner.py, gpu_worker.py), written for this test
    log = tmp_path / "vl.log"
    log.write_text(
        "INFO 12-03 10:00:00 [gpu_model_runner.py:4100] Model loading took 15.50 GiB memory and 9.1 seconds\n"
        "INFO 12-03 10:00:01 [gpu_model_runner.py:6165] Encoder cache will be initialized with a budget of 16384 "
        "tokens, and profiled with 1 image items of the maximum feature size.\n"
        "INFO 12-03 10:00:09 [gpu_worker.py:400] Available KV cache memory: 50.00 GiB\n"
    )
    command = "vllm serve Qwen/Qwen2.5-VL-7B-Instruct --max-model-len 32768 --limit-mm-per-prompt '{\"video\": 0}'"
    code = main(["read-log", str(log), "--json", "--compare-plan", "--gpu", "h100-sxm", "--engine-version", "0.32.0",
                 "--command", command])
    out = capsys.readouterr().out
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)["comparison"]["rows"]}
    assert (rows["encoder_profile_items"]["logged"], rows["encoder_profile_items"]["planned"]) == (1, 1)
    assert rows["encoder_cache_budget_tokens"]["logged"] == rows["encoder_cache_budget_tokens"]["planned"] == 16384
    # with videos allowed, the same deployment profiles one 4-frame video of 32,768 tokens: the row shows the gap
    main(["read-log", str(log), "--json", "--compare-plan", "--gpu", "h100-sxm", "--engine-version", "0.32.0",
          "--command", "vllm serve Qwen/Qwen2.5-VL-7B-Instruct --max-model-len 32768"])
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["comparison"]["rows"]}
    assert rows["encoder_cache_budget_tokens"]["planned"] == 32768
