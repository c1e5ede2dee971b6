"""Models from the Hub: the real huggingface_hub against a loopback server (fake_hub.py) via HF_ENDPOINT.

No test reaches the internet: HF_ENDPOINT points at 127.0.0.1 and HF_HOME at a temporary folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from vramctl.registry.names import described_suggestion, quant_tags, size_tags

pytest.importorskip("huggingface_hub")

from fake_hub import REPOS, FakeHub


@pytest.fixture(scope="module")
def hub() -> Iterator[FakeHub]:
    with FakeHub() as server:
        yield server


def _env(hub_endpoint: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_ENDPOINT=hub_endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def _plan(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", *args, "--gpu", "h100-sxm", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _header_bytes(repo: str) -> int:
    total = 0
    for header in (REPOS / repo).glob("*.safetensors.header"):
        doc = json.loads(header.read_text())
        total += sum(
            v["data_offsets"][1] - v["data_offsets"][0] for k, v in doc.items() if k != "__metadata__"
        )
    return total


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_sharded_repo_weights_are_the_headers_bytes_then_offline(hub: FakeHub, tmp_path: Path) -> None:
    repo = "NousResearch/Hermes-3-Llama-3.1-8B"
    hub.requests.clear()
    proc = _plan(_env(hub.endpoint, tmp_path), repo)
    assert proc.returncode == 0, proc.stderr
    model = json.loads(proc.stdout)["model"]
    assert model["name"] == repo
    assert model["weight_bytes"] == _header_bytes(repo) == 16_060_522_496
    shard_gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith(".safetensors")]
    assert shard_gets and all(r[2] is not None and r[2].startswith("bytes=") for r in shard_gets)
    # The next run needs no network: the Hub answers nothing (a closed port), offline or not.
    for extra in ({"HF_HUB_OFFLINE": "1"}, {}):
        env = _env("http://127.0.0.1:9", tmp_path, **extra)
        again = _plan(env, repo)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["model"]["weight_bytes"] == model["weight_bytes"]


def test_compressed_tensors_fp8_from_its_own_config_and_header(hub: FakeHub, tmp_path: Path) -> None:
    repo = "RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic"
    proc = _plan(_env(hub.endpoint, tmp_path), repo)
    assert proc.returncode == 0, proc.stderr
    model = json.loads(proc.stdout)["model"]
    assert model["weight_bytes"] == _header_bytes(repo)
    assert model["quantization"] == "compressed-tensors"


def test_offline_with_nothing_cached_names_the_download_command(hub: FakeHub, tmp_path: Path) -> None:
    # A name that is not `<bundled model><quantisation marker>`: one line naming the download command.
    for args, extra in ((["--offline"], {}), ([], {"HF_HUB_OFFLINE": "1"})):
        hub.requests.clear()
        line = _one_error_line(_plan(_env(hub.endpoint, tmp_path, **extra), "NousResearch/Hermes-3-Llama-3.1-8B", *args))
        assert "hf download NousResearch/Hermes-3-Llama-3.1-8B config.json" in line
        assert hub.requests == []


def test_offline_a_quantised_name_of_a_bundled_base_is_derived_then_online_is_exact(
    hub: FakeHub, tmp_path: Path
) -> None:
    """Offline, RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic is planned from the bundled Llama-3.2-1B-Instruct with
    llm-compressor's FP8_DYNAMIC layout and says so; online the Hub's own config and headers win (exact bytes)."""
    repo = "RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic"
    for args, extra in ((["--offline"], {}), ([], {"HF_HUB_OFFLINE": "1"})):
        hub.requests.clear()
        proc = _plan(_env(hub.endpoint, tmp_path, **extra), repo, *args)
        assert proc.returncode == 0, proc.stderr
        assert hub.requests == []
        model = json.loads(proc.stdout)["model"]
        derived = model["derived_from"]
        assert derived["base"] == "meta-llama/Llama-3.2-1B-Instruct" and derived["marker"] == "FP8-dynamic"
        assert "offline" in derived["why_config_unavailable"]
        assert f"hf download {repo} config.json" in derived["exact_numbers"]
        # within the band of the real checkpoint's header bytes
        assert abs(model["weight_bytes"] - _header_bytes(repo)) <= derived["weight_band_bytes"]
    online = _plan(_env(hub.endpoint, tmp_path), repo)
    assert online.returncode == 0, online.stderr
    model = json.loads(online.stdout)["model"]
    assert "derived_from" not in model and model["weight_bytes"] == _header_bytes(repo)


def test_gated_repo_needs_a_token(hub: FakeHub, tmp_path: Path) -> None:
    line = _one_error_line(_plan(_env(hub.endpoint, tmp_path), "gated-org/Gated-1B"))
    assert "gated" in line and "HF_TOKEN" in line
    ok = _plan(_env(hub.endpoint, tmp_path, HF_TOKEN="hf_fake_token"), "gated-org/Gated-1B")
    assert ok.returncode == 0, ok.stderr


def test_revisions(hub: FakeHub, tmp_path: Path) -> None:
    repo = "NousResearch/Hermes-3-Llama-3.1-8B"
    env = _env(hub.endpoint, tmp_path)
    assert _plan(env, f"{repo}@v1.0").returncode == 0
    assert _plan(env, repo, "--revision", "v1.0").returncode == 0
    assert (
        tmp_path / "hub" / "models--NousResearch--Hermes-3-Llama-3.1-8B" / "snapshots" / ("1" * 40)
    ).is_dir()
    assert "revision 'v2' not found" in _one_error_line(_plan(env, f"{repo}@v2"))
    assert "give one revision" in _one_error_line(_plan(env, f"{repo}@v1.0", "--revision", "main"))
    served = subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", "--json", "--", "vllm", "serve", repo, "--revision", "v2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "revision 'v2' not found" in _one_error_line(served)


@pytest.mark.parametrize(
    ("repo", "words"),
    [
        ("bad-org/malformed-config", "not valid JSON"),
        ("bad-org/huge-config", "100,000,000 bytes"),
        ("bad-org/no-config", "has no config.json"),
        ("bad-org/diffusers-unet", "not a transformers model config"),
        ("bad-org/malformed-header", "safetensors header is malformed"),
        ("bad-org/inconsistent-header", "offsets say"),
        ("nobody/no-such-model", "no such model repo"),
    ],
)
def test_bad_repos_one_line_exit_2_nothing_poisoned(
    hub: FakeHub, tmp_path: Path, repo: str, words: str
) -> None:
    hub.requests.clear()
    line = _one_error_line(_plan(_env(hub.endpoint, tmp_path), repo))
    assert words in line and repo in line
    snapshot = tmp_path / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots"
    if words in ("not valid JSON", "not a transformers model config", "100,000,000 bytes"):
        assert not list(snapshot.glob("*/config.json"))  # the next run fetches it again
    if repo == "bad-org/huge-config":
        assert not [r for r in hub.requests if r[0] == "GET" and r[1].endswith("config.json")]
    assets = tmp_path / "assets" / "vramctl"
    assert not list(assets.rglob("*.json"))


def test_a_repo_without_safetensors_plans_from_the_formula(hub: FakeHub, tmp_path: Path) -> None:
    proc = _plan(_env(hub.endpoint, tmp_path), "bad-org/bin-only")
    assert proc.returncode == 0, proc.stderr


def test_timeout_and_no_network_are_one_line(hub: FakeHub, tmp_path: Path) -> None:
    env = _env(hub.endpoint, tmp_path, HF_HUB_ETAG_TIMEOUT="1", HF_HUB_DOWNLOAD_TIMEOUT="1")
    assert "timed out" in _one_error_line(_plan(env, "slow-org/Slow-1B"))
    line = _one_error_line(_plan(_env("http://127.0.0.1:9", tmp_path), "Qwen/Qwen2.5-72B-Instruct-Turbo-AWQ"))
    assert "cannot reach" in line and "hf download Qwen/Qwen2.5-72B-Instruct-Turbo-AWQ config.json" in line
    # "did you mean" says that the bundled 16-bit 72B is another quantisation.
    assert "Qwen/Qwen2.5-72B-Instruct (16-bit, not awq: another quantisation)" in line
    # The AWQ 72B itself, with no network, is planned from the bundled 72B in AutoAWQ's layout, saying why.
    proc = _plan(_env("http://127.0.0.1:9", tmp_path), "Qwen/Qwen2.5-72B-Instruct-AWQ")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["model"]["quantization"] == "awq" and out["model"]["derived_from"]["base"] == "Qwen/Qwen2.5-72B-Instruct"
    assert "cannot be reached" in out["model"]["derived_from"]["why_config_unavailable"]
    assert out["warnings"][0].startswith("DERIVED, NOT READ: Qwen/Qwen2.5-72B-Instruct-AWQ")


def test_a_corrupt_cached_header_summary_is_fetched_again(hub: FakeHub, tmp_path: Path) -> None:
    repo = "RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic"
    env = _env(hub.endpoint, tmp_path)
    assert _plan(env, repo).returncode == 0
    (asset,) = (tmp_path / "assets" / "vramctl").rglob("safetensors-headers.json")
    asset.write_text('{"format": 1, "files": {"x": {"t": ["BF16", [2], 99]}}}')
    again = _plan(env, repo)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["model"]["weight_bytes"] == _header_bytes(repo)


def test_bundled_plan_never_imports_huggingface_hub() -> None:
    code = (
        "import sys\n"
        "from vramctl.cli.main import main\n"
        "try:\n    main(['plan', 'llama-3-8b', '--json'])\nexcept SystemExit:\n    pass\n"
        "assert 'huggingface_hub' not in sys.modules, 'imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_did_you_mean_names_another_quantisation_or_size() -> None:
    assert quant_tags("Qwen/Qwen2.5-72B-Instruct-AWQ") == {"awq"}
    assert quant_tags("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic") == {"fp8"}
    assert size_tags("Qwen/Qwen3-30B-A3B-Instruct-2507") == {"30b", "a3b"}
    assert (
        described_suggestion("Qwen2.5-72B-Instruct-AWQ", "Qwen/Qwen2.5-72B-Instruct-AWQ")
        == "Qwen/Qwen2.5-72B-Instruct-AWQ"
    )
    text = described_suggestion("Qwen/Qwen2.5-72B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct")
    assert "another quantisation" in text and "another size" in text


def test_modelopt_quantisation_from_hf_quant_config(hub: FakeHub, tmp_path: Path) -> None:
    repo = "nvidia/Llama-3.2-1B-Instruct-FP8"
    proc = _plan(_env(hub.endpoint, tmp_path), repo)
    assert proc.returncode == 0, proc.stderr
    model = json.loads(proc.stdout)["model"]
    assert model["quantization"] == "modelopt" and model["weight_bytes"] == _header_bytes(repo)
    # cached: no request at all on the next run, the quantisation still read
    again = _plan(_env("http://127.0.0.1:9", tmp_path), repo)
    assert again.returncode == 0 and json.loads(again.stdout)["model"]["quantization"] == "modelopt"


def test_local_folder_reads_hf_quant_config(tmp_path: Path) -> None:
    from vramctl.registry import load_model

    folder = tmp_path / "llama-fp8"
    folder.mkdir()
    source = REPOS / "nvidia" / "Llama-3.2-1B-Instruct-FP8"
    for name in ("config.json", "hf_quant_config.json"):
        (folder / name).write_text((source / name).read_text())
    spec = load_model(str(folder))
    assert spec.quantization == "modelopt" and spec.quant_bits == 8
