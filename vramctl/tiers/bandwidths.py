"""The bandwidths file: what `vramctl tiers bench` writes and `vramctl tiers plan --bandwidths FILE` reads.

This module is the contract between the two commands; it is pure (no I/O beyond reading the file the
user names, no printing). Schema `vramctl.tiers.bench/1`:

```json
{
  "schema": "vramctl.tiers.bench/1",
  "tiers": {
    "host-pinned":   {"read_bytes_per_s": 5.1e10, "write_bytes_per_s": 5.3e10,
                      "method": "gather+copy, 2 MiB blocks", "verified": true},
    "disk-direct":   {"read_bytes_per_s": 6.8e9, "write_bytes_per_s": 4.1e9,
                      "method": "O_DIRECT, 4 MiB, fsync", "verified": true,
                      "latency_s": 8.5e-05}
  },
  "environment": {"hostname": "...", "gpu": "...", "...": "free-form"}
}
```

Per tier (the object key is the tier name, kebab-case; the bench writes `host-pinned`,
`host-pageable`, `disk-direct`, `disk-buffered`, others are accepted and shown as user tiers):
- `read_bytes_per_s` (required, float > 0): tier → GPU / reader direction, the one a prefix fetch waits on.
- `write_bytes_per_s` (required, float > 0): GPU / writer → tier direction (offload / backup).
- `method` (required, non-empty string): how it was measured, shown next to the number.
- `verified` (required, bool): every byte read back and checksummed.
- `latency_s` (optional, float >= 0): measured fixed cost per transfer; `tiers plan` uses it for the
  "not worth fetching below N tokens" threshold instead of its default per-tier latency.
Unknown keys (per tier and at the top level) are ignored, so the bench can add fields without breaking
older readers. `environment` is an optional free-form object, kept as-is.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramctl.core.errors import BadInputError

SCHEMA = "vramctl.tiers.bench/1"

HOST_PINNED = "host-pinned"
HOST_PAGEABLE = "host-pageable"
DISK_DIRECT = "disk-direct"
DISK_BUFFERED = "disk-buffered"
KNOWN_TIER_NAMES: tuple[str, ...] = (HOST_PINNED, HOST_PAGEABLE, DISK_DIRECT, DISK_BUFFERED)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class MeasuredTier:
    """One tier's measured bandwidths (bytes per second, per direction)."""

    name: str
    read_bytes_per_s: float
    write_bytes_per_s: float
    method: str
    verified: bool
    latency_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "read_bytes_per_s": self.read_bytes_per_s,
            "write_bytes_per_s": self.write_bytes_per_s,
            "method": self.method,
            "verified": self.verified,
        }
        if self.latency_s is not None:
            out["latency_s"] = self.latency_s
        return out


@dataclass(frozen=True)
class BenchBandwidths:
    """A parsed bandwidths file."""

    tiers: tuple[MeasuredTier, ...]
    environment: dict[str, Any] = field(default_factory=dict, compare=False)
    source: str = ""

    def get(self, name: str) -> MeasuredTier | None:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        return None

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object (what the bench writes with `render.jsonout.dumps`)."""
        return {
            "schema": SCHEMA,
            "tiers": {tier.name: tier.to_json() for tier in self.tiers},
            "environment": dict(self.environment),
        }


def _rate(value: object, *, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInputError(f"{where}: {key} must be a number of bytes per second, got {value!r}")
    try:
        rate = float(value)
    except OverflowError:  # an integer beyond a float (over ~309 digits)
        raise BadInputError(f"{where}: {key} is absurdly large ({len(str(value))} digits)") from None
    if not math.isfinite(rate) or rate <= 0:
        raise BadInputError(f"{where}: {key} must be a positive finite number, got {value!r}")
    return rate


def parse_bandwidths(obj: object, *, source: str = "bandwidths") -> BenchBandwidths:
    """Validate a decoded bandwidths object; every problem is a one-line BadInputError naming the key."""
    if not isinstance(obj, dict):
        raise BadInputError(
            f"{source}: expected a JSON object with schema {SCHEMA!r}, got {type(obj).__name__}"
        )
    schema = obj.get("schema")
    if schema != SCHEMA:
        raise BadInputError(
            f"{source}: schema is {schema!r}, expected {SCHEMA!r} (a `vramctl tiers bench` file)"
        )
    raw_tiers = obj.get("tiers")
    if not isinstance(raw_tiers, dict) or not raw_tiers:
        raise BadInputError(f"{source}: 'tiers' must be a non-empty object of tier name → bandwidths")
    tiers: list[MeasuredTier] = []
    for name, entry in raw_tiers.items():
        where = f"{source}: tiers.{name}"
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise BadInputError(f"{source}: tier name {name!r} is not a short name like 'host-pinned'")
        if not isinstance(entry, dict):
            raise BadInputError(f"{where} must be an object, got {type(entry).__name__}")
        for key in ("read_bytes_per_s", "write_bytes_per_s", "method", "verified"):
            if key not in entry:
                raise BadInputError(f"{where}: missing key {key!r}")
        method = entry["method"]
        if not isinstance(method, str) or not method.strip():
            raise BadInputError(f"{where}: method must be a non-empty string, got {method!r}")
        verified = entry["verified"]
        if not isinstance(verified, bool):
            raise BadInputError(f"{where}: verified must be true or false, got {verified!r}")
        latency: float | None = None
        if entry.get("latency_s") is not None:
            raw_latency = entry["latency_s"]
            if isinstance(raw_latency, bool) or not isinstance(raw_latency, (int, float)):
                raise BadInputError(f"{where}: latency_s must be a number of seconds, got {raw_latency!r}")
            latency = float(raw_latency)
            if not math.isfinite(latency) or latency < 0:
                raise BadInputError(f"{where}: latency_s must be a finite number >= 0, got {raw_latency!r}")
        tiers.append(
            MeasuredTier(
                name=name,
                read_bytes_per_s=_rate(entry["read_bytes_per_s"], where=where, key="read_bytes_per_s"),
                write_bytes_per_s=_rate(entry["write_bytes_per_s"], where=where, key="write_bytes_per_s"),
                method=method,
                verified=verified,
                latency_s=latency,
            )
        )
    environment = obj.get("environment", {})
    if environment is None:
        environment = {}
    if not isinstance(environment, dict):
        raise BadInputError(f"{source}: 'environment' must be an object, got {type(environment).__name__}")
    return BenchBandwidths(tiers=tuple(tiers), environment=dict(environment), source=source)


def loads_bandwidths(text: str, *, source: str = "bandwidths") -> BenchBandwidths:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"{source}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise BadInputError(f"{source}: JSON nested too deeply to be a `tiers bench` file") from None
    except ValueError:  # an integer of more than 4,300 digits (Python's int-from-text limit)
        raise BadInputError(
            f"{source}: not valid JSON: a number too long to read (over 4,300 digits)"
        ) from None
    return parse_bandwidths(obj, source=source)


_MAX_FILE_BYTES = 16 << 20


def load_bandwidths(path: str | Path) -> BenchBandwidths:
    """Read and validate a bandwidths file written by `vramctl tiers bench` (or by hand)."""
    target = Path(path)
    try:
        with target.open("rb") as handle:  # a bandwidths file is a few KiB: never read a huge file whole
            raw = handle.read(_MAX_FILE_BYTES + 1)
        if len(raw) > _MAX_FILE_BYTES:
            raise BadInputError(
                f"--bandwidths {path}: larger than {_MAX_FILE_BYTES >> 20} MiB, not a `tiers bench` file"
            )
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise BadInputError(f"--bandwidths {path}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"--bandwidths {path}: is a directory, expected a JSON file") from None
    except UnicodeDecodeError as exc:
        raise BadInputError(
            f"--bandwidths {path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
        ) from None
    except OSError as exc:
        raise BadInputError(f"--bandwidths {path}: cannot read ({exc.strerror or exc})") from None
    return loads_bandwidths(text, source=f"--bandwidths {path}")
