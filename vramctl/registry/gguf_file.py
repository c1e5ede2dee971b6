"""A GGUF file's header → ModelSpec: the architecture's hyper-parameters and each tensor's quant type and bytes.

vLLM serves a single-file GGUF checkpoint (`vllm serve ./model-Q4_K_M.gguf --tokenizer ORG/NAME`,
vllm/model_executor/model_loader/gguf_loader.py) keeping every quantised tensor in its GGUF block format
(`GGUFLinearMethod`, `GGUFEmbeddingMethod`, vllm/model_executor/layers/quantization/gguf.py), so the weight bytes
are the tensors' own bytes as the header lists them. The header is read with the `gguf` package (llama.cpp's
reader; a memory map, the tensor data is never read). Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.specs import ModelSpec
from vramctl.core.units import format_bytes

ARCHITECTURES: dict[str, tuple[str, str]] = {
    # general.architecture → (HF architecture, model_type) as vLLM's GGUF loader maps them (transformers'
    # GGUF_SUPPORTED_ARCHITECTURES / GGUF_TO_TRANSFORMERS_MAPPING)
    "llama": ("LlamaForCausalLM", "llama"),
    "mistral": ("MistralForCausalLM", "mistral"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "qwen2moe": ("Qwen2MoeForCausalLM", "qwen2_moe"),
    "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
    "phi3": ("Phi3ForCausalLM", "phi3"),
    "gemma2": ("Gemma2ForCausalLM", "gemma2"),
    "stablelm": ("StableLmForCausalLM", "stablelm"),
    "starcoder2": ("Starcoder2ForCausalLM", "starcoder2"),
}


def _scalar(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        return field.contents()
    except (ValueError, IndexError, TypeError, UnicodeDecodeError):
        return None


def _int(reader: Any, key: str, where: str, default: int | None = None) -> int:
    value = _scalar(reader, key)
    if value is None:
        if default is None:
            raise BadInputError(f"{where}: GGUF key {key!r} is missing")
        return default
    if isinstance(value, list):  # per-layer arrays (head_count_kv of some exports): the first layer's
        value = value[0] if value else default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{where}: GGUF key {key!r} must be an integer, got {value!r:.40}") from None
    if number <= 0:
        raise BadInputError(f"{where}: GGUF key {key!r} must be positive, got {number}")
    return number


def read_gguf(path: Path) -> tuple[dict[str, Any], int, dict[str, int]]:
    """(an HF-style config, the tensors' total bytes, bytes by GGUF quant type) from a GGUF file's header."""
    try:
        import gguf
    except ImportError:
        raise BadInputError(
            f"--model {path}: reading a GGUF header needs the gguf package (`pip install gguf`); or pass the "
            "original model's config.json"
        ) from None
    where = str(path)
    try:
        reader = gguf.GGUFReader(path, "r")
    except (ValueError, OSError, KeyError, IndexError, TypeError, OverflowError, MemoryError) as exc:
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise BadInputError(f"{where}: not a readable GGUF file ({reason})") from None
    return config_from_reader(reader, where)


def config_from_reader(reader: Any, where: str) -> tuple[dict[str, Any], int, dict[str, int]]:
    """(an HF-style config, the tensors' total bytes, bytes by GGUF quant type) from a parsed header: the gguf
    package's GGUFReader or `vramctl.registry.gguf_header.GgufHeader` (a header read from the Hub)."""
    arch = _scalar(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise BadInputError(f"{where}: GGUF key 'general.architecture' is missing")
    if arch not in ARCHITECTURES:
        raise BadInputError(
            f"{where}: GGUF architecture {arch!r} is not one vramctl maps ({', '.join(sorted(ARCHITECTURES))}); "
            "pass the original model's config.json"
        )
    architecture, model_type = ARCHITECTURES[arch]
    heads = _int(reader, f"{arch}.attention.head_count", where)
    hidden = _int(reader, f"{arch}.embedding_length", where)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = _scalar(reader, f"{arch}.vocab_size")
    if vocab is None and tokens is not None:
        vocab = len(tokens.data)
    names = {t.name for t in reader.tensors}
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": _int(reader, f"{arch}.block_count", where),
        "num_attention_heads": heads,
        "num_key_value_heads": _int(reader, f"{arch}.attention.head_count_kv", where, default=heads),
        "max_position_embeddings": _int(reader, f"{arch}.context_length", where, default=2048),
        "vocab_size": int(vocab) if vocab else _int(reader, f"{arch}.vocab_size", where),
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": "output.weight" not in names,
    }
    head_dim = _scalar(reader, f"{arch}.attention.key_length")
    if head_dim:
        config["head_dim"] = int(head_dim)
    experts = _scalar(reader, f"{arch}.expert_count")
    if experts:
        config["num_experts"] = int(experts)
        config["num_experts_per_tok"] = _int(reader, f"{arch}.expert_used_count", where)
        config["moe_intermediate_size"] = _int(reader, f"{arch}.expert_feed_forward_length", where)
        config["intermediate_size"] = _int(
            reader, f"{arch}.feed_forward_length", where, default=config["moe_intermediate_size"]
        )
        shared = _scalar(reader, f"{arch}.expert_shared_feed_forward_length")
        if shared:
            config["shared_expert_intermediate_size"] = int(shared)
    else:
        config["intermediate_size"] = _int(reader, f"{arch}.feed_forward_length", where)
    window = _scalar(reader, f"{arch}.attention.sliding_window")
    if window:
        config["sliding_window"] = int(window)
    by_type: dict[str, int] = {}
    for tensor in reader.tensors:
        kind = getattr(tensor.tensor_type, "name", str(tensor.tensor_type))
        by_type[kind] = by_type.get(kind, 0) + int(tensor.n_bytes)
    total = sum(by_type.values())
    if total <= 0:
        raise BadInputError(f"{where}: a GGUF file without tensors")
    config["quantization_config"] = {"quant_method": "gguf", "bits": 4}
    return config, total, dict(sorted(by_type.items(), key=lambda kv: -kv[1]))


def load_gguf_model(path: Path, name: str) -> ModelSpec:
    """ModelSpec of a GGUF file: hyper-parameters from its metadata, weight bytes from its tensor list."""
    config, total, by_type = read_gguf(path)
    return gguf_spec(config, total, by_type, where=f"{path} (GGUF header)", name=name, file_name=path.name)


def gguf_spec(
    config: dict[str, Any], total: int, by_type: dict[str, int], *, where: str, name: str, file_name: str
) -> ModelSpec:
    """The ModelSpec of a GGUF header's config and tensor bytes (a local file or one read from the Hub)."""
    from vramctl.registry.models import spec_from_config

    kinds = ", ".join(f"{kind} {format_bytes(size)}" for kind, size in list(by_type.items())[:6])
    return spec_from_config(
        config,
        where=where,
        name=name,
        weight_bytes=total,
        sources=(
            ("config", f"{where}: general.architecture and {config['model_type']}.* keys"),
            (
                "weight_bytes",
                f"GGUF tensor list of {file_name}: {kinds} (vLLM keeps GGUF blocks as they are)",
            ),
            ("param_count", "formula (GGUF checkpoint)"),
        ),
    )
