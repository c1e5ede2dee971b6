"""Write output files atomically, and never replace what is not a regular file.

A write goes to a temporary file in the target's folder (`.NAME.<pid>.<random>.tmp`), is fsynced, then renamed
over the target: a crash, Ctrl-C or SIGTERM leaves the old file or the new one, never half of one.

The target is checked first (`output_target`): a name that does not exist yet, or a regular file, is written; a
symbolic link is followed to its final target, which must itself be absent or a regular file (the link stays a
link, the file it points to is replaced); a FIFO, a device node (`/dev/null`, `/dev/stdout`), a socket or a folder
is refused with one line (exit 2). Renaming over `/dev/null` as root would replace the system's node.

A temporary file left by a process killed with SIGKILL carries that process's id in its name; the next write to
the same target removes it once that process is gone (`remove_stale_temporaries`).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path

from vramctl.core.errors import BadInputError

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def output_target(path: str | os.PathLike[str], *, flag: str = "--save") -> Path:
    """Where a write to `path` lands: `path` itself (absent, or a regular file), or the regular file (or absent
    name) a symbolic link at `path` finally points to. Anything else is a BadInputError naming `flag`."""
    target = Path(path)
    try:
        link = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise BadInputError(f"{flag} {path}: cannot use it ({exc.strerror or exc})") from None
    if not stat.S_ISLNK(link.st_mode):
        _refuse_special(link.st_mode, path, flag)
        return target
    try:
        final = os.stat(target)  # follows every link
    except FileNotFoundError:
        final = None
    except OSError as exc:  # a loop of links, a permission problem on the way
        raise BadInputError(
            f"{flag} {path}: cannot follow the symbolic link ({exc.strerror or exc})"
        ) from None
    if final is not None:
        _refuse_special(final.st_mode, path, flag, through_link=True)
    resolved = Path(os.path.realpath(target))
    if final is None and not resolved.parent.is_dir():
        raise BadInputError(f"{flag} {path}: a symbolic link to {resolved}, whose folder does not exist")
    if final is not None:
        try:
            same = os.path.samefile(resolved, target)
        except OSError:
            same = False
        if not same:  # a /proc/self/fd/N magic link that realpath cannot name: nothing regular to write to
            raise BadInputError(
                f"{flag} {path}: a symbolic link whose target cannot be named; not writing through it"
            )
    return resolved


def _refuse_special(
    mode: int, path: str | os.PathLike[str], flag: str, *, through_link: bool = False
) -> None:
    if stat.S_ISREG(mode):
        return
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    via = "a symbolic link to " if through_link else ""
    raise BadInputError(
        f"{flag} {path}: is {via}{kind}, not a regular file; not replacing it (give a file name)"
    )


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, flag: str = "--save") -> Path:
    """Write `data` to `path` (through a symbolic link to its regular target) atomically; return the file written.

    BadInputError for a target that is not a regular file; OSError (disk full, read-only folder) from the write,
    with the temporary file removed and the old file intact."""
    target = output_target(path, flag=flag)
    directory = target.parent if str(target.parent) else Path(".")
    remove_stale_temporaries(target)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=directory)
    try:
        # mkstemp creates 0600; give the file the mode a plain open() would (or keep the replaced file's).
        os.fchmod(fd, _mode_for(target))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        output_target(target, flag=flag)  # checked again just before the rename: a FIFO made meanwhile stays
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    return target


def write_text_atomic(path: str | os.PathLike[str], text: str, *, flag: str = "--save") -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"), flag=flag)


def _mode_for(target: Path) -> int:
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove `.NAME.<pid>.*.tmp` files next to `target` whose process is gone (a SIGKILL during a save).

    A temporary of a process still running (another save in progress) and any file not in this exact form are
    left alone. Returns what was removed."""
    directory = target.parent if str(target.parent) else Path(".")
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(\d+)\.[A-Za-z0-9_]+\.tmp$")
    removed: list[Path] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = pattern.match(name)
        if match is None or process_alive(int(match.group(1))):
            continue
        leftover = directory / name
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(leftover).st_mode):
                os.unlink(leftover)
                removed.append(leftover)
    return removed


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (one we may not signal counts as alive)."""
    if pid == os.getpid():
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    except OverflowError:
        return False
    return True
