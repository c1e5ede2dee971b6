"""The entry point: usage errors are one line with exit 2; help and version; the lazy command group."""

from __future__ import annotations

import pytest

from vramctl.cli.main import COMMAND_MODULES, main
from vramctl.core.exit_codes import ExitCode


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "--bogus"], "No such option: --bogus"),
        (["check"], "Missing argument 'SPEC'"),
        (["tiers", "simulate", "--block-size", "abc"], "'abc' is not a valid int"),
        (["no-such-command"], "No such command"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("vramctl: error: ") and needle in err and "--help" in err


def test_group_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiers"]) == 0
    assert "simulate" in capsys.readouterr().out


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("vramctl ")
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMAND_MODULES:
        assert name in out


def test_every_listed_command_is_defined_by_its_module() -> None:
    from vramctl.cli.main import LazyCommandGroup

    group = LazyCommandGroup()
    for name in COMMAND_MODULES:
        assert group.get_command(None, name) is not None, name
    assert group.get_command(None, "nope") is None


def test_recursion_error_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import vramctl.cli.main as cli_main

    def deep(*_: object, **__: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(cli_main, "app", deep)
    assert main(["plan"]) == ExitCode.BAD_INPUT
    assert "nested too deeply" in capsys.readouterr().err


def test_unexpected_exception_is_one_line_exit_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import vramctl.cli.main as cli_main

    def boom(*_: object, **__: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(cli_main, "app", boom)
    monkeypatch.delenv("VRAMCTL_DEBUG", raising=False)
    assert main(["plan"]) == ExitCode.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ZeroDivisionError" in err and "VRAMCTL_DEBUG" in err
