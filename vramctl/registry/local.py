"""A local model: a config.json, a model folder, or a Hugging Face cache repo / snapshot (offline only)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.specs import ModelSpec
from vramctl.core.units import format_bytes
from vramctl.registry._files import read_json_object
from vramctl.registry.models import spec_from_config
from vramctl.registry.safetensors import CheckpointSummary, read_checkpoint

INDEX_FILE = "model.safetensors.index.json"
HF_QUANT_CONFIG = "hf_quant_config.json"
"""NVIDIA ModelOpt exports keep their quantisation here, not in config.json; vLLM reads it when config.json has no
`quantization_config` (ModelOptFp8Config / ModelOptNvFp4Config `get_config_filenames`,
vllm/model_executor/layers/quantization/modelopt.py)."""


def with_hf_quant_config(config: dict[str, Any], quant_file: Path | None) -> dict[str, Any]:
    """`config` with a ModelOpt `hf_quant_config.json` ({"producer": …, "quantization": {"quant_algo": …}})
    folded in as `quantization_config` (quant_method `modelopt`) when config.json has none."""
    if quant_file is None or "quantization_config" in config or not quant_file.is_file():
        return config
    text = config.get("text_config")
    if isinstance(text, dict) and "quantization_config" in text:
        return config
    data = read_json_object(quant_file)
    quant = data.get("quantization")
    if not isinstance(quant, dict) or not quant.get("quant_algo"):
        raise BadInputError(f"{quant_file}: field 'quantization.quant_algo' is missing")
    return {**config, "quantization_config": {"quant_method": "modelopt", **quant}}


@dataclass(frozen=True)
class LocalModel:
    config_path: Path
    folder: Path
    name: str
    """The HF id for a cache snapshot (`org/name`), else the path as given."""


def expand_user(text: str, *, flag: str = "--model") -> Path:
    """`~/x` and `~name/x` as the shell expands them; an unknown user or no home directory (HOME unset and no
    passwd entry, common in containers) is one BadInputError, not RuntimeError("Could not determine home ...")."""
    try:
        return Path(text).expanduser()
    except (RuntimeError, KeyError):
        user = text[1:].split("/", 1)[0]
        who = f"user {user!r} is unknown" if user else "HOME is not set and the user has no home directory"
        raise BadInputError(f"{flag} {text}: cannot expand '~' ({who})") from None


def _exists(path: Path) -> bool:
    """Path.exists() that is False for a name too long for the filesystem (ENAMETOOLONG), not an OSError."""
    try:
        return path.exists()
    except OSError:
        return False


def looks_like_path(text: str) -> bool:
    """A name is a path if it exists, starts like one (`/`, `./`, `~`), or names a .json file."""
    if text.startswith(("/", "./", "../", "~", ".\\")) or text in (".", "..") or text.endswith(".json"):
        return True
    try:
        return Path(text).expanduser().exists()
    except (OSError, RuntimeError, KeyError):
        return False


def hf_cache_dir() -> Path:
    """The hub cache, as huggingface_hub resolves it: HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return expand_user(os.environ[var], flag=var)
    home = os.environ.get("HF_HOME")
    if home:
        return expand_user(home, flag="HF_HOME") / "hub"
    try:
        base = Path.home() / ".cache" / "huggingface"
    except (RuntimeError, KeyError):  # no HOME and no passwd entry: there is no default cache to look in
        base = Path(".cache") / "huggingface"
    return base / "hub"


def find_in_hf_cache(repo_id: str) -> Path | None:
    """`org/name` → `<cache>/models--org--name` when it has been downloaded; never touches the network."""
    if repo_id.count("/") != 1:
        return None
    folder = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    try:
        return folder if folder.is_dir() else None
    except OSError:  # a 5,000-character name: File name too long
        return None


def _snapshot_of(repo_folder: Path) -> Path:
    """Resolve `models--org--name` to its snapshot: refs/main, else the only (or newest) snapshot."""
    snapshots = repo_folder / "snapshots"
    ref = repo_folder / "refs" / "main"
    if ref.is_file():
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            commit = ""
        if commit and (snapshots / commit).is_dir():
            return snapshots / commit
    candidates = (
        sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        if snapshots.is_dir()
        else []
    )
    if not candidates:
        raise BadInputError(f"--model: {repo_folder}: a Hugging Face cache folder without snapshots/")
    return candidates[-1]


def _repo_id_of(folder: Path) -> str | None:
    """`.../models--org--name/snapshots/<hash>` → `org/name`."""
    for part in (folder, *folder.parents):
        if part.name.startswith("models--"):
            return part.name.removeprefix("models--").replace("--", "/", 1)
    return None


def resolve_local(text: str) -> LocalModel:
    path = expand_user(text)
    if not _exists(path):
        raise BadInputError(f"--model {text}: no such file or directory")
    if not path.is_dir():  # a file, or a pipe: `--model <(curl …/config.json)`
        folder = path.parent
        config = path
        if path.suffix == ".safetensors" or path.name == INDEX_FILE:
            config = folder / "config.json"
            if not config.is_file():
                raise BadInputError(f"--model {text}: no config.json beside {path.name} in {folder}")
    else:
        folder = path
        if not (folder / "config.json").is_file() and (
            folder.name.startswith("models--") or (folder / "snapshots").is_dir()
        ):
            folder = _snapshot_of(folder)
        config = folder / "config.json"
        if not config.is_file():
            raise BadInputError(f"--model {text}: no config.json in {folder}")
    repo = _repo_id_of(folder.resolve()) or _repo_id_of(folder)
    return LocalModel(config_path=config, folder=folder, name=repo or text)


def _safetensors_files(folder: Path) -> list[Path]:
    """Shards named by model.safetensors.index.json, else every *.safetensors in the folder."""
    index = folder / INDEX_FILE
    if index.is_file():
        data = read_json_object(index)
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise BadInputError(f"{index}: field 'weight_map' must map tensor names to file names")
        names = sorted(set(weight_map.values()))
        present = [folder / name for name in names if (folder / name).is_file()]
        if present and len(present) != len(names):
            missing = next(name for name in names if not (folder / name).is_file())
            raise BadInputError(
                f"{index}: shard {missing!r} is missing ({len(present)} of {len(names)} present); finish the download"
            )
        return present
    return sorted(folder.glob("*.safetensors"))


def load_local_model(text: str) -> ModelSpec:
    """ModelSpec from a local config.json, reading the safetensors headers beside it when present; a `.gguf`
    file from its own header (`vramctl.registry.gguf_file`)."""
    path = expand_user(text)
    if path.suffix.lower() == ".gguf" and path.is_file():
        from vramctl.registry.gguf_file import load_gguf_model

        return load_gguf_model(path, path.stem)
    local = resolve_local(text)
    config = with_hf_quant_config(read_json_object(local.config_path), local.folder / HF_QUANT_CONFIG)
    where = str(local.config_path)
    files = _safetensors_files(local.folder)
    if not files:
        return spec_from_config(
            config,
            where=where,
            name=local.name,
            sources=(("config", where), ("param_count", "formula (no safetensors files)")),
        )
    # A first pass validates the config and tells us how many decoder layers a serve loads.
    probe = spec_from_config(config, where=where, name=local.name)
    summary: CheckpointSummary = read_checkpoint(files)
    return spec_from_summary(
        config,
        where=where,
        name=local.name,
        probe=probe,
        summary=summary,
        origin=f"safetensors headers of {len(files)} file(s) in {local.folder}",
    )


def spec_from_summary(
    config: Mapping[str, Any],
    *,
    where: str,
    name: str,
    probe: ModelSpec,
    summary: CheckpointSummary,
    origin: str,
) -> ModelSpec:
    """ModelSpec whose weight bytes are the checkpoint's own (its safetensors headers, local or from the Hub).

    `probe` is the config-only spec: it names the decoder layers a serve loads (DeepSeek-V3's MTP layer 61
    and Qwen3-Next / Qwen3.5's `mtp.*` tensors are dropped) and whether a stored lm_head copy is tied (the
    engines' loaders skip it)."""
    summary = summary.without_layers_from(probe.num_hidden_layers)
    if probe.architecture.startswith(("Qwen3Next", "Qwen3_5")):
        # the multi-token-prediction head: vLLM qwen3_next.py / qwen3_5.py load with skip_prefixes=["mtp."]
        summary = summary.without_prefix("mtp.")
    if probe.tie_word_embeddings:
        summary = summary.without_names({"lm_head.weight"})
    unquantised = probe.quantization is None and summary.all_float
    param_count = summary.total_elements if unquantised else probe.param_count
    dtypes = ", ".join(f"{dtype} {format_bytes(size)}" for dtype, size in summary.bytes_by_dtype.items())
    sources = (
        ("config", where),
        ("weight_bytes", f"{origin}: {dtypes}"),
        ("param_count", "safetensors headers" if unquantised else "formula (quantised checkpoint)"),
    )
    return spec_from_config(
        config,
        where=where,
        name=name,
        param_count=param_count,
        weight_bytes=summary.total_bytes,
        sources=sources,
    )
