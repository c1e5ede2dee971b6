"""Models from the Hugging Face Hub: config.json and the safetensors headers, never the weights.

Everything goes through `huggingface_hub` (imported only here, and only when a repo is not bundled):

- `config.json` with `hf_hub_download` (so it lands in the HF cache, honours `HF_TOKEN` / the cached login,
  `HF_ENDPOINT`, `HF_HUB_OFFLINE`, a revision), after a HEAD request that refuses a "config" larger than
  `MAX_CONFIG_BYTES` before any byte of it is downloaded;
- the safetensors headers with `get_safetensors_metadata` (HTTP range requests: the first 100 kB of each shard,
  https://huggingface.co/docs/safetensors/index#format), summarised into `<HF_HOME>/assets/vramctl/...`
  (`huggingface_hub.cached_assets_path`) under the commit they were read at, so the next run needs no network.

A repo already in the cache is read without contacting the Hub (pin another commit with `--revision`). What fails
validation is removed from the cache again, so a malformed or truncated file never poisons the next run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramctl.core.atomic import write_text_atomic
from vramctl.core.errors import BadInputError, ConfigUnavailableError
from vramctl.core.specs import ModelSpec
from vramctl.registry.safetensors import ELEMENT_BYTES, CheckpointSummary, TensorInfo, summarize

MAX_CONFIG_BYTES = 8 << 20
"""config.json files are kilobytes (the largest, with label maps, a few hundred); anything above 8 MiB is refused
before it is downloaded."""

HEADERS_ASSET = "safetensors-headers.json"
_ASSET_FORMAT = 1
_REPO_PART = r"[A-Za-z0-9](?:[\w.-]{0,94}[\w])?"
_REPO_ID = re.compile(rf"^{_REPO_PART}/{_REPO_PART}$")
_REVISION = re.compile(r"^[\w./-]{1,200}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    revision: str | None
    """A branch, tag or commit; None is the repo's default branch (main)."""

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")


def parse_ref(text: str, revision: str | None = None) -> HubRef | None:
    """`org/name`, `org/name@rev` → HubRef; None when the text is not shaped like a Hub repo id.

    A revision both in the name and in `--revision` must agree."""
    name, _, at = text.strip().partition("@")
    if not _REPO_ID.match(name) or "--" in name or ".." in name:
        return None
    rev = at or None
    if revision is not None and revision.strip():
        given = revision.strip()
        if rev is not None and rev != given:
            raise BadInputError(f"--revision {given}: the model name says @{rev}; give one revision")
        rev = given
    if rev is not None and (not _REVISION.match(rev) or ".." in rev):
        raise BadInputError(f"{text}: revision {rev!r} is not a branch, tag or commit name")
    return HubRef(name, rev)


def hub_available() -> bool:
    """huggingface_hub is installed (found without importing it)."""
    import importlib.util

    return importlib.util.find_spec("huggingface_hub") is not None


def offline_from_env() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set to 1 / true / yes / on, as huggingface_hub reads it."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _cache_dir() -> str:
    """The hub cache as the environment names it now (huggingface_hub reads it once, at import)."""
    from vramctl.registry.local import hf_cache_dir

    return str(hf_cache_dir())


def _assets_root() -> Path:
    """HF_ASSETS_CACHE, else HF_HOME/assets (huggingface_hub's rule, read now)."""
    from vramctl.registry.local import expand_user

    if os.environ.get("HF_ASSETS_CACHE"):
        return expand_user(os.environ["HF_ASSETS_CACHE"], flag="HF_ASSETS_CACHE")
    home = os.environ.get("HF_HOME")
    if home:
        return expand_user(home, flag="HF_HOME") / "assets"
    return expand_user("~/.cache/huggingface", flag="HOME") / "assets"


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _download_hint(ref: HubRef) -> str:
    rev = f" --revision {ref.revision}" if ref.revision else ""
    return (
        f"download only its config on a connected machine with `hf download {ref.repo_id} config.json{rev}` "
        "(it lands in the HF cache) or pass a local config.json / model folder"
    )


def _import_hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise ConfigUnavailableError(
            "reading models from the Hugging Face Hub needs huggingface_hub: `pip install huggingface_hub`, "
            "or pass a local config.json / model folder",
            "huggingface_hub is not installed",
        ) from None
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    return huggingface_hub


def _hub_error(exc: BaseException, ref: HubRef, what: str) -> BadInputError:
    """One line naming what failed and what to do, for every failure huggingface_hub raises."""
    from huggingface_hub import errors

    name = type(exc).__name__
    page = f"{_endpoint()}/{ref.repo_id}"
    if isinstance(exc, errors.GatedRepoError):
        token = "HF_TOKEN is set but not granted" if os.environ.get("HF_TOKEN") else "no HF_TOKEN / login"
        return BadInputError(
            f"{ref}: a gated repo ({token}): accept its terms on {page}, then `export HF_TOKEN=hf_…` "
            "(or `hf auth login`); or pass a local config.json"
        )
    if isinstance(exc, errors.RepositoryNotFoundError):
        return BadInputError(
            f"{ref}: no such model repo on {_endpoint()} (check the spelling; a private repo needs HF_TOKEN); "
            "or pass a local config.json / model folder"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return BadInputError(
            f"{ref}: revision {ref.revision!r} not found in {page} (a branch, tag or commit)"
        )
    if isinstance(exc, errors.OfflineModeIsEnabled) or (
        isinstance(exc, errors.LocalEntryNotFoundError) and offline_from_env()
    ):
        return BadInputError(
            f"{ref}: {what} is not in the HF cache and HF_HUB_OFFLINE is set; " + _download_hint(ref)
        )
    if isinstance(exc, errors.LocalEntryNotFoundError):
        return BadInputError(
            f"{ref}: {what} is not in the HF cache and the Hub cannot be reached; " + _download_hint(ref)
        )
    if isinstance(exc, errors.EntryNotFoundError):
        return BadInputError(
            f"{ref}: the repo has no {what} (not a transformers checkpoint vLLM serves: a GGUF-, diffusers- or "
            "adapter-only repo?); pass the base model, or a local config.json"
        )
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return BadInputError(
            f"{ref}: the Hub answered HTTP {status or '?'} for {what}; retry later, or {_download_hint(ref)}"
        )
    if isinstance(exc, PermissionError):
        return BadInputError(
            f"{ref}: cannot write the HF cache ({exc.filename or _cache_dir()}: permission denied); point HF_HOME "
            "or HF_HUB_CACHE at a writable folder, or pass a local config.json"
        )
    if isinstance(exc, TimeoutError) or "Timeout" in name:
        return BadInputError(
            f"{ref}: {what} timed out from {_endpoint()} (raise HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT, "
            f"seconds); or {_download_hint(ref)}"
        )
    reason = str(exc).splitlines()[0][:160] if str(exc) else name
    return BadInputError(f"{ref}: cannot reach {_endpoint()} for {what} ({reason}); " + _download_hint(ref))


def _unavailable_reason(exc: BaseException) -> str | None:
    """Why config.json could not be had, in a few words, when the failure says nothing about the checkpoint itself
    (offline, no network, a timeout, HTTP 401 / 403 / 404 / 5xx); None for a failure that does (a revision that does
    not exist, a repo without config.json, an unwritable cache)."""
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        return "a gated repo and no token granted (HTTP 401 / 403)"
    if isinstance(exc, errors.RepositoryNotFoundError):
        return "no such repo on the Hub, or private (HTTP 401 / 404)"
    if isinstance(exc, errors.RevisionNotFoundError):
        return None
    if isinstance(exc, errors.OfflineModeIsEnabled) or (
        isinstance(exc, errors.LocalEntryNotFoundError) and offline_from_env()
    ):
        return "offline (HF_HUB_OFFLINE is set) and not in the HF cache"
    if isinstance(exc, errors.LocalEntryNotFoundError):
        return "the Hub cannot be reached and the config is not in the HF cache"
    if isinstance(exc, errors.EntryNotFoundError | PermissionError):
        return None
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return f"the Hub answered HTTP {status or '?'}"
    if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__:
        return "the Hub timed out"
    return "the Hub cannot be reached"


def _config_error(exc: BaseException, ref: HubRef) -> BadInputError:
    """`_hub_error` for config.json, as a ConfigUnavailableError when the config simply could not be had."""
    error = _hub_error(exc, ref, "config.json")
    reason = _unavailable_reason(exc)
    return ConfigUnavailableError(str(error), reason) if reason else error


_HUB_FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    TimeoutError,
    ValueError,
    RuntimeError,
)


def _network_failures() -> tuple[type[BaseException], ...]:
    """The exception types a fetch can raise: huggingface_hub's and its HTTP client's (httpx or requests)."""
    found: list[type[BaseException]] = list(_HUB_FAILURES)
    from huggingface_hub import errors

    found.extend(
        getattr(errors, n)
        for n in (
            "HfHubHTTPError",
            "EntryNotFoundError",
            "SafetensorsParsingError",
            "NotASafetensorsRepoError",
            "OfflineModeIsEnabled",
        )
        if hasattr(errors, n)
    )
    for module_name in ("httpx", "httpx2", "requests"):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        for attr in ("HTTPError", "TransportError", "RequestException", "TimeoutException", "InvalidURL"):
            cls = getattr(module, attr, None)
            if isinstance(cls, type) and issubclass(cls, BaseException):
                found.append(cls)
    return tuple(found)


def _remove_cached(path: Path) -> None:
    """Drop a downloaded file from the HF cache: the snapshot link and the blob it points to."""
    try:
        blob = path.resolve()
        path.unlink(missing_ok=True)
        if blob != path and blob.parent.name == "blobs":
            blob.unlink(missing_ok=True)
    except OSError:
        pass


def _config_path(hub: Any, ref: HubRef, offline: bool) -> tuple[Path, bool]:
    """(config.json in the HF cache, whether it was fetched now). Cached first, without touching the network."""
    from huggingface_hub import errors

    failures = _network_failures()
    try:
        return Path(
            hub.hf_hub_download(
                ref.repo_id,
                "config.json",
                revision=ref.revision,
                local_files_only=True,
                cache_dir=_cache_dir(),
            )
        ), False
    except errors.LocalEntryNotFoundError:
        if offline:
            where = "HF_HUB_OFFLINE is set" if offline_from_env() else "--offline is set"
            raise ConfigUnavailableError(
                f"{ref}: config.json is not in the HF cache and {where}; " + _download_hint(ref),
                f"offline ({where}) and not in the HF cache",
            ) from None
    except failures as exc:
        raise _config_error(exc, ref) from None
    try:
        url = hub.hf_hub_url(ref.repo_id, "config.json", revision=ref.revision, endpoint=_endpoint())
        meta = hub.get_hf_file_metadata(url)
        if meta.size is not None and meta.size > MAX_CONFIG_BYTES:
            raise BadInputError(
                f"{ref}: its config.json is {meta.size:,} bytes, over the {MAX_CONFIG_BYTES >> 20} MiB a config can "
                "be; not downloaded (pass a local config.json if it is right)"
            )
        path = Path(
            hub.hf_hub_download(
                ref.repo_id,
                "config.json",
                revision=ref.revision,
                cache_dir=_cache_dir(),
                endpoint=_endpoint(),
            )
        )
    except BadInputError:
        raise
    except failures as exc:
        raise _config_error(exc, ref) from None
    if path.stat().st_size > MAX_CONFIG_BYTES:  # a server that did not say the size in its HEAD answer
        _remove_cached(path)
        raise BadInputError(
            f"{ref}: its config.json is over {MAX_CONFIG_BYTES >> 20} MiB; removed from the cache"
        )
    return path, True


def cached_config_path(ref: HubRef) -> Path | None:
    """config.json of `ref` in the HF cache (no network), or None."""
    hub = _import_hub()
    from huggingface_hub import errors

    try:
        return Path(
            hub.hf_hub_download(
                ref.repo_id,
                "config.json",
                revision=ref.revision,
                local_files_only=True,
                cache_dir=_cache_dir(),
            )
        )
    except (errors.LocalEntryNotFoundError, OSError, ValueError):
        return None


def _quant_config_path(hub: Any, ref: HubRef, config: Mapping[str, Any], offline: bool) -> Path | None:
    """ModelOpt's hf_quant_config.json beside a config.json without `quantization_config` (a few hundred bytes;
    None when the repo has none or it cannot be fetched: the safetensors headers still give exact bytes)."""
    from huggingface_hub import errors

    if "quantization_config" in config:
        return None
    for local_only in (True, False) if not offline else (True,):
        try:
            return Path(
                hub.hf_hub_download(
                    ref.repo_id,
                    "hf_quant_config.json",
                    revision=ref.revision,
                    local_files_only=local_only,
                    cache_dir=_cache_dir(),
                    endpoint=_endpoint(),
                )
            )
        except errors.LocalEntryNotFoundError:
            continue
        except _network_failures():
            return None
    return None


def _commit_of(config_path: Path, ref: HubRef) -> str:
    """The snapshot folder's name (`.../snapshots/<commit>/config.json`), else the revision given."""
    parent = config_path.parent.name
    if _COMMIT.match(parent):
        return parent
    return ref.revision or "main"


def _assets_dir(hub: Any, ref: HubRef, commit: str) -> Path:
    return Path(
        hub.cached_assets_path(
            library_name="vramctl", namespace=ref.repo_id.replace("/", "--"), subfolder=commit
        )
    )


def _valid_tensor(name: Any, dtype: Any, shape: Any, nbytes: Any, where: str) -> TensorInfo:
    if not isinstance(name, str) or not isinstance(dtype, str):
        raise BadInputError(f"{where}: a tensor entry without a string name and dtype")
    if not isinstance(shape, list | tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise BadInputError(
            f"{where}: tensor {name!r}: shape must be a list of non-negative integers, got {shape!r}"
        )
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise BadInputError(f"{where}: tensor {name!r}: data_offsets must be [begin, end] with begin <= end")
    element = ELEMENT_BYTES.get(dtype)
    if element is not None and math.prod(shape) * element != nbytes:
        raise BadInputError(
            f"{where}: tensor {name!r}: shape {list(shape)} × {dtype} is {math.prod(shape) * element} bytes, "
            f"offsets say {nbytes}"
        )
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes)


def _summary_from_asset(data: Mapping[str, Any], where: str) -> CheckpointSummary:
    files = data.get("files")
    if data.get("format") != _ASSET_FORMAT or not isinstance(files, dict):
        raise BadInputError(f"{where}: not a vramctl header summary (format {_ASSET_FORMAT})")
    tensors: list[TensorInfo] = []
    for file_name, entries in files.items():
        if not isinstance(entries, dict):
            raise BadInputError(f"{where}: file {file_name!r}: expected an object of tensors")
        for name, entry in entries.items():
            if not isinstance(entry, list) or len(entry) != 3:
                raise BadInputError(f"{where}: tensor {name!r}: expected [dtype, shape, bytes]")
            tensors.append(_valid_tensor(name, entry[0], entry[1], entry[2], where))
    return summarize(tuple(Path(f) for f in sorted(files)), tensors)


def _read_asset(path: Path) -> CheckpointSummary | None:
    """The cached header summary; None (and removed) when absent or unreadable, so it is fetched again."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise BadInputError("not an object")
        return _summary_from_asset(data, str(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, BadInputError, RecursionError):
        path.unlink(missing_ok=True)
        return None


def _fetch_headers(hub: Any, ref: HubRef, commit: str) -> tuple[CheckpointSummary, dict[str, Any]] | None:
    """Every shard's header by range requests; None when the repo has no safetensors (a .bin / GGUF repo)."""
    from huggingface_hub import errors

    rev = commit if _COMMIT.match(commit) else ref.revision
    try:
        # get_safetensors_metadata fetches the shard index with hf_hub_download into the library's default cache
        # folder; HfApi(endpoint=...) and the env read now keep a changed HF_ENDPOINT / HF_HOME honoured.
        meta = hub.HfApi(endpoint=_endpoint()).get_safetensors_metadata(ref.repo_id, revision=rev)
    except errors.NotASafetensorsRepoError:
        return None
    except errors.SafetensorsParsingError as exc:
        raise BadInputError(
            f"{ref}: a safetensors header is malformed ({str(exc).splitlines()[0][:160]})"
        ) from None
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInputError(
            f"{ref}: a safetensors header or the shard index is malformed ({type(exc).__name__})"
        ) from None
    except _network_failures() as exc:
        raise _hub_error(exc, ref, "the safetensors headers") from None
    where = f"{ref} safetensors headers"
    files: dict[str, dict[str, list[Any]]] = {}
    tensors: list[TensorInfo] = []
    try:
        for file_name, file_meta in sorted(meta.files_metadata.items()):
            entries: dict[str, list[Any]] = {}
            for name, info in file_meta.tensors.items():
                offsets = list(info.data_offsets)
                if len(offsets) != 2 or not all(isinstance(o, int) for o in offsets):
                    raise BadInputError(
                        f"{where}: {file_name}: tensor {name!r}: data_offsets must be two integers"
                    )
                tensor = _valid_tensor(
                    name, info.dtype, list(info.shape), offsets[1] - offsets[0], f"{where}: {file_name}"
                )
                tensors.append(tensor)
                entries[name] = [tensor.dtype, list(tensor.shape), tensor.nbytes]
            files[file_name] = entries
    except (AttributeError, TypeError, ValueError) as exc:
        raise BadInputError(f"{where}: malformed ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not tensors:
        raise BadInputError(f"{where}: no tensors in the headers")
    summary = summarize(tuple(Path(f) for f in sorted(files)), tensors)
    return summary, {"format": _ASSET_FORMAT, "repo": ref.repo_id, "commit": commit, "files": files}


def _local_safetensors(folder: Path) -> bool:
    """A snapshot with real weight files (a full download), not only the config vramctl fetched."""
    try:
        return any(p.is_file() and p.stat().st_size > 8 for p in folder.glob("*.safetensors"))
    except OSError:
        return False


def load_hub_model(ref: HubRef, *, offline: bool = False) -> ModelSpec:
    """ModelSpec of a Hub repo from its config.json and safetensors headers (see the module docstring)."""
    from vramctl.registry._files import read_json_object
    from vramctl.registry.local import load_local_model, with_hf_quant_config

    offline = offline or offline_from_env()
    hub = _import_hub()
    config_path, fetched = _config_path(hub, ref, offline)
    if not fetched and _local_safetensors(config_path.parent):
        return load_local_model(str(config_path.parent))
    where = f"{ref} config.json"
    try:
        config = read_json_object(config_path)
        config = with_hf_quant_config(config, _quant_config_path(hub, ref, config, offline or not fetched))
        probe = _probe(config, where, ref)
    except BadInputError as exc:
        if fetched:
            _remove_cached(config_path)
        message = str(exc).replace(str(config_path), where)
        raise BadInputError(
            f"{message} (from the Hub; not kept in the cache)" if fetched else message
        ) from None
    commit = _commit_of(config_path, ref)
    asset = _assets_dir(hub, ref, commit) / HEADERS_ASSET if _COMMIT.match(commit) else None
    summary = _read_asset(asset) if asset is not None else None
    origin = f"safetensors headers on {_endpoint()} at {commit[:12]} (cached)"
    if summary is None and not offline:
        fetched_headers = _fetch_headers(hub, ref, commit)
        if fetched_headers is not None:
            summary, document = fetched_headers
            origin = f"safetensors headers on {_endpoint()} at {commit[:12]}"
            if asset is not None:
                # a read-only cache: plan from what was read, fetch again next time
                with contextlib.suppress(OSError):
                    write_text_atomic(asset, json.dumps(document, separators=(",", ":")))
    name = ref.repo_id
    if summary is None:
        why = "no safetensors headers cached and offline" if offline else "no safetensors files in the repo"
        return _spec(config, where, name, probe, None, why)
    return _spec(config, where, name, probe, summary, origin)


def _probe(config: Mapping[str, Any], where: str, ref: HubRef) -> ModelSpec:
    from vramctl.registry.models import spec_from_config

    if not isinstance(config.get("architectures"), list) and "model_type" not in config:
        raise BadInputError(
            f"{where}: no 'architectures' or 'model_type': not a transformers model config (vLLM serves "
            "transformer checkpoints; a diffusers / sentence-transformers / adapter repo is not one)"
        )
    return spec_from_config(config, where=where, name=ref.repo_id)


def _spec(
    config: Mapping[str, Any],
    where: str,
    name: str,
    probe: ModelSpec,
    summary: CheckpointSummary | None,
    origin: str,
) -> ModelSpec:
    from vramctl.registry.local import spec_from_summary
    from vramctl.registry.models import spec_from_config

    if summary is None:
        return spec_from_config(
            config,
            where=where,
            name=name,
            sources=(("config", where), ("param_count", f"formula ({origin})")),
        )
    return spec_from_summary(config, where=where, name=name, probe=probe, summary=summary, origin=origin)


# --- GGUF files on the Hub: the header only -------------------------------------------------------------------

GGUF_FIRST_READ = 8 << 20
"""The first range read of a GGUF file: the metadata (tokenizer arrays included) and tensor list of most models."""
GGUF_MAX_HEADER = 128 << 20
"""A header is read in growing ranges (× 4) up to this; a larger one is refused, never the whole file."""
GGUF_ASSET_FORMAT = 1
_GGUF_SELECTOR = re.compile(r"^[\w][\w.+-]{0,199}$")
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def split_gguf_ref(text: str) -> tuple[str, str] | None:
    """`org/name:FILE.gguf` or `org/name:Q4_K_M` (optionally `org/name@rev:…`) → (repo part, selector); None when
    the text has no such selector. The `repo:quant` form is the one llama.cpp (`-hf`) and Ollama (`hf.co/…`)
    use for GGUF repos; a file name in a sub-folder is `org/name:folder/FILE.gguf`."""
    repo, sep, selector = text.strip().partition(":")
    if not sep or "/" not in repo or not selector:
        return None
    return repo, selector


def _gguf_file_for(files: list[str], selector: str, ref: HubRef) -> str:
    """The repo's .gguf file a selector names: the file itself, or the one whose name holds the quant tag."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf"))
    if selector.lower().endswith(".gguf"):
        if selector in ggufs:
            return selector
        raise BadInputError(
            f"{ref}: no file {selector!r} in the repo; its GGUF files: {', '.join(ggufs[:8]) or 'none'}"
        )
    tag = selector.lower()
    pattern = re.compile(rf"(?<![a-z0-9]){re.escape(tag)}(?![a-z0-9_])")  # Q4_K is not Q4_K_M
    hits = [f for f in ggufs if pattern.search(f.rsplit("/", 1)[-1].lower()) and "mmproj" not in f.lower()]
    firsts = [f for f in hits if _first_part(f)]
    if len(firsts) == 1:
        return firsts[0]
    if not firsts:
        raise BadInputError(
            f"{ref}: no GGUF file matches {selector!r}; its GGUF files: {', '.join(ggufs[:8]) or 'none'}"
        )
    raise BadInputError(
        f"{ref}: {selector!r} matches {len(firsts)} files ({', '.join(firsts[:6])}); name one"
    )


def _first_part(file_name: str) -> bool:
    """Not a split GGUF, or its first part (`-00001-of-00003.gguf`)."""
    m = _SHARD.search(file_name)
    return m is None or m.group(1) == "00001"


def _gguf_asset_name(file_name: str) -> str:
    return "gguf-" + re.sub(r"[^\w.-]", "_", file_name) + ".json"


def _read_gguf_asset(path: Path) -> tuple[dict[str, Any], int, dict[str, int]] | None:
    """A cached header summary; None (and removed) when absent or malformed, so it is read again."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if (
            not isinstance(data, dict)
            or data.get("format") != GGUF_ASSET_FORMAT
            or not isinstance(data.get("config"), dict)
            or not isinstance(data.get("total"), int)
            or not isinstance(data.get("by_type"), dict)
            or not all(isinstance(v, int) for v in data["by_type"].values())
        ):
            raise ValueError("not a vramctl GGUF summary")
        return data["config"], data["total"], data["by_type"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError):
        path.unlink(missing_ok=True)
        return None


def _fetch_gguf_header(hub: Any, ref: HubRef, file_name: str) -> Any:
    """The file's header, read with HTTP range requests through huggingface_hub's session (as
    `get_safetensors_metadata` reads a safetensors header), in growing prefixes; never the tensor data."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    from vramctl.registry.gguf_header import GgufTruncated, parse_gguf_header

    where = f"{ref}:{file_name}"
    url = hub.hf_hub_url(ref.repo_id, file_name, revision=ref.revision, endpoint=_endpoint())
    size = GGUF_FIRST_READ
    while True:
        data = bytearray()
        try:
            with get_session().stream(
                "GET", url, headers={**build_hf_headers(), "range": f"bytes=0-{size - 1}"}, timeout=60
            ) as response:
                if response.status_code >= 400:
                    response.read()
                hf_raise_for_status(response)
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) >= size:  # a server that ignores the range: stop at the prefix asked for
                        break
        except _network_failures() as exc:
            from huggingface_hub import errors

            if isinstance(exc, errors.EntryNotFoundError):
                raise BadInputError(f"{ref}: no file {file_name!r} in the repo (at {ref.revision or 'main'})") from None
            raise _hub_error(exc, ref, f"the header of {file_name}") from None
        try:
            return parse_gguf_header(bytes(data[:size]), where)
        except GgufTruncated:
            if len(data) < size:
                raise BadInputError(f"{where}: the file ends inside its GGUF header (truncated)") from None
            if size >= GGUF_MAX_HEADER:
                raise BadInputError(
                    f"{where}: a GGUF header over {GGUF_MAX_HEADER >> 20} MiB; not read (pass the original model's "
                    "config.json)"
                ) from None
            size *= 4


def load_hub_gguf(ref: HubRef, selector: str, *, offline: bool = False) -> ModelSpec:
    """ModelSpec of one GGUF file of a Hub repo from its header alone (range requests), cached under the HF
    assets folder by revision, so the next run needs no network."""
    from vramctl.registry.gguf_file import config_from_reader, gguf_spec

    if not _GGUF_SELECTOR.match(selector.rsplit("/", 1)[-1]) or ".." in selector:
        raise BadInputError(f"{ref}:{selector}: not a GGUF file name or quant tag (e.g. Q4_K_M)")
    offline = offline or offline_from_env()
    hub = _import_hub()
    folder = _assets_dir(hub, ref, ref.revision or "main")
    file_name = selector
    if not selector.lower().endswith(".gguf"):
        listing = folder / "gguf-files.json"
        files: list[str] | None = None
        try:
            cached = json.loads(listing.read_text(encoding="utf-8"))
            files = [f for f in cached if isinstance(f, str)] if isinstance(cached, list) else None
        except (OSError, ValueError):
            files = None
        if files is None:
            if offline:
                where = "HF_HUB_OFFLINE is set" if offline_from_env() else "--offline is set"
                raise BadInputError(
                    f"{ref}: its file list is not cached and {where}; name the file (`{ref.repo_id}:FILE.gguf`) "
                    "after one online run, or pass a local .gguf"
                )
            try:
                files = list(
                    hub.HfApi(endpoint=_endpoint()).list_repo_files(ref.repo_id, revision=ref.revision)
                )
            except _network_failures() as exc:
                raise _hub_error(exc, ref, "the file list") from None
            with contextlib.suppress(OSError):
                write_text_atomic(listing, json.dumps(files))
        file_name = _gguf_file_for(files, selector, ref)
    if _SHARD.search(file_name) and not file_name.lower().endswith("-00001-of-00001.gguf"):
        raise BadInputError(
            f"{ref}:{file_name}: a split GGUF; vLLM loads one file (merge the parts with llama.cpp's gguf-split "
            "--merge), so plan the merged file"
        )
    asset = folder / _gguf_asset_name(file_name)
    cached_parts = _read_gguf_asset(asset)
    where = f"{ref}:{file_name} (GGUF header)"
    if cached_parts is not None:
        config, total, by_type = cached_parts
        origin = where + ", cached"
    elif offline:
        raise BadInputError(
            f"{ref}:{file_name}: its GGUF header is not cached and HF_HUB_OFFLINE / --offline is set; run once online, "
            "or pass a local .gguf"
        )
    else:
        header = _fetch_gguf_header(hub, ref, file_name)
        config, total, by_type = config_from_reader(header, where)
        origin = where
        with contextlib.suppress(OSError):
            write_text_atomic(
                asset,
                json.dumps(
                    {"format": GGUF_ASSET_FORMAT, "config": config, "total": total, "by_type": by_type},
                    separators=(",", ":"),
                ),
            )
    try:
        return gguf_spec(
            config, total, by_type, where=origin, name=f"{ref.repo_id}:{file_name}", file_name=file_name
        )
    except BadInputError:
        asset.unlink(missing_ok=True)
        raise
