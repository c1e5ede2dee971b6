"""Local models: config.json, a model folder, HF cache layouts, safetensors headers, and bad input."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vramctl.core.errors import BadInputError
from vramctl.core.params import param_count_from_spec
from vramctl.registry import load_model
from vramctl.registry.safetensors import read_checkpoint

ELEMENT = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I32": 4}

TINY: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def tiny_tensors(
    config: dict[str, Any], dtype: str = "BF16", layers: int | None = None
) -> dict[str, tuple[str, list[int]]]:
    """The tensors of a Llama checkpoint of this config (names and shapes as transformers saves them)."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    d = h // heads
    out: dict[str, tuple[str, list[int]]] = {
        "model.embed_tokens.weight": ("BF16", [v, h]),
        "model.norm.weight": ("BF16", [h]),
    }
    if not config.get("tie_word_embeddings"):
        out["lm_head.weight"] = ("BF16", [v, h])
    for n in range(layers if layers is not None else config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out[p + "self_attn.q_proj.weight"] = (dtype, [heads * d, h])
        out[p + "self_attn.k_proj.weight"] = (dtype, [kv * d, h])
        out[p + "self_attn.v_proj.weight"] = (dtype, [kv * d, h])
        out[p + "self_attn.o_proj.weight"] = (dtype, [h, heads * d])
        out[p + "mlp.gate_proj.weight"] = (dtype, [i, h])
        out[p + "mlp.up_proj.weight"] = (dtype, [i, h])
        out[p + "mlp.down_proj.weight"] = (dtype, [h, i])
        out[p + "input_layernorm.weight"] = ("BF16", [h])
        out[p + "post_attention_layernorm.weight"] = ("BF16", [h])
    return out


def write_safetensors(
    path: Path, tensors: dict[str, tuple[str, list[int]]], *, truncate_data: int = 0
) -> int:
    """Write a real safetensors file (header + zero data); returns the data bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * ELEMENT[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset - truncate_data))
    return offset


def make_folder(root: Path, config: dict[str, Any] | None = None, **kw: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cfg = dict(config or TINY)
    (root / "config.json").write_text(json.dumps(cfg))
    write_safetensors(root / "model.safetensors", tiny_tensors(cfg, **kw))
    return root


def test_config_json_only_uses_the_formula(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    spec = load_model(str(path))
    assert spec.param_count == param_count_from_spec(spec)
    assert spec.weight_bytes == 2 * spec.param_count
    assert spec.num_key_value_heads == 2 and spec.head_dim == 16


def test_folder_with_bf16_safetensors(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "tiny")
    spec = load_model(str(folder))
    expected = sum(math.prod(shape) for _, shape in tiny_tensors(TINY).values())
    assert spec.param_count == expected == param_count_from_spec(spec)
    assert spec.weight_bytes == 2 * expected
    assert "safetensors headers" in dict(spec.sources)["weight_bytes"]


def test_fp8_checkpoint_bytes_are_exact_and_params_from_formula(tmp_path: Path) -> None:
    cfg = {**TINY, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    folder = tmp_path / "fp8"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors = tiny_tensors(cfg, dtype="F8_E4M3")
    for n in range(2):
        tensors[f"model.layers.{n}.mlp.down_proj.weight_scale_inv"] = ("F32", [1, 1])
    data = write_safetensors(folder / "model.safetensors", tensors)
    spec = load_model(str(folder))
    assert spec.quantization == "fp8"
    assert spec.weight_bytes == data
    assert spec.param_count == param_count_from_spec(spec)
    bf16 = sum(math.prod(s) for d, s in tensors.values() if d == "BF16")
    fp8 = sum(math.prod(s) for d, s in tensors.values() if d == "F8_E4M3")
    assert data == 2 * bf16 + fp8 + 4 * 2


def test_sharded_index_and_mtp_layer_dropped(tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    tensors = tiny_tensors(TINY, layers=3)  # layer 2 is an extra (MTP-like) layer a serve does not load
    names = list(tensors)
    first = dict(list(tensors.items())[: len(names) // 2])
    second = dict(list(tensors.items())[len(names) // 2 :])
    write_safetensors(folder / "model-00001-of-00002.safetensors", first)
    write_safetensors(folder / "model-00002-of-00002.safetensors", second)
    weight_map = {n: "model-00001-of-00002.safetensors" for n in first} | {
        n: "model-00002-of-00002.safetensors" for n in second
    }
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    spec = load_model(str(folder))
    assert spec.param_count == sum(math.prod(s) for _, s in tiny_tensors(TINY).values())


def test_tied_lm_head_copy_not_counted(tmp_path: Path) -> None:
    cfg = {**TINY, "tie_word_embeddings": True}
    folder = tmp_path / "tied"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors = tiny_tensors(cfg)
    tensors["lm_head.weight"] = ("BF16", [100, 64])
    write_safetensors(folder / "model.safetensors", tensors)
    spec = load_model(str(folder))
    assert spec.param_count == param_count_from_spec(spec)


def _hf_cache(root: Path) -> tuple[Path, Path]:
    repo = root / "models--acme--tiny-llama"
    snap = repo / "snapshots" / "0123abcd"
    make_folder(snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    return repo, snap


def test_hf_cache_repo_folder_and_snapshot(tmp_path: Path) -> None:
    repo, snap = _hf_cache(tmp_path)
    a = load_model(str(repo))
    b = load_model(str(snap))
    c = load_model(str(snap / "config.json"))
    assert a.name == b.name == c.name == "acme/tiny-llama"
    assert a.param_count == b.param_count == c.param_count


def test_hf_id_found_in_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _hf_cache(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    spec = load_model("acme/tiny-llama")
    assert spec.name == "acme/tiny-llama" and spec.hidden_size == 64


def test_multimodal_text_config(tmp_path: Path) -> None:
    wrapper = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 6,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "vocab_size": 100,
            "max_position_embeddings": 4096,
            "sliding_window": 1024,
        },
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapper))
    spec = load_model(str(path))
    assert spec.architecture == "Gemma3ForConditionalGeneration"
    assert spec.num_sliding_layers == 5 and spec.num_full_layers == 1
    assert spec.tie_word_embeddings and spec.qk_norm and spec.norms_per_layer == 4


def test_read_checkpoint_reports_dtypes(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    write_safetensors(path, {"a": ("BF16", [4, 4]), "b": ("F8_E4M3", [8]), "c": ("U8", [3])})
    summary = read_checkpoint([path])
    assert summary.bytes_by_dtype == {"BF16": 32, "F8_E4M3": 8, "U8": 3}
    assert not summary.all_float


# ---- bad input: one BadInputError naming the file and the field -------------------------------------------


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({k: v for k, v in TINY.items() if k != "hidden_size"}), "'hidden_size'"),
        (json.dumps({**TINY, "num_hidden_layers": "32"}), "'num_hidden_layers' must be an integer"),
        (json.dumps({**TINY, "vocab_size": -5}), "'vocab_size' must be positive"),
        (json.dumps({**TINY, "num_attention_heads": 0}), "'num_attention_heads' must be positive"),
        (json.dumps({**TINY, "intermediate_size": 1.5}), "'intermediate_size' must be an integer"),
        (json.dumps({**TINY, "num_key_value_heads": 3}), "'num_key_value_heads'"),
        (json.dumps({**TINY, "torch_dtype": "float7"}), "'torch_dtype'"),
        (json.dumps({**TINY, "tie_word_embeddings": "yes"}), "'tie_word_embeddings'"),
        (json.dumps({**TINY, "layer_types": ["full_attention"]}), "'layer_types'"),
        (json.dumps({**TINY, "quantization_config": {"bits": 4}}), "quant_method"),
    ],
)
def test_bad_config_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    path = _config(tmp_path, text)
    with pytest.raises(BadInputError) as info:
        load_model(path)
    message = str(info.value)
    assert needle in message and path in message and "\n" not in message


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such file"):
        load_model(str(tmp_path / "nope" / "config.json"))


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"no config\.json"):
        load_model(str(tmp_path))


def test_truncated_safetensors_header(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m")
    raw = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(raw[:100])
    with pytest.raises(BadInputError, match=r"model\.safetensors: truncated or corrupt safetensors header"):
        load_model(str(folder))


def test_safetensors_shorter_than_its_length_field(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m")
    (folder / "model.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(BadInputError, match="truncated safetensors file"):
        load_model(str(folder))


def test_truncated_tensor_data(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    write_safetensors(folder / "model.safetensors", tiny_tensors(TINY), truncate_data=10)
    with pytest.raises(BadInputError, match="truncated"):
        load_model(str(folder))


def test_header_with_bad_entry(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    raw = json.dumps({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(8))
    with pytest.raises(BadInputError, match="tensor 'w'"):
        load_model(str(folder))


def test_index_with_a_missing_shard(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m")
    weight_map = {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(BadInputError, match="missing"):
        load_model(str(folder))


def test_hf_repo_without_snapshots(tmp_path: Path) -> None:
    repo = tmp_path / "models--a--b"
    repo.mkdir()
    with pytest.raises(BadInputError, match="snapshots"):
        load_model(str(repo))


def test_a_safetensors_file_means_its_folder(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "m")
    assert load_model(str(folder / "model.safetensors")).weight_bytes == load_model(str(folder)).weight_bytes


def test_gguf_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    with pytest.raises(BadInputError, match="GGUF"):
        load_model(str(path))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 10_000), flip=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_damaged_safetensors_never_crash(tmp_path: Path, cut: int, flip: int, byte: int) -> None:
    """Any truncation or single-byte corruption either still parses or is one BadInputError."""
    path = tmp_path / "x.safetensors"
    write_safetensors(path, tiny_tensors(TINY))
    raw = bytearray(path.read_bytes())
    raw = raw[: max(0, len(raw) - cut)] if cut % 2 else raw
    if raw:
        raw[flip % len(raw)] = byte
    path.write_bytes(bytes(raw))
    try:
        summary = read_checkpoint([path])
    except BadInputError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
    else:
        assert summary.total_bytes <= len(raw)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 100_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.one_of(st.integers(-2, 300), st.text(max_size=20)), max_size=4),
    st.dictionaries(st.text(max_size=8), st.integers(-2, 8), max_size=3),
)
_KEYS = [
    *TINY,
    "head_dim",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "quantization_config",
    "text_config",
    "attention_bias",
    "ffn_dim",
    "mlp_only_layers",
    "decoder_sparse_step",
    "moe_layer_freq",
    "topk_method",
    "shared_expert_intermediate_size",
    "sliding_window_pattern",
    "num_nextn_predict_layers",
    "enable_bias",
    "mlp_bias",
    "torch_dtype",
    "dtype",
]


@settings(max_examples=300, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4))
def test_any_config_is_a_spec_or_one_bad_input_line(changes: dict[str, Any]) -> None:
    """Whatever a config.json holds, the parser answers a ModelSpec or one BadInputError line."""
    from vramctl.registry.models import spec_from_config

    config = {**TINY, **changes}
    try:
        spec = spec_from_config(config, where="config.json", name="fuzz")
    except BadInputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("config.json")
    else:
        assert spec.param_count > 0 and spec.weight_bytes > 0


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": 5}, "'mlp_only_layers'"),
        ({"num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [1]}, "'mlp_only_layers'"),
        ({"num_experts": 4, "num_experts_per_tok": 8}, "'num_experts_per_tok'"),
        ({"quantization_config": {"quant_method": "awq", "group_size": "x"}}, "'group_size'"),
        ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [0]}}, "'weight_block_size'"),
        ({"kv_lora_rank": 512}, "'qk_rope_head_dim'"),
        ({"text_config": [1]}, "'text_config'"),
    ],
)
def test_bad_moe_mla_quant_fields(extra: dict[str, Any], needle: str) -> None:
    from vramctl.registry.models import spec_from_config

    with pytest.raises(BadInputError, match=needle):
        spec_from_config({**TINY, **extra}, where="config.json", name="x")
