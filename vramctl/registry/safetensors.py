"""Read safetensors headers only (8-byte little-endian length + JSON), never the tensor data.

Format: https://github.com/huggingface/safetensors#format — `{name: {dtype, shape, data_offsets: [begin, end]}}`
plus an optional `__metadata__`; offsets are relative to the end of the header.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramctl.core.errors import BadInputError

MAX_HEADER_BYTES = 100 * 1024 * 1024
"""safetensors refuses headers above 100 MB; so do we (a corrupt length would otherwise allocate GBs)."""

ELEMENT_BYTES: dict[str, int] = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
}
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"})
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def layer(self) -> int | None:
        """The decoder layer index in the name (`model.layers.12.mlp...` → 12), else None."""
        match = _LAYER_RE.search(self.name)
        return int(match.group(1)) if match else None


@dataclass(frozen=True)
class CheckpointSummary:
    """Totals over the tensors of one or more safetensors files."""

    files: tuple[Path, ...]
    tensors: tuple[TensorInfo, ...]
    bytes_by_dtype: dict[str, int] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def total_elements(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def all_float(self) -> bool:
        """Every tensor is a plain float: element counts are parameter counts."""
        return all(t.dtype in FLOAT_DTYPES for t in self.tensors)

    def without_layers_from(self, first_extra_layer: int) -> CheckpointSummary:
        """Drop tensors of decoder layers >= first_extra_layer (DeepSeek-V3's MTP layer 61)."""
        kept = tuple(t for t in self.tensors if t.layer is None or t.layer < first_extra_layer)
        return summarize(self.files, kept)

    def without_prefix(self, prefix: str) -> CheckpointSummary:
        """Drop tensors whose name starts with `prefix` (Qwen3-Next / Qwen3.5's `mtp.` head)."""
        return summarize(self.files, (t for t in self.tensors if not t.name.startswith(prefix)))

    def without_names(self, names: set[str]) -> CheckpointSummary:
        return summarize(self.files, (t for t in self.tensors if t.name not in names))


def summarize(files: Iterable[Path], tensors: Iterable[TensorInfo]) -> CheckpointSummary:
    kept = tuple(tensors)
    by_dtype: dict[str, int] = {}
    for tensor in kept:
        by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + tensor.nbytes
    return CheckpointSummary(files=tuple(files), tensors=kept, bytes_by_dtype=dict(sorted(by_dtype.items())))


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one .safetensors file (reads 8 + header-length bytes)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise BadInputError(
                    f"{path}: truncated safetensors file ({size} bytes, no 8-byte header length)"
                )
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES or length > size - 8:
                raise BadInputError(
                    f"{path}: truncated or corrupt safetensors header: length field {length} bytes,"
                    f" file has {size - 8} after it"
                )
            raw = handle.read(length)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadInputError(f"{path}: safetensors header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise BadInputError(f"{path}: safetensors header must be a JSON object")
    header["__data_bytes__"] = size - 8 - length
    return header


def tensors_of(path: Path) -> list[TensorInfo]:
    """Validated tensor entries of one file: known dtype sizes, shape × dtype = offsets, inside the file."""
    header = read_header(path)
    data_bytes = int(header.pop("__data_bytes__"))
    header.pop("__metadata__", None)
    tensors: list[TensorInfo] = []
    for name, entry in header.items():
        where = f"{path}: tensor {name!r}"
        if not isinstance(entry, dict):
            raise BadInputError(f"{where}: entry must be an object")
        dtype = entry.get("dtype")
        shape = entry.get("shape")
        offsets = entry.get("data_offsets")
        if not isinstance(dtype, str):
            raise BadInputError(f"{where}: field 'dtype' must be a string, got {dtype!r}")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise BadInputError(
                f"{where}: field 'shape' must be a list of non-negative integers, got {shape!r}"
            )
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
            or offsets[1] < offsets[0]
        ):
            raise BadInputError(f"{where}: field 'data_offsets' must be [begin, end] with 0 <= begin <= end")
        nbytes = offsets[1] - offsets[0]
        if offsets[1] > data_bytes:
            raise BadInputError(
                f"{where}: data ends at byte {offsets[1]} but the file holds {data_bytes} data bytes (truncated)"
            )
        element = ELEMENT_BYTES.get(dtype)
        if element is not None and math.prod(shape) * element != nbytes:
            raise BadInputError(
                f"{where}: shape {shape} × {dtype} is {math.prod(shape) * element} bytes, offsets say {nbytes}"
            )
        tensors.append(TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes))
    return tensors


def read_checkpoint(files: Iterable[Path]) -> CheckpointSummary:
    paths = tuple(files)
    tensors: list[TensorInfo] = []
    for path in paths:
        tensors.extend(tensors_of(path))
    return summarize(paths, tensors)
