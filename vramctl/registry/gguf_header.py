"""A GGUF header parsed from its first bytes: the metadata key/values and the tensor list, without the data.

For a GGUF file on the Hub only the header is fetched (range requests, `vramctl.registry.hub.load_hub_gguf`), so
the gguf package's reader (a memory map of the whole file) cannot be used; this parser reads the same layout
(https://github.com/ggml-org/ggml/blob/master/docs/gguf.md, versions 2 and 3): magic `GGUF`, version u32,
tensor count u64, key/value count u64, the key/values, then per tensor its name, dimensions, ggml type and
offset. A tensor's bytes are `elements / block size × type size` (the gguf package's `GGML_QUANT_SIZES`).
`GgufTruncated` says the bytes end inside the header (fetch more); anything else wrong is one BadInputError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from vramctl.core.errors import BadInputError

MAX_TENSORS = 1 << 20
MAX_KEYS = 1 << 16
MAX_ARRAY = 1 << 24
MAX_STRING = 1 << 24

_SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9


class GgufTruncated(Exception):
    """The bytes end inside the header: read more of the file."""


@dataclass(frozen=True)
class HeaderField:
    """One metadata value, shaped like the gguf package's ReaderField for `gguf_file`: `contents()`, `data`."""

    value: Any

    def contents(self) -> Any:
        return self.value

    @property
    def data(self) -> list[Any]:
        return self.value if isinstance(self.value, list) else [self.value]


@dataclass(frozen=True)
class _Type:
    name: str


@dataclass(frozen=True)
class HeaderTensor:
    name: str
    tensor_type: _Type
    n_bytes: int


@dataclass(frozen=True)
class GgufHeader:
    """What `gguf_file` reads from a GGUFReader: `fields` (key → HeaderField) and `tensors`."""

    fields: dict[str, HeaderField]
    tensors: list[HeaderTensor]
    header_bytes: int


class _Cursor:
    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.pos = 0
        self.where = where

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise GgufTruncated
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, size: int) -> Any:
        return struct.unpack(fmt, self.take(size))[0]

    def u32(self) -> int:
        return int(self.unpack("<I", 4))

    def u64(self) -> int:
        return int(self.unpack("<Q", 8))

    def string(self) -> str:
        n = self.u64()
        if n > MAX_STRING:
            raise BadInputError(f"{self.where}: a GGUF string of {n:,} bytes: not a GGUF header")
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, kind: int, depth: int = 0) -> Any:
        if kind in _SCALARS:
            fmt, size = _SCALARS[kind]
            return self.unpack(fmt, size)
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY and depth == 0:
            item = self.u32()
            count = self.u64()
            if count > MAX_ARRAY:
                raise BadInputError(f"{self.where}: a GGUF array of {count:,} items: not a GGUF header")
            if item in _SCALARS:
                fmt, size = _SCALARS[item]
                raw = self.take(size * count)
                return list(struct.unpack("<" + fmt[1] * count, raw)) if count else []
            return [self.value(item, depth + 1) for _ in range(count)]
        raise BadInputError(f"{self.where}: GGUF value type {kind} is not one the format defines")


def _quant_sizes() -> dict[int, tuple[str, int, int]]:
    """ggml type id → (name, block size, bytes per block), from the gguf package."""
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    except ImportError:
        raise BadInputError(
            "reading a GGUF header needs the gguf package (`pip install gguf`); or pass the original model's "
            "config.json"
        ) from None
    return {int(t): (t.name, *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}


def parse_gguf_header(data: bytes, where: str) -> GgufHeader:
    """The header in `data` (a prefix of the file); GgufTruncated when it ends too early."""
    cur = _Cursor(data, where)
    if len(data) >= 4 and data[:4] != b"GGUF":
        raise BadInputError(f"{where}: not a GGUF file (no 'GGUF' magic)")
    cur.take(4)
    version = cur.u32()
    if version not in (2, 3):
        raise BadInputError(f"{where}: GGUF version {version} (vramctl reads versions 2 and 3)")
    n_tensors = cur.u64()
    n_keys = cur.u64()
    if n_tensors > MAX_TENSORS or n_keys > MAX_KEYS:
        raise BadInputError(f"{where}: {n_tensors:,} tensors / {n_keys:,} keys: not a GGUF header")
    fields: dict[str, HeaderField] = {}
    for _ in range(n_keys):
        key = cur.string()
        fields[key] = HeaderField(cur.value(cur.u32()))
    sizes = _quant_sizes()
    tensors: list[HeaderTensor] = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.u32()
        if n_dims > 8:
            raise BadInputError(f"{where}: tensor {name!r} has {n_dims} dimensions: not a GGUF header")
        elements = 1
        for _ in range(n_dims):
            elements *= cur.u64()
        kind = cur.u32()
        cur.u64()  # offset in the data section
        if kind not in sizes:
            raise BadInputError(f"{where}: tensor {name!r} has ggml type {kind}, unknown to the gguf package")
        type_name, block, type_size = sizes[kind]
        if elements % block:
            raise BadInputError(
                f"{where}: tensor {name!r}: {elements} elements are not whole {type_name} blocks"
            )
        tensors.append(HeaderTensor(name, _Type(type_name), elements // block * type_size))
    return GgufHeader(fields, tensors, cur.pos)
