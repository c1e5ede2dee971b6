"""`python -m vramctl` (and the `vramctl` script): the CLI.

Also the way to run it without an installed entry point (e.g. a GPU machine with no network, where the checkout is
put on PYTHONPATH instead of installed; scripts/gpu-check.sh runs it this way). Ctrl-C and SIGTERM are answered
from the first line on (exit 130 / 143, one line), before the CLI's modules are even imported.
"""

from vramctl.core.interrupts import install_early


def run() -> None:
    install_early()
    import sys

    from vramctl.cli.lean import end_run, lean_command, skip_exit_collection

    code = lean_command(sys.argv[1:])  # `explain-oom --json LOG` without typer's start-up; None: any other line
    if code is not None:
        skip_exit_collection()
        end_run(code)
    from vramctl.cli.main import entry

    entry()


if __name__ == "__main__":
    run()
