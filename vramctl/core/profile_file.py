"""The saved profile: schema `vramctl.profile/1`, loading with clear errors, atomic saving.

A profile file is one JSON or YAML object (chosen by the file extension: `.json`, `.yaml` / `.yml`):

    schema:       "vramctl.profile/1"
    created_utc:  ISO 8601 time of the measurement
    environment:  device name, driver, CUDA, torch, vramctl, Python versions, hostname, time
    model:        {name, fingerprint: {architecture, hidden_size, num_hidden_layers, ... }}
    result:       the `vramctl profile --json` object (plan's schema: engine, settings, terms, kv_cache_bytes,
                  ..., plus device, measurements.ranks[...], sglang, notes)

`load_profile` checks every field `suggest` and `validate` read and names the first bad one; a file from
another model is refused by `check_model`. Every failure is a BadInputError (exit 2), one line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vramctl.core.atomic import output_target, write_text_atomic
from vramctl.core.errors import BadInputError
from vramctl.core.safe_yaml import YamlBudgetError, load_yaml
from vramctl.core.specs import ModelSpec
from vramctl.core.suggest import SuggestInput

SCHEMA = "vramctl.profile/1"
_SUFFIXES_YAML = (".yaml", ".yml")
_MAX_FILE_BYTES = 32 * 1024 * 1024


def model_fingerprint(spec: ModelSpec) -> dict[str, Any]:
    """The architecture numbers a profile depends on (not the name: a local copy of a model matches)."""
    return {
        "architecture": spec.architecture,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "torch_dtype": spec.torch_dtype,
        "num_experts": spec.moe.num_experts if spec.moe else 0,
        "kv_lora_rank": spec.mla.kv_lora_rank if spec.mla else 0,
    }


@dataclass(frozen=True)
class ProfileFile:
    """A loaded, checked profile."""

    path: str
    model_name: str
    model_source: str
    fingerprint: dict[str, Any]
    device_kind: str
    device_name: str
    settings: dict[str, Any]
    suggest_input: SuggestInput
    kv_cache_bytes: int
    document: dict[str, Any]

    @property
    def result(self) -> dict[str, Any]:
        return dict(self.document["result"])


def build_document(
    result_json: dict[str, Any], *, spec: ModelSpec, created_utc: str, model_source: str | None = None
) -> dict[str, Any]:
    """The object to save for a `profile --json` result. `model_source` is what reloads the model
    (the name or path the user gave); it defaults to the model's name."""
    return {
        "schema": SCHEMA,
        "created_utc": created_utc,
        "environment": result_json.get("environment", {}),
        "model": {
            "name": spec.name,
            "source": model_source or spec.name,
            "fingerprint": model_fingerprint(spec),
        },
        "result": result_json,
    }


def dump_document(document: dict[str, Any], path: str | os.PathLike[str]) -> str:
    """The text of the file, JSON or YAML by extension."""
    suffix = Path(path).suffix.lower()
    if suffix in _SUFFIXES_YAML:
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    if suffix == ".json":
        return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    raise BadInputError(f"--save {path}: use a .json, .yaml or .yml file name")


def save_profile(document: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write atomically (a temporary file renamed over the target: never a half-written profile)."""
    text = dump_document(document, path)
    target = output_target(path, flag="--save")
    if target.parent and not target.parent.exists():
        raise BadInputError(f"--save {path}: the folder {target.parent} does not exist")
    check_overwrite(target)
    try:
        write_text_atomic(
            target, text, flag="--save"
        )  # on failure the temporary file goes, the old file stays as it was
    except OSError as exc:
        raise BadInputError(f"--save {path}: cannot write it ({exc.strerror or exc})") from None


def check_overwrite(target: Path) -> None:
    """Refuse to replace an existing file that is not a vramctl profile: `--save` must not clobber what the user
    has (a deploy.yaml, a config.json). A saved profile (any version of this schema) is ours to replace; a FIFO,
    a device or a folder is never replaced, a symbolic link is followed to its file."""
    target = output_target(target, flag="--save")
    try:
        if not target.is_file() or target.stat().st_size == 0:
            return
        root = _parse(target)
    except (BadInputError, OSError):
        root = None
    if not (isinstance(root, dict) and root.get("schema") == SCHEMA):
        raise BadInputError(
            f"--save {target}: the file exists and is not a vramctl profile; not overwriting it "
            "(remove it or pick another name)"
        )


def _parse(path: Path) -> Any:
    """The document in a profile file, read up to its bound by bytes actually read (limit + 1), never by its `stat`
    size: /dev/zero, /dev/urandom, a FIFO or a /proc file report 0 and would be read without end."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise BadInputError(f"--from-profile {path}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"--from-profile {path}: is a folder, not a profile file") from None
    except OSError as exc:
        raise BadInputError(f"--from-profile {path}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > _MAX_FILE_BYTES:
        raise BadInputError(
            f"--from-profile {path}: more than {_MAX_FILE_BYTES >> 20} MiB; too large for a profile file"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInputError(f"--from-profile {path}: not a text file (not UTF-8)") from None
    if "\x00" in text:
        raise BadInputError(f"--from-profile {path}: a binary file (NUL bytes), not a profile file")
    if not text.strip():
        raise BadInputError(f"--from-profile {path}: the file is empty")
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInputError(
                f"--from-profile {path}: not valid JSON (line {exc.lineno}: {exc.msg})"
            ) from None
        except RecursionError:
            raise BadInputError(
                f"--from-profile {path}: JSON nested too deeply to be a profile file"
            ) from None
        except ValueError:  # an integer of more than 4,300 digits (Python's int-from-text limit)
            raise BadInputError(
                f"--from-profile {path}: not valid JSON: a number too long to read (over 4,300 digits)"
            ) from None
    try:
        return load_yaml(text)
    except YamlBudgetError as exc:
        raise BadInputError(f"--from-profile {path}: {exc}") from None
    except RecursionError:
        raise BadInputError(f"--from-profile {path}: YAML nested too deeply to be a profile file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise BadInputError(f"--from-profile {path}: not valid YAML{where}") from None
    except ValueError:  # an integer of more than 4,300 digits
        raise BadInputError(f"--from-profile {path}: a number too long to read (over 4,300 digits)") from None


class _Reader:
    def __init__(self, path: Path, root: Any) -> None:
        self.path = path
        self.root = root

    def fail(self, key: str, problem: str) -> BadInputError:
        return BadInputError(f"--from-profile {self.path}: {key} {problem} (not a vramctl profile file?)")

    def get(self, key: str) -> Any:
        node = self.root
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise self.fail(key, "is missing")
            node = node[part]
        return node

    def int_(self, key: str, *, minimum: int | None = None) -> int:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            what = "an integer number of bytes" if key.endswith("bytes") or "bytes_" in key else "an integer"
            raise self.fail(key, f"must be {what}, not {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be at least {minimum}, not {value}")
        return value

    def float_(self, key: str) -> float:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a number, not {value!r}")
        return float(value)

    def str_(self, key: str) -> str:
        value = self.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, not {value!r}")
        return value

    def dict_(self, key: str) -> dict[str, Any]:
        value = self.get(key)
        if not isinstance(value, dict):
            raise self.fail(key, "must be a mapping")
        return value


def load_profile(path: str | os.PathLike[str]) -> ProfileFile:
    """Load and check a profile file; BadInputError (exit 2) with one clear line on any problem."""
    p = Path(path)
    return parse_document(_parse(p), p)


def parse_document(root: Any, p: Path) -> ProfileFile:
    """Check a profile object (loaded from `p`) and pull out what suggest and validate read."""
    if not isinstance(root, dict):
        raise BadInputError(f"--from-profile {p}: expected a mapping at the top, found {type(root).__name__}")
    r = _Reader(p, root)
    schema = root.get("schema")
    if schema is None and root.get("source") == "measured" and "measurements" in root:
        raise BadInputError(
            f"--from-profile {p}: this is `vramctl profile --json` output, not a profile file (it lacks the "
            f"model fingerprint suggest and validate check); write one with `vramctl profile MODEL … --save {p}`"
        )
    if schema != SCHEMA:
        raise BadInputError(
            f"--from-profile {p}: schema {schema!r} is not {SCHEMA!r} (write it with `vramctl profile --save`)"
        )
    model_name = r.str_("model.name")
    fingerprint = r.dict_("model.fingerprint")
    settings = r.dict_("result.settings")
    _check_settings(r)
    binding = r.int_("result.measurements.binding_rank", minimum=0)
    ranks = r.get("result.measurements.ranks")
    if not isinstance(ranks, list) or not ranks:
        raise r.fail("result.measurements.ranks", "must be a non-empty list")
    if binding >= len(ranks):
        raise r.fail("result.measurements.binding_rank", f"is {binding} but there are {len(ranks)} ranks")
    rank = _Reader(p, {"rank": ranks[binding]})
    total = rank.int_("rank.snapshots.init.total_bytes", minimum=1)
    init_free = rank.int_("rank.snapshots.init.free_bytes", minimum=0)
    if init_free > total:
        raise rank.fail("rank.snapshots.init.free_bytes", f"({init_free}) exceeds total_bytes ({total})")
    util = r.float_("result.settings.gpu_memory_utilization")
    if not 0 < util <= 1:
        raise r.fail("result.settings.gpu_memory_utilization", f"must be in (0, 1], not {util}")
    estimate_applied = r.get("result.settings.estimate_cudagraphs")
    if not isinstance(estimate_applied, bool):
        raise r.fail("result.settings.estimate_cudagraphs", "must be true or false")
    inp = SuggestInput(
        total_bytes=total,
        init_free_bytes=init_free,
        requested_bytes=rank.int_("rank.requested_bytes", minimum=0),
        gpu_memory_utilization=util,
        total_consumed_bytes=rank.int_("rank.total_consumed_bytes"),
        transient_peak_bytes=rank.int_("rank.transient_peak_bytes", minimum=0),
        cuda_graph_estimate_bytes=rank.int_("rank.cuda_graph_estimate_bytes", minimum=0),
        cuda_graph_actual_bytes=rank.int_("rank.cuda_graph_actual_bytes"),
        estimate_applied=estimate_applied,
        bytes_per_block=r.int_("result.bytes_per_block", minimum=1),
        block_size=r.int_("result.block_size", minimum=1),
        blocks_per_request=_blocks_per_request(r),
        max_model_len=r.int_("result.settings.max_model_len", minimum=1),
        sglang_pre_load_free_bytes=rank.int_("rank.sglang_pre_load_free_bytes", minimum=0),
        sglang_post_load_free_bytes=rank.int_("rank.sglang_post_load_free_bytes"),
        sglang_cell_bytes=r.int_("result.sglang.cell_size_bytes", minimum=1),
    )
    return ProfileFile(
        path=str(p),
        model_name=model_name,
        model_source=root["model"].get("source")
        if isinstance(root["model"].get("source"), str)
        else model_name,
        fingerprint=fingerprint,
        device_kind=r.str_("result.device.kind"),
        device_name=r.str_("result.device.name"),
        settings=settings,
        suggest_input=inp,
        kv_cache_bytes=r.int_("result.kv_cache_bytes"),
        document=root,
    )


_SETTING_INT_MAX = 1 << 40
"""No engine setting (tokens, sequences, block size, ranks, layers) is anywhere near this."""


def _check_settings(r: _Reader) -> None:
    """The serve settings `validate --from-profile` re-runs with: each of the right type and range."""
    for key in (
        "max_model_len",
        "max_num_batched_tokens",
        "max_num_seqs",
        "block_size",
        "tensor_parallel_size",
    ):
        value = r.int_(f"result.settings.{key}", minimum=1)
        if value > _SETTING_INT_MAX:
            raise r.fail(f"result.settings.{key}", f"is {value}, far beyond any engine setting")
    for key in ("engine_version", "kv_cache_dtype", "dtype"):
        r.str_(f"result.settings.{key}")
    if not isinstance(r.get("result.settings.enforce_eager"), bool):
        raise r.fail("result.settings.enforce_eager", "must be true or false")
    sizes = r.get("result.settings.cudagraph_capture_sizes")
    if not isinstance(sizes, list) or any(
        isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= _SETTING_INT_MAX for x in sizes
    ):
        raise r.fail("result.settings.cudagraph_capture_sizes", "must be a list of positive integers")
    root = r.root["result"]["settings"]
    if root.get("num_layers") is not None:
        r.int_("result.settings.num_layers", minimum=1)
    if root.get("mem_fraction_static") is not None:
        mfs = r.float_("result.settings.mem_fraction_static")
        if not 0 < mfs < 1:
            raise r.fail("result.settings.mem_fraction_static", f"must be in (0, 1), not {mfs}")


def _blocks_per_request(r: _Reader) -> int:
    blocks = r.int_("result.num_blocks", minimum=0)
    concurrency = r.float_("result.max_concurrency")
    root = r.root["result"]
    explicit = root.get("blocks_per_request")
    if isinstance(explicit, int) and not isinstance(explicit, bool) and explicit > 0:
        return explicit
    if concurrency > 0:
        return max(1, round(blocks / concurrency))
    raise r.fail("result.blocks_per_request", "is missing and cannot be derived (no blocks)")


def check_model(profile: ProfileFile, spec: ModelSpec) -> None:
    """Refuse a profile measured for another model (its architecture numbers differ)."""
    mine = model_fingerprint(spec)
    diffs = [
        f"{key} {profile.fingerprint.get(key)!r} vs {value!r}"
        for key, value in mine.items()
        if profile.fingerprint.get(key) != value
    ]
    if diffs:
        raise BadInputError(
            f"--from-profile {profile.path}: measured for {profile.model_name}, not {spec.name} ({'; '.join(diffs[:3])})"
        )
