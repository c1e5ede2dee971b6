"""The command line: one module per command, each parse → one library call → render."""

from __future__ import annotations

import contextlib
import sys


def _tolerate_non_utf8_stdout() -> None:
    """A stdout that cannot encode UTF-8 (LC_ALL=POSIX with PYTHONCOERCECLOCALE=0, PYTHONIOENCODING=ascii, a bare
    container): print `?` for × ≥ → rather than die half-way with UnicodeEncodeError (was exit 70). JSON stays exact:
    vramctl.render.jsonout escapes non-ASCII text for such a stream."""
    stream = sys.stdout
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "")
    if not encoding.startswith("utf") and hasattr(stream, "reconfigure"):
        with contextlib.suppress(Exception):
            stream.reconfigure(errors="replace")


_tolerate_non_utf8_stdout()
