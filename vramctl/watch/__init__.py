"""`vramctl watch`: the live memory ledger of a running vLLM / SGLang server, its trends and alarms.

Pure layers (no torch, typer, rich, pynvml, prometheus_client): `promtext` (the Prometheus text format),
`engines` (vLLM / SGLang metric names by version), `procmem` (/proc and cgroup readers), `sample` (one
sample mapped onto the plan's ledger terms), `trends` (leak, fragmentation, neighbour, KV pool pinned),
`ring` (the bounded timeline file) and `timeline` (joining a timeline to a failure). The thin outer
layers: `exporter` (prometheus_client), `vramctl.measure.nvml` (pynvml), `vramctl.render.watch` (rich).
"""
