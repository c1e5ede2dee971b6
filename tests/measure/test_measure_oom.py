"""OOM recognition: direct, and underneath the error that follows it (torch.cuda.graph's capture_end)."""

from __future__ import annotations

from pathlib import Path

import pytest
from measure_helpers import FAST, TINY_CONFIG

from vramctl.cli.main import main
from vramctl.measure.oom import is_oom, oom_context, oom_root

torch = pytest.importorskip("torch")


def _capture_end_failure() -> RuntimeError:
    """What an OOM inside `with torch.cuda.graph(...)` looks like: __exit__'s capture_end raises next."""
    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
        except torch.OutOfMemoryError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")  # noqa: B904
    except RuntimeError as exc:
        return exc


def test_oom_is_found_under_the_following_error() -> None:
    exc = _capture_end_failure()
    assert is_oom(exc)
    root = oom_root(exc)
    assert isinstance(root, torch.OutOfMemoryError)
    ctx = oom_context(exc, phase="graph-capture", device="cuda:0")
    assert "Tried to allocate 2.00 GiB" in ctx.message and ctx.message.startswith("OutOfMemoryError")


def test_plain_errors_are_not_oom() -> None:
    assert not is_oom(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_oom(ValueError("out of range"))
    assert is_oom(MemoryError())
    assert is_oom(
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
    )


def test_chained_oom_mid_profile_is_exit_5(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from vramctl.measure import model as model_module

    (tmp_path / "config.json").write_text(json.dumps(TINY_CONFIG))

    def boom(self: object, *args: object, **kwargs: object) -> object:
        raise _capture_end_failure()

    monkeypatch.setattr(model_module.ReferenceModel, "sampler_warmup", boom)
    code = main(["profile", str(tmp_path), *FAST])
    err = capsys.readouterr().err
    assert code == 5
    assert "out of memory on cpu during profiling (sampler warm-up)" in err
    assert "Tried to allocate 2.00 GiB" in err and "--max-num-seqs" in err
    assert "Traceback" not in err
