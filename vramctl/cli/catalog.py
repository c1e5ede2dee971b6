"""`vramctl models` and `vramctl gpus`: what the registry knows (or what it reads from a local model)."""

from __future__ import annotations

from typing import Optional

import typer

from vramctl.registry import list_gpus, list_models, load_gpu, load_model
from vramctl.registry.describe import gpu_to_json, model_to_json
from vramctl.render.catalog import gpus_table, model_details, models_table, print_table, print_text
from vramctl.render.jsonout import dumps


def register(app: typer.Typer) -> None:
    """Add `models` and `gpus` to the app."""

    @app.command("models")
    def models(
        name: Optional[str] = typer.Argument(
            None, help="One model: HF id, alias, or a local config.json / model folder / HF cache snapshot."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """List the bundled models, or show what vramctl reads for one model."""
        specs = [load_model(name)] if name else list_models()
        if json_out:
            typer.echo(dumps({"models": [model_to_json(spec) for spec in specs]}))
            return
        print_table(models_table(specs))
        if name:
            print_text(model_details(specs[0]))

    @app.command("gpus")
    def gpus(
        name: Optional[str] = typer.Argument(
            None, help="One GPU: id, alias, or its nvidia-smi / torch name."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """List the bundled GPUs (CUDA total as vLLM/torch report it, nvidia-smi MiB, links, FLOP/s)."""
        specs = [load_gpu(name)] if name else list_gpus()
        if json_out:
            typer.echo(dumps({"gpus": [gpu_to_json(spec) for spec in specs]}))
            return
        print_table(gpus_table(specs))
        if name:
            print_text("\n".join(f"  {fact}: {source}" for fact, source in specs[0].sources))
