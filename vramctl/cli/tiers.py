"""`vramctl tiers ...`: a command group; each subcommand lives in its own module."""

from __future__ import annotations

import typer

from vramctl.cli import tiers_bench, tiers_plan, tiers_simulate

tiers_app = typer.Typer(
    name="tiers",
    help="Host / disk / network KV tiers: when fetching beats recomputing, hit rates on real traces, real transfers.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    for module in (tiers_plan, tiers_simulate, tiers_bench):
        module.register(tiers_app)
    app.add_typer(tiers_app, name="tiers")
