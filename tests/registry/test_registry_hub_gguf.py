"""GGUF files on the Hub (`vramctl plan ORG/NAME:Q8_0` / `ORG/NAME:FILE.gguf`): the real huggingface_hub reads only
the header by HTTP range requests from a loopback server (fake_hub.py, via HF_ENDPOINT); the summary is cached so
the next run is offline; malformed, missing and ambiguous files are one line and exit 2. No test reaches the
internet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_hub import FakeHub

pytest.importorskip("huggingface_hub")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

H, FF, LAYERS, HEADS, KV, VOCAB = 256, 512, 2, 4, 2, 1000
PADDING = 12 << 20
"""Zero bytes appended after the tensor data, so the file is larger than any header read of it."""


def _write(path: Path) -> tuple[int, int]:
    """A tiny llama-shaped GGUF (Q8_0 linears, F32 norms, F16 embedding); (its tensors' bytes, the file's size)."""
    writer = gguf.GGUFWriter(str(path), "llama")
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
            arr, raw = gguf.quantize(data, qtype), qtype
        total += arr.nbytes
        writer.add_tensor(name, arr, raw_dtype=raw)

    q8 = gguf.GGMLQuantizationType.Q8_0
    add("token_embd.weight", (VOCAB, H), gguf.GGMLQuantizationType.F16)
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", (H,), gguf.GGMLQuantizationType.F32)
        add(f"blk.{i}.attn_q.weight", (H, H), q8)
        add(f"blk.{i}.attn_k.weight", (H * KV // HEADS, H), q8)
        add(f"blk.{i}.attn_v.weight", (H * KV // HEADS, H), q8)
        add(f"blk.{i}.attn_output.weight", (H, H), q8)
        add(f"blk.{i}.ffn_norm.weight", (H,), gguf.GGMLQuantizationType.F32)
        add(f"blk.{i}.ffn_gate.weight", (FF, H), q8)
        add(f"blk.{i}.ffn_up.weight", (FF, H), q8)
        add(f"blk.{i}.ffn_down.weight", (H, FF), q8)
    add("output_norm.weight", (H,), gguf.GGMLQuantizationType.F32)
    add("output.weight", (VOCAB, H), q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with path.open("ab") as f:
        f.write(bytes(PADDING))
    return total, path.stat().st_size


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, int]:
    root = tmp_path_factory.mktemp("repos")
    repo = root / "tiny-org" / "Tiny-Llama-GGUF"
    repo.mkdir(parents=True)
    total, size = _write(repo / "tiny-llama-Q8_0.gguf")
    (repo / "tiny-llama-Q4_K_M.gguf").write_bytes((repo / "tiny-llama-Q8_0.gguf").read_bytes())
    (repo / "tiny-llama-Q4_K_S.gguf").write_bytes((repo / "tiny-llama-Q8_0.gguf").read_bytes())
    (repo / "README.md").write_text("tiny\n")
    bad = root / "tiny-org" / "Broken-GGUF"
    bad.mkdir(parents=True)
    (bad / "broken-Q8_0.gguf").write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    (bad / "notgguf-Q8_0.gguf").write_bytes(b"PK\x03\x04" + bytes(100))
    (bad / "short-Q8_0.gguf").write_bytes((repo / "tiny-llama-Q8_0.gguf").read_bytes()[:200])
    return root, total, size


@pytest.fixture(scope="module")
def hub(repos: tuple[Path, int, int]) -> Iterator[FakeHub]:
    with FakeHub(root=repos[0]) as server:
        yield server


def _env(hub: FakeHub, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def _plan(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", *args, "--gpu", "h100-sxm", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_a_quant_tag_plans_from_the_header_alone_then_offline(
    hub: FakeHub, repos: tuple[Path, int, int], tmp_path: Path
) -> None:
    _, total, size = repos
    env = _env(hub, tmp_path / "hf")
    hub.requests.clear()
    proc = _plan(env, "tiny-org/Tiny-Llama-GGUF:Q8_0")
    assert proc.returncode == 0, proc.stderr
    model = json.loads(proc.stdout)["model"]
    assert model["weight_bytes"] == total  # the tensors' bytes as the header lists them
    gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith(".gguf")]
    assert gets and all(r[2] and r[2].startswith("bytes=0-") for r in gets), hub.requests
    served = sum(min(int(r[2].split("-")[1]) + 1, size) for r in gets)
    assert served < size  # only a prefix of the file, never the whole of it
    assert any("/tree/" in r[1] for r in hub.requests)
    # cached: the same plan with the network off
    again = _plan({**env, "HF_HUB_OFFLINE": "1"}, "tiny-org/Tiny-Llama-GGUF:Q8_0")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["model"] == model


def test_a_file_name_selects_the_file(hub: FakeHub, repos: tuple[Path, int, int], tmp_path: Path) -> None:
    proc = _plan(_env(hub, tmp_path / "hf"), "tiny-org/Tiny-Llama-GGUF:tiny-llama-Q4_K_M.gguf")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("tiny-org/Tiny-Llama-GGUF:Q4_K", "no GGUF file matches"),
        ("tiny-org/Tiny-Llama-GGUF:nope.gguf", "no file 'nope.gguf'"),
        ("tiny-org/Broken-GGUF:broken-Q8_0.gguf", "GGUF"),
        ("tiny-org/Broken-GGUF:notgguf-Q8_0.gguf", "not a GGUF file"),
        ("tiny-org/Broken-GGUF:short-Q8_0.gguf", "truncated"),
        ("tiny-org/Broken-GGUF:Q8_0", "matches 3 files"),
        ("tiny-org/No-Such-GGUF:Q8_0", "no such model repo"),
    ],
)
def test_bad_gguf_repos_are_one_line_and_cache_nothing(
    hub: FakeHub, tmp_path: Path, name: str, words: str
) -> None:
    home = tmp_path / "hf"
    line = _one_error_line(_plan(_env(hub, home), name))
    assert words in line, line
    summaries = [p for p in home.rglob("gguf-*.json") if p.name != "gguf-files.json"]
    assert not summaries, "a failed read must not leave a header summary in the cache"


def test_offline_without_a_cached_header_is_one_line(hub: FakeHub, tmp_path: Path) -> None:
    line = _one_error_line(_plan(_env(hub, tmp_path / "hf", HF_HUB_OFFLINE="1"), "tiny-org/Tiny-Llama-GGUF:Q8_0"))
    assert "HF_HUB_OFFLINE" in line or "offline" in line.lower()
