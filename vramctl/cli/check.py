"""`vramctl check deploy.yaml`: exit 0 when the deployment meets every memory requirement, 1 when one fails
(with the numbers and the flag to change), 2 on a bad spec. A CI gate (docs/check.md, docs/ci.md).

Parse the spec (pure: vramctl.core.check.parse_spec) → load the model and GPU (registry) → run_check → render.
Never imports torch.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Optional

import typer

from vramctl.core.errors import BadInputError, VramctlError
from vramctl.render.jsonout import dumps

MAX_SPEC_BYTES = 1 << 20


def _read_spec(path: str) -> str:
    if path == "-":
        import sys

        if sys.stdin is None:  # `vramctl check - <&-`
            raise BadInputError("<stdin>: standard input is closed; give the spec's path")
        stdin = getattr(sys.stdin, "buffer", None)
        try:
            data: str | bytes = (stdin or sys.stdin).read(MAX_SPEC_BYTES + 1)
        except (OSError, ValueError) as exc:
            raise BadInputError(
                f"<stdin>: cannot read it ({getattr(exc, 'strerror', None) or exc})"
            ) from None
        if len(data) > MAX_SPEC_BYTES:  # the rest must not be dropped silently: it may hold the requirements
            raise BadInputError("<stdin>: larger than 1 MiB, not a deployment spec")
        if isinstance(data, str):
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise BadInputError("<stdin>: not UTF-8 text") from None
    if not path.strip():
        raise BadInputError(f"SPEC {path!r}: empty file name (give a deployment spec YAML, or - for stdin)")
    spec = Path(path)
    try:
        spec.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInputError(f"{path}: a symbolic link loop, not a deployment spec") from None
        if exc.errno == errno.ENAMETOOLONG:
            raise BadInputError(f"{path}: file name too long for a deployment spec") from None
    if spec.is_dir():
        raise BadInputError(f"{path}: is a directory, expected a deployment spec (YAML file)")
    if not spec.exists():  # a pipe is fine: `vramctl check <(render-spec …)`
        raise BadInputError(f"{path}: no such spec file")
    try:
        with spec.open("rb") as handle:
            raw = handle.read(MAX_SPEC_BYTES + 1)  # not the whole file: a 1 GiB one would be read in full
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read it ({exc.strerror})") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise BadInputError(f"{path}: larger than 1 MiB, not a deployment spec")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInputError(f"{path}: not UTF-8 text") from None


def model_relative_to_spec(model: str, spec_path: str) -> str:
    """A model path in a spec is relative to the spec file's folder, not to where `check` runs (docs/check.md):
    `./model`, `../ckpt/config.json`, or any relative name that exists beside the spec. A Hub id or an alias
    (nothing of that name beside the spec) is left as it is; so is everything read from stdin."""
    if spec_path == "-":
        return model
    path = Path(model).expanduser()
    if path.is_absolute():
        return str(path)
    beside = Path(spec_path).resolve().parent / path
    looks_like_a_path = model.startswith(("./", "../", ".\\", "..\\")) or model.endswith(".json")
    try:
        exists = beside.exists()
    except OSError:  # a name too long for a path, or not a path at all: a model name, looked up as such
        exists = False
    if looks_like_a_path or exists:
        return str(beside)
    return model


def register(app: typer.Typer) -> None:
    """Add `check` to the app."""

    @app.command("check")
    def check(
        spec_path: str = typer.Argument(
            ..., metavar="SPEC", help="The deployment spec (YAML), or - for stdin."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print one JSON object (docs/check.md)."),
        markdown: bool = typer.Option(False, "--markdown", help="Print Markdown (a pull-request comment)."),
        host_memory: Optional[str] = typer.Option(
            None,
            "--host-memory",
            help="The serving host's RAM (e.g. 512GiB; a bare number is GiB), overriding the spec's host_memory.",
        ),
        against_version: Optional[str] = typer.Option(
            None,
            "--against-version",
            help="Also plan the deployment on this engine version (0.34.0, or sglang@0.5.23) and fail when it "
            "would not start or would lose more KV cache than --max-kv-loss (docs/diff.md).",
        ),
        max_kv_loss: str = typer.Option(
            "10%", "--max-kv-loss", help="With --against-version: the KV share an upgrade may lose (10%, 0.1)."
        ),
    ) -> None:
        """Check a deployment spec's memory requirements: exit 0 all hold, 1 one fails, 2 bad spec."""
        from dataclasses import replace

        from vramctl.cli.engine_flags import read_memory
        from vramctl.core.check import parse_spec, run_check
        from vramctl.core.engines.vllm_speculative import needs_draft_model
        from vramctl.registry import gpu_from_capacity, load_draft_model, load_gpu, load_model

        if json_out and markdown:
            raise BadInputError("--json and --markdown: pick one output format")
        source = "<stdin>" if spec_path == "-" else spec_path
        spec = parse_spec(_read_spec(spec_path), source=source)
        if host_memory is not None:
            host = read_memory(host_memory, "--host-memory") or 0
            if host <= 0:
                raise BadInputError(f"--host-memory {host_memory}: must be more than 0")
            spec = replace(spec, settings=spec.settings.with_changes(host_memory_bytes=host))
        try:
            model = load_model(model_relative_to_spec(spec.model, spec_path))
        except VramctlError as exc:
            raise BadInputError(f"{source}: model: {exc}") from None
        s = spec.settings
        if s.engine != "sglang" and needs_draft_model(s.speculative_method, s.speculative_model):
            assert s.speculative_model is not None
            try:
                draft = load_draft_model(model_relative_to_spec(s.speculative_model, spec_path))
            except VramctlError as exc:
                raise BadInputError(f"{source}: {exc}") from None
            spec = replace(spec, settings=s.with_changes(speculative_draft=draft))
        try:
            gpu = load_gpu(spec.gpu) if spec.gpu is not None else None
        except VramctlError as exc:
            raise BadInputError(f"{source}: gpu: {exc}") from None
        if gpu is None:
            assert spec.gpu_memory_bytes is not None
            gpu = gpu_from_capacity(spec.gpu_memory_bytes)
        try:
            result = run_check(spec, model, gpu)
            gate = None
            if against_version is not None:
                from vramctl.core.diff import upgrade_gate

                gate = upgrade_gate(spec, model, gpu, against=against_version, max_kv_loss=_share(max_kv_loss))
        except BadInputError as exc:
            raise BadInputError(f"{source}: {exc}") from None
        exit_code = int(result.exit_code)
        if gate is not None and not gate.passed:
            exit_code = max(exit_code, 1)
        if json_out:
            data = result.to_json()
            if gate is not None:
                data["upgrade"] = gate.to_json()
                data["passed"] = bool(data.get("passed", True)) and gate.passed
            typer.echo(dumps(data))
        elif markdown:
            from vramctl.render.check import check_markdown

            typer.echo(check_markdown(result), nl=False)
            if gate is not None:
                from vramctl.render.diff import diff_markdown

                state = "✅ passes" if gate.passed else "❌ fails"
                typer.echo(f"\n#### upgrade gate {state}: {gate.message}\n\n{diff_markdown(gate.diff)}", nl=False)
        else:
            from vramctl.render.check import render_check
            from vramctl.render.console import make_console

            console = make_console()
            console.print(render_check(result))
            if gate is not None:
                from rich.text import Text

                from vramctl.render.diff import render_diff

                state = "PASS" if gate.passed else "FAIL"
                console.print(Text(f"upgrade gate: {state}: {gate.message}", style="bold"))
                console.print(render_diff(gate.diff))
        raise typer.Exit(exit_code)


def _share(text: str) -> float:
    """`10%`, `10 %` or `0.1` → 0.1."""
    from vramctl.core.units import parse_number

    word = text.strip()
    if word.endswith("%"):
        return parse_number(word[:-1].strip(), what="--max-kv-loss") / 100
    return parse_number(word, what="--max-kv-loss")
