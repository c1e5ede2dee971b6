"""`--model FILE.gguf`: hyper-parameters and exact weight bytes from a real GGUF header (written here with the
gguf package's own writer), and one-line errors for a malformed file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vramctl.core.errors import BadInputError
from vramctl.registry import load_model

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

H, FF, LAYERS, HEADS, KV, VOCAB = 256, 512, 2, 4, 2, 1000


def _write(path: Path, *, arch: str = "llama", tied: bool = False) -> int:
    """A tiny llama-shaped GGUF: Q8_0 linear weights, F32 norms, F16 embedding; returns the tensors' bytes."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(4096)
    writer.add_embedding_length(H)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV)
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])
    total = 0

    def add(name: str, shape: tuple[int, ...], qtype: object) -> None:
        nonlocal total
        data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F32:
            arr, raw = data, None
        elif qtype == gguf.GGMLQuantizationType.F16:
            arr, raw = data.astype(np.float16), None
        else:
            arr, raw = gguf.quants.quantize(data, qtype), qtype
        writer.add_tensor(name, arr, raw_dtype=raw)
        total += arr.nbytes

    q8 = gguf.GGMLQuantizationType.Q8_0
    add("token_embd.weight", (VOCAB, H), gguf.GGMLQuantizationType.F16)
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", (H,), gguf.GGMLQuantizationType.F32)
        add(f"blk.{i}.attn_q.weight", (H, H), q8)
        add(f"blk.{i}.attn_k.weight", (KV * H // HEADS, H), q8)
        add(f"blk.{i}.attn_v.weight", (KV * H // HEADS, H), q8)
        add(f"blk.{i}.attn_output.weight", (H, H), q8)
        add(f"blk.{i}.ffn_norm.weight", (H,), gguf.GGMLQuantizationType.F32)
        add(f"blk.{i}.ffn_gate.weight", (FF, H), q8)
        add(f"blk.{i}.ffn_up.weight", (FF, H), q8)
        add(f"blk.{i}.ffn_down.weight", (H, FF), q8)
    add("output_norm.weight", (H,), gguf.GGMLQuantizationType.F32)
    if not tied:
        add("output.weight", (VOCAB, H), q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return total


def test_gguf_header_gives_shapes_and_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "tiny-Q8_0.gguf"
    total = _write(path)
    spec = load_model(str(path))
    assert (spec.hidden_size, spec.num_hidden_layers, spec.num_attention_heads) == (H, LAYERS, HEADS)
    assert (
        spec.num_key_value_heads == KV and spec.vocab_size == VOCAB and spec.max_position_embeddings == 4096
    )
    assert spec.weight_bytes == total and spec.quantization == "gguf"
    assert "Q8_0" in dict(spec.sources)["weight_bytes"]
    tied = tmp_path / "tied.gguf"
    _write(tied, tied=True)
    assert load_model(str(tied)).tie_word_embeddings


def test_gguf_plan_runs_and_bad_files_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    _write(path)
    proc = subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", str(path), "--gpu", "l4", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(BadInputError, match=r"not a readable GGUF file|GGUF key"):
        load_model(str(bad))
    other = tmp_path / "other.gguf"
    _write(other, arch="bert")
    with pytest.raises(BadInputError, match="architecture 'bert'"):
        load_model(str(other))
    proc = subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
