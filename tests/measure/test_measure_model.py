"""The reference model: shapes, exact weight bytes, TP shards, every attention / MLP kind runs."""

from __future__ import annotations

import math

import pytest
from measure_helpers import tiny_dense, tiny_mla, tiny_moe, tiny_sliding

from vramctl.core import kv as kvmath
from vramctl.core.errors import BadInputError
from vramctl.core.specs import ModelSpec
from vramctl.measure.model import ReferenceModel, Shard, decode_inputs, layer_elements, split_tokens

torch = pytest.importorskip("torch")


def test_split_tokens_like_vllm_dummy_run() -> None:
    assert split_tokens(8192, 256) == [32] * 256
    assert split_tokens(10, 3) == [3, 3, 4]
    assert split_tokens(5, 256) == [1] * 5  # min(max_num_seqs, tokens) sequences
    assert sum(split_tokens(2049, 128)) == 2049


def test_dense_weight_bytes_are_exact() -> None:
    spec = tiny_dense()
    model = ReferenceModel(spec, device="cpu")
    # embed + lm_head + final norm + per layer (qkv, o, gate_up, down, 2 norms); bf16
    per_layer = (4 + 2 * 2) * 64 * 256 + 256 * 256 + 2 * 512 * 256 + 256 * 512 + 2 * 256
    expected = 2 * (2 * 1024 * 256 + 256 + 4 * per_layer)
    assert model.weight_bytes() == expected
    assert all(layer_elements(spec, model.shard, i) == per_layer for i in range(4))


def test_tied_embeddings_counted_once() -> None:
    untied = ReferenceModel(tiny_dense(), device="cpu").weight_bytes()
    tied = ReferenceModel(tiny_dense(tie_word_embeddings=True), device="cpu").weight_bytes()
    assert untied - tied == 1024 * 256 * 2


@pytest.mark.parametrize("make", [tiny_dense, tiny_moe, tiny_mla, tiny_sliding], ids=lambda f: f.__name__)
def test_forward_sampler_decode_run(make: object) -> None:
    spec: ModelSpec = make()  # type: ignore[operator]
    model = ReferenceModel(spec, device="cpu", dtype="float32")  # bf16 element-wise ops are slow on CPUs
    lens = split_tokens(96, 5)
    ids = torch.randint(0, spec.vocab_size, (96,))
    hidden = model.forward(ids, lens)
    assert hidden.shape == (5, spec.hidden_size)
    logits = model.compute_logits(hidden)
    assert logits.shape == (5, spec.vocab_size)
    sampled = model.sampler_warmup(logits)
    assert sampled.shape == (5,) and int(sampled.max()) < spec.vocab_size
    caches = model.allocate_kv_cache(4, 16)
    out = model.decode_step(kv_caches=caches, **decode_inputs(model, 3, 4, 16))
    assert out.shape == (3, spec.vocab_size)
    assert bool(torch.isfinite(out.float()).all())
    # the decode step wrote its new token into the cache
    assert any(bool(c.abs().sum() > 0) for c in caches)


def test_kv_cache_bytes_match_vllm_page_sizes() -> None:
    for spec in (tiny_dense(), tiny_mla()):
        model = ReferenceModel(spec, device="cpu")
        caches = model.allocate_kv_cache(3, 16, touch=False)
        total = sum(c.numel() * c.element_size() for c in caches)
        assert total == 3 * kvmath.bytes_per_block(spec, block_size=16)


def test_moe_and_mla_layers() -> None:
    spec = tiny_mla()
    model = ReferenceModel(spec, device="cpu")
    assert not model.layers[0].moe  # first_k_dense_replace = 1
    assert all(layer.moe for layer in model.layers[1:])
    assert "kv_b" in model.layers[0].w and "qkv" not in model.layers[0].w
    assert model.kv_cache_shape(2, 16) == (2, 16, 64 + 16)


def test_tp_shards() -> None:
    spec = tiny_dense()
    shard = Shard.of(spec, tp_rank=1, tp_size=2)
    assert (shard.heads, shard.kv_heads, shard.intermediate, shard.vocab) == (2, 1, 256, 512)
    # more ranks than KV heads: one replicated head per rank (vllm.md §3.2)
    assert Shard.of(spec, tp_size=4).kv_heads == 1
    one = ReferenceModel(spec, device="cpu").weight_bytes()
    half = ReferenceModel(spec, device="cpu", tp_size=2).weight_bytes()
    assert math.isclose(half, one / 2, rel_tol=0.01)


def test_bad_shapes_are_bad_input() -> None:
    with pytest.raises(BadInputError, match="--tensor-parallel-size 3"):
        Shard.of(tiny_dense(), tp_size=3)
    with pytest.raises(BadInputError, match="--num-layers"):
        Shard.of(tiny_dense(), num_layers=9)


def test_num_layers_slice() -> None:
    model = ReferenceModel(tiny_dense(), device="cpu", num_layers=1)
    assert len(model.layers) == 1


def test_sliding_window_mask_limits_attention() -> None:
    spec = tiny_sliding()
    model = ReferenceModel(spec, device="cpu", dtype="float32")
    layer = model.layers[0]
    assert layer.sliding
    q = torch.randn(64, 4, 64)
    k = torch.randn(64, 2, 64)
    v = torch.zeros(64, 2, 64)
    v[0] = 1.0  # only the first token carries a value
    out = model._attend(layer, q, k, v, [64])
    # token 40 is beyond the 32-token window of token 0: it cannot see it
    assert float(out[40].abs().max()) == 0.0
    assert float(out[10].abs().max()) > 0.0


@pytest.mark.parametrize(("quant", "matrix_bytes"), [("fp8", 1.0), ("awq", 0.5), ("mxfp4", 0.5)])
def test_quantised_checkpoints_store_their_matrices_small(quant: str, matrix_bytes: float) -> None:
    from vramctl.measure.model import layer_weight_bytes, weight_storage

    spec = tiny_moe()
    spec = type(spec)(**{**spec.__dict__, "quantization": quant})
    assert weight_storage(spec) in ("fp8", "int4")
    model = ReferenceModel(spec, device="cpu", dtype="float32")
    dense = ReferenceModel(tiny_moe(), device="cpu", dtype="float32")
    # embeddings, LM head, norms and router stay in the model dtype; projection and expert matrices shrink
    edge = 4 * (2 * 1024 * 256 + 256)
    shards = model.shard
    expected = edge + sum(layer_weight_bytes(spec, shards, i, 4) for i in range(4))
    assert model.weight_bytes() == expected
    assert model.weight_bytes() < dense.weight_bytes() * (matrix_bytes / 4 + 0.25)
    lens = split_tokens(64, 4)
    hidden = model.forward(torch.randint(0, 1024, (64,)), lens)
    assert hidden.shape == (4, 256) and bool(torch.isfinite(hidden.float()).all())
    caches = model.allocate_kv_cache(4, 16)
    out = model.decode_step(kv_caches=caches, **decode_inputs(model, 2, 4, 16))
    assert out.shape == (2, 1024)


def test_unknown_quantisation_keeps_the_model_dtype() -> None:
    from vramctl.measure.model import weight_storage

    assert weight_storage(tiny_dense()) is None
    assert weight_storage(tiny_dense(quantization="squeezellm")) is None


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-30B-A3B-FP8",
        "deepseek-ai/DeepSeek-V3",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
    ],
)
def test_reference_weights_match_the_checkpoint(name: str) -> None:
    """The tensors the reference model would build (never allocated here) weigh what the checkpoint does."""
    from vramctl.measure.model import layer_weight_bytes
    from vramctl.registry import load_model

    spec = load_model(name)
    shard = Shard.of(spec)
    edges = (
        spec.vocab_size * spec.hidden_size * 2 * (1 if spec.tie_word_embeddings else 2) + spec.hidden_size * 2
    )
    ours = edges + sum(layer_weight_bytes(spec, shard, i, 2) for i in range(spec.num_hidden_layers))
    assert abs(ours / spec.weight_bytes - 1) < 0.005, (ours, spec.weight_bytes)


def test_fp8_matrices_are_made_in_place_near_the_init_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """FP8 weights are written as bytes in their own storage (no model-dtype temporary), ≈ 0.02 in size."""
    spec = tiny_moe()
    spec = type(spec)(**{**spec.__dict__, "quantization": "fp8"})
    model = ReferenceModel(spec, device="cpu", dtype="float32")
    w13 = model.layers[0].w["w13"]
    assert w13.dtype == torch.float8_e4m3fn
    assert float(w13.float().abs().min()) == float(w13.float().abs().max()) == 0.01953125
    # the device path (random bytes, sign kept, exponent field forced to 1) on a CPU tensor
    t = torch.empty(4096, dtype=torch.float8_e4m3fn)
    gen = torch.Generator().manual_seed(1)
    t.view(torch.uint8).random_(0, 256, generator=gen).bitwise_and_(0x87).bitwise_or_(0x08)
    values = t.float()
    assert bool(torch.isfinite(values).all())
    assert float(values.abs().min()) > 0.015 and float(values.abs().max()) < 0.03
    assert 0.4 < float((values < 0).float().mean()) < 0.6
