"""diagnose: read server logs (streaming) and explain their memory failures.

Public API:
- `diagnose(source) -> Diagnosis` and `diagnose_text(text) -> Diagnosis` (explain-oom),
- `iter_log_lines(source)` (the streaming reader, used by read-log too),
- `load_catalogue()` (the signature catalogue, data in catalogue.yaml), `LABELS`, `PHASES`.
"""

from vramctl.diagnose.catalogue import LABELS, PHASES, load_catalogue
from vramctl.diagnose.classify import Diagnosis, Evidence, FixAdvice, OtherFailure, diagnose, diagnose_text
from vramctl.diagnose.reader import LogLine, TruncatedInputError, iter_log_lines

__all__ = [
    "LABELS",
    "PHASES",
    "Diagnosis",
    "Evidence",
    "FixAdvice",
    "LogLine",
    "OtherFailure",
    "TruncatedInputError",
    "diagnose",
    "diagnose_text",
    "iter_log_lines",
    "load_catalogue",
]
