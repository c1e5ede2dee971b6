"""Placeholder: the owner of this command replaces this module."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's command(s) to the app."""
