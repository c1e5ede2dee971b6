"""Request traces for the tier simulator: Mooncake JSONL and a seedable synthetic multi-turn chat generator.

A trace is a list of requests in arrival order; each request carries its input length in tokens and the
ids of its prefix-chained KV blocks (block i's id stands for tokens [0, (i+1)·block_size) of the prompt, so
two requests share block i only if they share everything before it too). Ids are remapped to dense ints
0..n-1 in order of first appearance, so the simulator can index arrays with them.

Mooncake format (kvcache-ai/Mooncake `FAST25-release/traces/*.jsonl`, github.com/kvcache-ai/Mooncake):
one JSON object per line, `{"timestamp": ms, "input_length": tok, "output_length": tok, "hash_ids": [...]}`,
512-token blocks, `len(hash_ids) == ceil(input_length / 512)`, sorted by timestamp.

Bad input is one BadInputError naming the file and line: a line that is not JSON, a missing or mistyped
field, empty `hash_ids`, more hash ids than `ceil(input_length / block_size)` (wrong `--trace-block-size`),
and a timestamp earlier than the line before (an unsorted trace is an error, not a warning: the replay
order is the file order, and a trace spliced out of order would silently replay a different workload;
`sort_by_time=True` / `--sort-trace` replays it in timestamp order instead, ties in file order).
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from vramctl.core.errors import BadInputError

MOONCAKE_BLOCK_SIZE = 512
"""Block size of the Mooncake FAST'25 traces (tokens per hash id)."""
MAX_SYNTHETIC_BLOCK_ACCESSES = 20_000_000
"""A synthetic trace larger than this would take minutes and gigabytes: refused up front."""


@dataclass(frozen=True)
class Trace:
    """Requests in replay order. Block ids are dense ints (first appearance order)."""

    block_size: int
    input_lengths: tuple[int, ...]
    output_lengths: tuple[int, ...]
    timestamps_s: tuple[float, ...]
    blocks: tuple[tuple[int, ...], ...]
    num_unique_blocks: int
    source: str = ""
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def num_requests(self) -> int:
        return len(self.input_lengths)

    @property
    def input_tokens(self) -> int:
        return sum(self.input_lengths)

    @property
    def duration_s(self) -> float:
        if not self.timestamps_s:
            return 0.0
        return self.timestamps_s[-1] - self.timestamps_s[0]


def _show(value: object) -> str:
    """repr, cut to 40 characters (a malformed field can be huge)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _field_int(obj: dict[str, object], key: str, *, where: str, minimum: int) -> int:
    if key not in obj:
        raise BadInputError(f"{where}: missing field {key!r}")
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInputError(f"{where}: {key} must be an integer, got {_show(value)}")
    if isinstance(value, float) and not value.is_integer():
        raise BadInputError(f"{where}: {key} must be an integer, got {_show(value)}")
    number = int(value)
    if number > 2**53:
        raise BadInputError(f"{where}: {key} {_show(number)} is absurdly large")
    if number < minimum:
        raise BadInputError(f"{where}: {key} must be >= {minimum}, got {number}")
    return number


def _build(
    rows: Sequence[tuple[float, int, int, Sequence[object], int]],
    *,
    block_size: int,
    source: str,
    sort_by_time: bool,
) -> Trace:
    """rows: (timestamp_s, input_length, output_length, raw hash ids, line number)."""
    if sort_by_time:
        rows = sorted(rows, key=lambda row: row[0])
    ids: dict[object, int] = {}
    blocks: list[tuple[int, ...]] = []
    mismatched = 0
    for _ts, length, _out, raw_ids, _line in rows:
        setdefault = ids.setdefault
        blocks.append(tuple([setdefault(h, len(ids)) for h in raw_ids]))
        if len(raw_ids) != -(-length // block_size):
            mismatched += 1
    warnings: list[str] = []
    if mismatched:
        warnings.append(
            f"{mismatched} of {len(rows)} requests have fewer hash ids than ceil(input_length / {block_size}): "
            f"their tail tokens can never hit; check --trace-block-size"
        )
    return Trace(
        block_size=block_size,
        input_lengths=tuple(row[1] for row in rows),
        output_lengths=tuple(row[2] for row in rows),
        timestamps_s=tuple(row[0] for row in rows),
        blocks=tuple(blocks),
        num_unique_blocks=len(ids),
        source=source,
        warnings=tuple(warnings),
    )


MAX_LINE_BYTES = 16 << 20
"""A trace line longer than 16 MiB is refused: a Mooncake request of 1 M tokens in 16-token blocks is ~1.3 MB of
JSON; a longer line is a file that is not a trace (`/dev/zero`, a binary) and would otherwise be read whole."""
_READ_CHUNK = 1 << 20
MAX_HASH_ID = (1 << 64) - 1
"""Integer hash ids are 64-bit (signed or unsigned); a larger one is a corrupt line."""


def _rows(
    lines: Iterable[str], *, block_size: int, source: str, sort_by_time: bool
) -> Iterator[tuple[float, int, int, list[object], int]]:
    """Validate Mooncake JSONL lines one by one: (timestamp_s, input_length, output_length, hash ids, line)."""
    if block_size <= 0:
        raise BadInputError(f"--trace-block-size {block_size}: must be a positive number of tokens")
    previous_ts = -math.inf
    previous_line = 0
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        where = f"{source} line {number}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise BadInputError(f"{where}: JSON nested too deeply to be a request") from None
        except ValueError:  # an integer of more than 4,300 digits (Python's int-from-text limit)
            raise BadInputError(f"{where}: a number too long to read (over 4,300 digits)") from None
        if not isinstance(obj, dict):
            raise BadInputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if "timestamp" not in obj:
            raise BadInputError(f"{where}: missing field 'timestamp'")
        ts_raw = obj["timestamp"]
        if isinstance(ts_raw, bool) or not isinstance(ts_raw, (int, float)):
            raise BadInputError(f"{where}: timestamp must be a number of milliseconds, got {_show(ts_raw)}")
        try:
            finite = math.isfinite(ts_raw)
        except OverflowError:
            finite = False
        if not finite:
            raise BadInputError(
                f"{where}: timestamp must be a finite number of milliseconds, got {_show(ts_raw)}"
            )
        length = _field_int(obj, "input_length", where=where, minimum=1)
        out = _field_int(obj, "output_length", where=where, minimum=0)
        if "hash_ids" not in obj:
            raise BadInputError(f"{where}: missing field 'hash_ids'")
        raw_ids = obj["hash_ids"]
        if not isinstance(raw_ids, list):
            raise BadInputError(f"{where}: hash_ids must be a list, got {type(raw_ids).__name__}")
        if not raw_ids:
            raise BadInputError(
                f"{where}: hash_ids is empty (input_length {length} needs at least one block)"
            )
        for h in raw_ids:
            if isinstance(h, bool) or not isinstance(h, (int, str)):
                raise BadInputError(f"{where}: hash_ids must hold integers or strings, got {_show(h)}")
            if isinstance(h, int) and not -(1 << 63) <= h <= MAX_HASH_ID:
                raise BadInputError(
                    f"{where}: hash id {_show(h)} does not fit in 64 bits (a corrupt line, or ids that are not "
                    "block hashes)"
                )
        max_blocks = -(-length // block_size)
        if len(raw_ids) > max_blocks:
            raise BadInputError(
                f"{where}: {len(raw_ids)} hash ids for input_length {length} but ceil({length}/{block_size}) = "
                f"{max_blocks}; is --trace-block-size {block_size} right for this trace?"
            )
        ts = float(ts_raw) / 1000.0
        if ts < previous_ts and not sort_by_time:
            raise BadInputError(
                f"{where}: timestamp {ts_raw} is earlier than line {previous_line} ({previous_ts * 1000:g}); "
                f"the trace is not sorted by time (pass --sort-trace to replay it in timestamp order)"
            )
        previous_ts, previous_line = max(previous_ts, ts), number
        yield ts, length, out, raw_ids, number


def parse_mooncake_lines(
    lines: Iterable[str],
    *,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    source: str = "trace",
    sort_by_time: bool = False,
) -> Trace:
    """Parse Mooncake JSONL text lines (blank lines are skipped). Errors name `source` and the line number."""
    rows = list(_rows(lines, block_size=block_size, source=source, sort_by_time=sort_by_time))
    if not rows:
        raise BadInputError(f"{source}: no requests (empty trace)")
    return _build(rows, block_size=block_size, source=source, sort_by_time=sort_by_time)


def _bounded_lines(stream: BinaryIO, source: str) -> Iterator[bytes]:
    """The stream's lines (without the newline), read 1 MiB at a time; memory is bounded by the longest line,
    and a line over MAX_LINE_BYTES is an error (so `/dev/zero` fails after 16 MiB instead of filling memory)."""
    pending: list[bytes] = []
    pending_len = 0
    number = 0
    while True:
        chunk = stream.read(_READ_CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            cut = chunk.find(b"\n", start)
            if cut < 0:
                rest = chunk[start:]
                pending.append(rest)
                pending_len += len(rest)
                if pending_len > MAX_LINE_BYTES:
                    raise BadInputError(
                        f"{source} line {number + 1}: longer than {MAX_LINE_BYTES >> 20} MiB without a newline; "
                        "not a JSONL trace"
                    )
                break
            piece = chunk[start:cut]
            if pending_len + len(piece) > MAX_LINE_BYTES:
                raise BadInputError(
                    f"{source} line {number + 1}: longer than {MAX_LINE_BYTES >> 20} MiB; not a JSONL trace"
                )
            if pending:
                pending.append(piece)
                piece = b"".join(pending)
                pending, pending_len = [], 0
            number += 1
            yield piece
            start = cut + 1
    if pending:
        yield b"".join(pending)


_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _text_lines(handle: BinaryIO, source: str) -> Iterator[str]:
    """Decode a (possibly gzip- or zstd-compressed) trace stream line by line, bounded."""
    import io

    buffered = handle if isinstance(handle, io.BufferedReader) else io.BufferedReader(handle)  # type: ignore[arg-type,type-var]
    head = buffered.peek(4)[:4]
    stream: BinaryIO = buffered
    kind = "plain"
    if head.startswith(_GZIP_MAGIC):
        import gzip

        stream = gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[assignment]
        kind = "gzip"
    elif head.startswith(_ZSTD_MAGIC):
        try:
            import zstandard
        except ImportError:
            raise BadInputError(
                f"{source}: zstd-compressed; reading it needs the zstandard package "
                "(pip install 'vramctl[tiers-scale]'), or decompress it first (zstd -d)"
            ) from None
        stream = zstandard.ZstdDecompressor().stream_reader(buffered)
        kind = "zstd"
    try:
        for number, raw in enumerate(_bounded_lines(stream, source), start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInputError(
                    f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start} of line {number})"
                ) from None
            if number == 1 and text.startswith("\ufeff"):
                # A byte-order mark (Windows editors, PowerShell's Out-File) is skipped, not a JSON error.
                text = text[1:]
            yield text
    except EOFError:
        raise BadInputError(
            f"{source}: truncated {kind} stream (it ends before its end-of-stream marker)"
        ) from None
    except (OSError, ValueError) as exc:
        if kind == "plain" and isinstance(exc, OSError):
            raise
        if isinstance(exc, BadInputError):
            raise
        raise BadInputError(f"{source}: corrupt {kind} data ({exc})") from None


def _open_trace(path: str | Path, source: str) -> BinaryIO:
    target = Path(path)
    try:
        return target.open("rb")
    except FileNotFoundError:
        raise BadInputError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise BadInputError(f"{source}: is a directory, expected a JSONL file") from None
    except OSError as exc:
        raise BadInputError(f"{source}: cannot read ({exc.strerror})") from None


def load_mooncake(
    path: str | Path, *, block_size: int = MOONCAKE_BLOCK_SIZE, sort_by_time: bool = False
) -> Trace:
    """Read a Mooncake-format JSONL trace file (plain, gzip, or zstd with the `zstandard` package)."""
    source = f"--trace {path}"
    handle = _open_trace(path, source)
    try:
        with handle:
            return parse_mooncake_lines(
                _text_lines(handle, source), block_size=block_size, source=source, sort_by_time=sort_by_time
            )
    except IsADirectoryError:
        raise BadInputError(f"{source}: is a directory, expected a JSONL file") from None
    except OSError as exc:
        raise BadInputError(f"{source}: cannot read ({exc.strerror or exc})") from None


# --------------------------------------------------------------------------------------------------
# Synthetic multi-turn chat


@dataclass(frozen=True)
class Distribution:
    """A non-negative random quantity: `const:V` (or a bare number), `exp:MEAN`, `uniform:LO:HI`,
    `lognormal:MEDIAN:SIGMA`."""

    kind: str
    params: tuple[float, ...]

    def sample(self, rng: random.Random) -> float:
        if self.kind == "const":
            return self.params[0]
        if self.kind == "exp":
            return rng.expovariate(1.0 / self.params[0]) if self.params[0] > 0 else 0.0
        if self.kind == "uniform":
            return rng.uniform(self.params[0], self.params[1])
        if self.kind == "lognormal":
            return rng.lognormvariate(math.log(self.params[0]), self.params[1])
        raise AssertionError(self.kind)

    @property
    def mean(self) -> float:
        if self.kind in ("const", "exp"):
            return self.params[0]
        if self.kind == "uniform":
            return (self.params[0] + self.params[1]) / 2
        return self.params[0] * math.exp(self.params[1] ** 2 / 2)

    def describe(self) -> str:
        return ":".join([self.kind, *(f"{p:g}" for p in self.params)])


_DIST_ARITY = {"const": 1, "exp": 1, "uniform": 2, "lognormal": 2}


def parse_distribution(text: str, *, what: str) -> Distribution:
    parts = [p.strip() for p in str(text).split(":")]
    if len(parts) == 1:
        parts = ["const", parts[0]]
    kind, raw = parts[0].lower(), parts[1:]
    if kind not in _DIST_ARITY:
        raise BadInputError(
            f"{what}={text!r}: unknown distribution {kind!r} (use N, const:N, exp:MEAN, uniform:LO:HI, "
            f"lognormal:MEDIAN:SIGMA)"
        )
    if len(raw) != _DIST_ARITY[kind]:
        raise BadInputError(f"{what}={text!r}: {kind} takes {_DIST_ARITY[kind]} number(s)")
    try:
        params = tuple(float(p) for p in raw)
    except ValueError:
        raise BadInputError(f"{what}={text!r}: not a number") from None
    if any(not math.isfinite(p) or p < 0 for p in params):
        raise BadInputError(f"{what}={text!r}: values must be finite and >= 0")
    if kind == "uniform" and params[0] > params[1]:
        raise BadInputError(f"{what}={text!r}: uniform needs LO <= HI")
    if kind == "lognormal" and params[0] <= 0:
        raise BadInputError(f"{what}={text!r}: lognormal needs a median > 0")
    return Distribution(kind, params)


@dataclass(frozen=True)
class SyntheticSpec:
    """A multi-turn chat workload (the shape of SGLang's `bench_multiturn` and of ShareGPT replays).

    `sessions` conversations start as a Poisson process at `session_rate` per second; each has `turns`
    turns. Turn r sends the shared system prompt, the whole history (every earlier prompt and answer) and a
    new prompt; the next turn comes `think` seconds after this one's answer (answers take
    answer_tokens / `decode_rate` seconds). Block ids are prefix-chained per session, with the system
    prompt's full blocks shared by every session; a partial last block is its own id (its content changes
    when the next turn extends it), as in the Mooncake traces.
    """

    sessions: int = 100
    turns: int = 5
    think: Distribution = Distribution("exp", (240.0,))
    prompt: Distribution = Distribution("const", (512.0,))
    answer: Distribution = Distribution("const", (256.0,))
    system: int = 0
    session_rate: float = 1.0
    decode_rate: float = 50.0
    seed: int = 0

    def describe(self) -> str:
        return (
            f"sessions={self.sessions},turns={self.turns},think={self.think.describe()},"
            f"prompt={self.prompt.describe()},answer={self.answer.describe()},system={self.system},"
            f"rate={self.session_rate:g},decode={self.decode_rate:g},seed={self.seed}"
        )


_SYNTH_KEYS = ("sessions", "turns", "think", "prompt", "answer", "system", "rate", "decode", "seed")


def parse_synthetic(text: str) -> SyntheticSpec:
    """`sessions=200,turns=6,think=exp:240,prompt=exp:400,answer=300,system=1024,rate=0.5,seed=7`."""
    values: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in re.split(r"[,\s]+", text))):
        if "=" not in item:
            raise BadInputError(
                f"--synthetic {text!r}: {item!r} is not key=value (keys: {', '.join(_SYNTH_KEYS)})"
            )
        key, value = (s.strip() for s in item.split("=", 1))
        if key not in _SYNTH_KEYS:
            raise BadInputError(f"--synthetic: unknown key {key!r} (keys: {', '.join(_SYNTH_KEYS)})")
        values[key] = value
    spec = SyntheticSpec()

    def integer(key: str, default: int, minimum: int) -> int:
        if key not in values:
            return default
        try:
            number = int(values[key].replace("_", ""))
        except ValueError:
            raise BadInputError(f"--synthetic {key}={values[key]!r}: not an integer") from None
        if number < minimum:
            raise BadInputError(f"--synthetic {key}={number}: must be >= {minimum}")
        return number

    def positive(key: str, default: float) -> float:
        if key not in values:
            return default
        try:
            number = float(values[key])
        except ValueError:
            raise BadInputError(f"--synthetic {key}={values[key]!r}: not a number") from None
        if not math.isfinite(number) or number <= 0:
            raise BadInputError(f"--synthetic {key}={values[key]}: must be a positive number")
        return number

    return SyntheticSpec(
        sessions=integer("sessions", spec.sessions, 1),
        turns=integer("turns", spec.turns, 1),
        think=parse_distribution(values["think"], what="--synthetic think")
        if "think" in values
        else spec.think,
        prompt=parse_distribution(values["prompt"], what="--synthetic prompt")
        if "prompt" in values
        else spec.prompt,
        answer=parse_distribution(values["answer"], what="--synthetic answer")
        if "answer" in values
        else spec.answer,
        system=integer("system", spec.system, 0),
        session_rate=positive("rate", spec.session_rate),
        decode_rate=positive("decode", spec.decode_rate),
        seed=integer("seed", spec.seed, 0),
    )


def synthetic_trace(spec: SyntheticSpec, *, block_size: int = MOONCAKE_BLOCK_SIZE) -> Trace:
    """Generate the requests of `spec` (deterministic for a given seed), sorted by arrival time."""
    if block_size <= 0:
        raise BadInputError(f"--trace-block-size {block_size}: must be a positive number of tokens")
    if spec.sessions * spec.turns > 5_000_000:
        raise BadInputError(
            f"--synthetic sessions={spec.sessions},turns={spec.turns}: {spec.sessions * spec.turns:,} requests is "
            f"more than 5,000,000"
        )
    rng = random.Random(spec.seed)
    # (time, session, turn, input_length, output_length)
    events: list[tuple[float, int, int, int, int]] = []
    start = 0.0
    for session in range(spec.sessions):
        if session:
            start += rng.expovariate(spec.session_rate)
        now = start
        context = spec.system
        for turn in range(spec.turns):
            prompt = max(1, round(spec.prompt.sample(rng)))
            answer = max(0, round(spec.answer.sample(rng)))
            context += prompt
            events.append((now, session, turn, context, answer))
            context += answer
            now += answer / spec.decode_rate + spec.think.sample(rng)
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    total_blocks = sum(-(-e[3] // block_size) for e in events)
    if total_blocks > MAX_SYNTHETIC_BLOCK_ACCESSES:
        raise BadInputError(
            f"--synthetic {spec.describe()}: {total_blocks:,} block accesses at --trace-block-size {block_size} is more than "
            f"{MAX_SYNTHETIC_BLOCK_ACCESSES:,}; use fewer sessions/turns, shorter prompts or larger blocks"
        )
    rows: list[tuple[float, int, int, Sequence[object], int]] = []
    for index, (ts, session, _turn, length, answer) in enumerate(events):
        raw: list[object] = []
        nblocks = -(-length // block_size)
        for j in range(nblocks):
            filled = min(block_size, length - j * block_size)
            if filled == block_size and (j + 1) * block_size <= spec.system:
                raw.append(("sys", j))
            else:
                raw.append((session, j, filled))
        rows.append((ts, length, answer, raw, index + 1))
    return _build(rows, block_size=block_size, source=f"--synthetic {spec.describe()}", sort_by_time=False)


def to_mooncake_jsonl(trace: Trace) -> str:
    """The trace as Mooncake JSONL (dense ints as hash_ids, timestamps in ms): `--save-trace` writes this."""
    lines = []
    for ts, length, out, blocks in zip(
        trace.timestamps_s, trace.input_lengths, trace.output_lengths, trace.blocks, strict=True
    ):
        stamp = round(ts * 1000, 3)
        lines.append(
            json.dumps(
                {
                    "timestamp": int(stamp) if float(stamp).is_integer() else stamp,
                    "input_length": length,
                    "output_length": out,
                    "hash_ids": list(blocks),
                }
            )
        )
    return "\n".join(lines) + "\n"
