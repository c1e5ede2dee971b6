"""vramctl: where an LLM inference server's GPU memory goes (vLLM, SGLang)."""

__version__ = "0.1.0"
