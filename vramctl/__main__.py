"""`python -m vramctl`: the CLI without an installed entry point (e.g. a GPU machine with no network, where
the checkout is put on PYTHONPATH instead of installed; scripts/gpu-check.sh runs it this way)."""

from vramctl.cli.main import entry

entry()
