"""The pure core: specs, units, ledgers and engine semantics. Imports no torch, typer, rich or pynvml."""
