"""Load ModelSpec / GpuSpec from the bundled profiles/ or a local config.json / model folder.

Public API (stable; other layers import only these):
    load_model(name_or_path: str) -> ModelSpec      # HF id, alias, or path to config.json / folder / HF snapshot
    load_draft_model(name_or_path: str) -> DraftModel  # a `--speculative-config` draft (EAGLE / draft_model)
    load_gpu(name: str) -> GpuSpec                  # `h100-sxm`, `a100-80gb`, `l4`, `mi300x`, ...
    gpu_from_capacity(total_bytes: int) -> GpuSpec  # an unlisted card from `--gpu-memory 79.18GiB`
    list_models() -> list[ModelSpec]
    list_gpus() -> list[GpuSpec]
Unknown names raise UnknownNameError with the closest matches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vramctl.core.errors import BadInputError, ConfigUnavailableError, UnknownNameError
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.registry._catalog import MODELS
from vramctl.registry.catalog_models import find_bundled, list_bundled
from vramctl.registry.gpus import gpu_from_capacity, list_gpus, load_gpu
from vramctl.registry.local import find_in_hf_cache, load_local_model, looks_like_path
from vramctl.registry.models import spec_from_config
from vramctl.registry.names import described_suggestion

if TYPE_CHECKING:
    from vramctl.core.engines.vllm_speculative import DraftModel

__all__ = [
    "GpuSpec",
    "ModelSpec",
    "gpu_from_capacity",
    "list_gpus",
    "list_models",
    "load_draft_model",
    "load_gpu",
    "load_model",
    "spec_from_config",
]


def load_model(
    name_or_path: str,
    *,
    revision: str | None = None,
    offline: bool = False,
    hf_overrides: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """The model as `_load_model` finds it, with vLLM's `--hf-overrides` applied to its config when given
    (`vramctl.registry.overrides`: the derived context length follows; exact weight bytes kept unless the
    override changes shapes)."""
    spec = _load_model(name_or_path, revision=revision, offline=offline)
    if not hf_overrides:
        return spec
    from vramctl.registry.overrides import spec_with_overrides

    config, where = _raw_config(name_or_path, revision=revision, offline=offline)
    if spec.derived is not None:  # the derived plan's config: the base's + the inferred quantization_config
        from vramctl.registry.derived import derived_config

        config = derived_config(spec.derived.checkpoint) or config
    result = spec_with_overrides(spec, config, where, hf_overrides)
    if spec.derived is not None and result.derived is None:
        from dataclasses import replace

        result = replace(result, derived=spec.derived, sources=(*result.sources, *spec.sources[1:]))
    return result


def load_draft_model(name_or_path: str, *, offline: bool = False) -> DraftModel:
    """The draft model a `--speculative-config` names in `model`, found as `load_model` finds a model (bundled, a
    local folder, the HF cache, the Hub unless offline), with the EAGLE keys of its config (`draft_vocab_size`,
    the aux hidden states). Any failure is one line naming the way out: a local folder with its config.json."""
    from vramctl.core.engines.vllm_speculative import draft_from_config

    where = f"--speculative-config model {name_or_path!r}"
    try:
        spec = _load_model(name_or_path, offline=offline)
        try:
            config, _ = _raw_config(name_or_path, revision=None, offline=offline)
        except BadInputError:
            config = {}  # a spec derived from its name: no config.json, the EAGLE keys at their defaults
    except BadInputError as exc:
        reason = str(exc).split("; closest bundled:")[0]  # a target-sized neighbour is no draft
        way_out = "" if "local" in reason else '; give a local folder with its config.json as "model"'
        raise BadInputError(f"{where}: the draft model cannot be loaded: {reason}{way_out}") from None
    return draft_from_config(name_or_path, spec, config)


def _raw_config(name_or_path: str, *, revision: str | None, offline: bool) -> tuple[dict[str, Any], str]:
    """The config.json (or bundled `config:` block) a spec was built from."""
    from vramctl.registry._files import read_json_object
    from vramctl.registry.local import resolve_local

    if looks_like_path(name_or_path):
        local = resolve_local(name_or_path)
        return read_json_object(local.config_path), str(local.config_path)
    pinned = "@" in name_or_path or bool(revision and revision.strip())
    path = None if pinned else MODELS.find(name_or_path)
    if path is not None:
        config = MODELS.document(path).get("config")
        return (dict(config) if isinstance(config, dict) else {}), f"{path}: config"
    from vramctl.registry import hub

    ref = hub.parse_ref(name_or_path, revision)
    if ref is None:
        raise UnknownNameError("model", name_or_path, suggest_models(name_or_path))
    config_path = hub.cached_config_path(ref) if hub.hub_available() else None
    if config_path is None:
        cached = find_in_hf_cache(ref.repo_id)
        if cached is None:
            from vramctl.registry.derived import derived_config

            config = derived_config(ref.repo_id)
            if config is not None:
                return config, f"{ref} (derived from its bundled base)"
            raise BadInputError(f"{name_or_path}: config.json not found to apply --hf-overrides to")
        config_path = resolve_local(str(cached)).config_path
    return read_json_object(config_path), f"{ref} config.json"


def _load_model(name_or_path: str, *, revision: str | None = None, offline: bool = False) -> ModelSpec:
    """A bundled model by HF id or alias (any case), a local config.json / model folder / HF cache snapshot, or a
    Hugging Face Hub repo (`org/name`, `org/name@rev`).

    Order: an existing path; a bundled profile (unless a revision is asked for); the Hub repo, read from the HF
    cache when it is there, else its config.json and safetensors headers fetched (never the weights; see
    `vramctl.registry.hub`). `offline` (or HF_HUB_OFFLINE=1) never touches the network.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise BadInputError("--model: empty model name")
    if looks_like_path(name_or_path):
        return load_local_model(name_or_path)
    pinned = "@" in name_or_path or bool(revision and revision.strip())
    if not pinned:
        spec = find_bundled(name_or_path)
        if spec is not None:
            return spec
    from vramctl.registry import hub  # stays cheap: huggingface_hub is imported inside, only for a fetch

    gguf = hub.split_gguf_ref(name_or_path)
    if gguf is not None:
        gguf_ref = hub.parse_ref(gguf[0], revision)
        if gguf_ref is not None:
            return hub.load_hub_gguf(gguf_ref, gguf[1], offline=offline)
    ref = hub.parse_ref(name_or_path, revision)
    if ref is None:
        if pinned:
            raise BadInputError(f"{name_or_path}: a revision needs a Hub repo id (org/name@rev)")
        derived = _derived(name_or_path, "a name without org/ is not looked up on the Hub")
        if derived is not None:
            return derived
        raise UnknownNameError("model", name_or_path, suggest_models(name_or_path))
    if not hub.hub_available():
        cached = find_in_hf_cache(ref.repo_id)
        if cached is not None and ref.revision is None:
            return load_local_model(str(cached))
    try:
        return hub.load_hub_model(ref, offline=offline)
    except ConfigUnavailableError as exc:
        derived = _derived(ref.repo_id, exc.reason)
        if derived is not None:
            return derived
        hint = suggest_models(ref.repo_id)
        raise BadInputError(f"{exc}; closest bundled: {', '.join(hint)}" if hint else str(exc)) from None
    except BadInputError as exc:
        hint = suggest_models(ref.repo_id)
        if hint and any(w in str(exc) for w in ("no such model repo", "cannot reach", "not in the HF cache")):
            raise BadInputError(f"{exc}; closest bundled: {', '.join(hint)}") from None
        raise


def _derived(name: str, why: str) -> ModelSpec | None:
    """A pre-quantised checkpoint named `<bundled model><quantisation marker>` planned from that base
    (`vramctl.registry.derived`), or None."""
    from vramctl.registry.derived import derive_from_name

    return derive_from_name(name, why)


def suggest_models(name: str) -> list[str]:
    """The closest bundled names, each saying how it differs when it is another quantisation or size."""
    return [described_suggestion(name, candidate) for candidate in MODELS.suggest(name)]


def list_models() -> list[ModelSpec]:
    """Every bundled model profile, sorted by file name."""
    return list_bundled()
