#!/usr/bin/env python3
"""Architecture coverage audit: write tests/fixtures/arch_audit/ from vLLM's model registry and transformers.

For every architecture in vLLM's text-generation registry (`_TEXT_GENERATION_MODELS` in
vllm/model_executor/models/registry.py) and every multimodal one (`_MULTIMODAL_MODELS`) whose transformers config
has a `text_config`, this builds the default config of the transformers config class (`AutoConfig.for_model`),
instantiates the transformers model on the meta device (no memory, no weights) and counts its parameters. One
JSON per architecture goes to tests/fixtures/arch_audit/ (the config as `to_dict()` writes it, the counts, the
KV-cache shape implied by the config, the library versions); `index.json` lists every registry architecture with
what happened to it (a fixture, no transformers config class, or the transformers error).

tests/registry/test_arch_audit.py then plans every fixture with vramctl (no transformers needed).

Run it with a Python that has vLLM, transformers and torch installed (vLLM is only read, not imported):

    python scripts/arch_audit.py            # rewrite every fixture
    python scripts/arch_audit.py --check    # compare with the stored fixtures, write nothing

The defaults are kept as they are (layer count included: layer patterns depend on it); the only changes are
`architectures`, which a default config leaves empty, and the FIXUPS below for the default configs transformers
itself cannot build a model from.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "arch_audit"
_TEXT_PREFIXES = ("model.language_model.", "language_model.", "model.text_model.", "lm_head.")


FIXUPS: dict[str, dict[str, Any]] = {
    # model_type → constructor arguments for a default config that transformers 5.19 cannot build a model from
    "nemotron": {
        "num_key_value_heads": 48
    },  # NemotronConfig leaves it null ("defaults to num_attention_heads",
    # 48) and NemotronAttention divides by it
    "dbrx": {"attn_config": {"rope_theta": 10000.0}},  # DbrxAttentionConfig has no rope_theta default
    # Idefics3Config / SmolVLMConfig default pad_token_id 128002 into a 32,000-row Llama text_config
    "idefics3": {"text_config": {"model_type": "llama", "pad_token_id": 0}},
    "smolvlm": {"text_config": {"model_type": "llama", "pad_token_id": 0}},
    # Granite4VisionConfig defaults a Llama text_config (vLLM 0.32 granite4_vision.py builds GraniteForCausalLM) and
    # no deepstack_layer_map (its model builds one downsampler per entry); one entry, as ibm-granite's checkpoints
    "granite4_vision": {"text_config": {"model_type": "granite"}, "deepstack_layer_map": [[-19, 0]], "downsample_rate": "4/8"},
    # CohereCompassTextConfig's default rope_parameters is {} but its attention reads one per layer type
    "cohere_compass": {
        "text_config": {
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            }
        }
    },
}


def vllm_registry() -> tuple[str, dict[str, dict[str, tuple[str, str]]]]:
    """(vLLM version, {"_TEXT_GENERATION_MODELS": …, "_MULTIMODAL_MODELS": …}) read from the source with `ast`."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vllm is not installed in this Python")
    pkg = Path(next(iter(spec.submodule_search_locations)))
    tree = ast.parse((pkg / "model_executor" / "models" / "registry.py").read_text())
    tables: dict[str, dict[str, tuple[str, str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            name = getattr(target, "id", "")
            if name in ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS") and node.value is not None:
                tables[name] = ast.literal_eval(node.value)
    version = "unknown"
    for line in (pkg / "_version.py").read_text().splitlines():
        if line.startswith(("__version__", "version")) and "=" in line:
            version = line.split("=", 1)[1].strip().strip("'\"")
            break
    return version, tables


def arch_to_model_type() -> dict[str, str]:
    """transformers class name → model_type, from every auto mapping (first mapping wins)."""
    from transformers.models.auto import modeling_auto

    out: dict[str, str] = {}
    for name in sorted(dir(modeling_auto)):
        if not name.endswith("_MAPPING_NAMES"):
            continue
        table = getattr(modeling_auto, name)
        if not hasattr(table, "items"):
            continue
        for model_type, classes in table.items():
            for cls in classes if isinstance(classes, list | tuple) else [classes]:
                out.setdefault(str(cls), str(model_type))
    return out


def model_class(arch: str, model_type: str) -> Any:
    """The transformers class of `arch`, else the causal-LM / image-text class of its model_type."""
    import transformers
    from transformers.models.auto import modeling_auto

    cls = getattr(transformers, arch, None)
    if cls is not None:
        return cls
    for table in (
        modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    ):
        name = table.get(model_type)
        if name and getattr(transformers, name, None) is not None:
            return getattr(transformers, name)
    return None


def kv_shape(cfg: Any) -> dict[str, Any]:
    """The KV-cache facts the config implies (per token, bf16): full attention layers × 2 × kv_heads × head_dim
    × 2 bytes; MLA: one latent of kv_lora_rank + qk_rope_head_dim per layer."""
    heads = getattr(cfg, "num_attention_heads", None)
    hidden = getattr(cfg, "hidden_size", None)
    layers = getattr(cfg, "num_hidden_layers", None)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or (hidden // heads if hidden and heads else None)
    out: dict[str, Any] = {
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "sliding_window": getattr(cfg, "sliding_window", None),
        "layer_types": sorted(set(getattr(cfg, "layer_types", None) or [])) or None,
    }
    rank = getattr(cfg, "kv_lora_rank", None)
    if rank:
        out["mla"] = {"kv_lora_rank": rank, "qk_rope_head_dim": getattr(cfg, "qk_rope_head_dim", None)}
        out["kv_bytes_per_token_bf16"] = (
            (rank + (getattr(cfg, "qk_rope_head_dim", 0) or 0)) * 2 * (layers or 0)
        )
    elif kv_heads and head_dim and layers:
        out["kv_bytes_per_token_bf16"] = 2 * kv_heads * head_dim * 2 * layers
    return out


def count(model: Any) -> dict[str, int]:
    """Parameters (tied ones once, as `named_parameters` yields them): all, the language model's (+ lm_head)."""
    total = text = 0
    for name, param in model.named_parameters():
        total += param.numel()
        if name.startswith(_TEXT_PREFIXES):
            text += param.numel()
    return {"total": total, "text": text}


def audit_one(arch: str, model_type: str, kind: str, versions: dict[str, str]) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig

    cls = model_class(arch, model_type)
    if cls is None:
        raise LookupError(f"transformers has no model class for {arch} ({model_type})")
    # the class's own config (Qwen3_5ForCausalLM → Qwen3_5TextConfig), else the model_type's
    own = getattr(cls, "config_class", None)
    fixups = FIXUPS.get(model_type, {})
    cfg = own(**fixups) if own is not None else AutoConfig.for_model(model_type, **fixups)
    text_cfg = getattr(cfg, "text_config", None)
    if kind == "multimodal" and text_cfg is None:
        raise LookupError("no text_config: vramctl plans a multimodal model through its text_config only")
    started = time.perf_counter()
    with torch.device("meta"):
        model = cls(cfg)
    counts = count(model)
    config = json.loads(cfg.to_json_string(use_diff=False))
    config["architectures"] = [arch]
    return {
        "architecture": arch,
        "model_type": str(config.get("model_type") or model_type),
        "kind": kind,
        "transformers_class": cls.__name__,
        "config": config,
        "transformers_params": counts["total"],
        "transformers_text_params": counts["text"] if kind == "multimodal" else counts["total"],
        "kv": kv_shape(text_cfg if text_cfg is not None else cfg),
        "versions": versions,
        "seconds": round(time.perf_counter() - started, 2),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the stored fixtures, write nothing"
    )
    parser.add_argument("only", nargs="*", help="architectures to audit (default: all)")
    args = parser.parse_args(argv)
    import torch
    import transformers

    vllm_version, tables = vllm_registry()
    versions = {"vllm": vllm_version, "transformers": transformers.__version__, "torch": torch.__version__}
    mapping = arch_to_model_type()
    lower = {k.lower(): v for k, v in mapping.items()}
    rows: list[dict[str, Any]] = []
    changed = 0
    for table, kind in (("_TEXT_GENERATION_MODELS", "text"), ("_MULTIMODAL_MODELS", "multimodal")):
        for arch in sorted(tables[table]):
            if args.only and arch not in args.only:
                continue
            row: dict[str, Any] = {"architecture": arch, "kind": kind, "vllm_module": tables[table][arch][0]}
            # vLLM's spelling may differ in case only (PhiMoEForCausalLM, transformers PhimoeForCausalLM)
            model_type = mapping.get(arch) or lower.get(arch.lower())
            if model_type is None:
                row["status"] = "no transformers class"
                rows.append(row)
                continue
            row["model_type"] = model_type
            try:
                result = audit_one(arch, model_type, kind, versions)
            except Exception as exc:  # any transformers failure is recorded, not fatal
                row["status"] = f"transformers failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                rows.append(row)
                print(f"{arch}: {row['status']}", file=sys.stderr)
                continue
            row["status"] = "fixture"
            rows.append(row)
            path = OUT / f"{arch}.json"
            text = (
                json.dumps({k: v for k, v in result.items() if k != "seconds"}, indent=1, sort_keys=True)
                + "\n"
            )
            old = path.read_text() if path.exists() else None
            if old != text:
                changed += 1
                if not args.check:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
            print(
                f"{arch}: {result['transformers_params']:,} params ({result['seconds']} s)", file=sys.stderr
            )
    if not args.only:
        index = json.dumps({"versions": versions, "architectures": rows}, indent=1, sort_keys=True) + "\n"
        index_path = OUT / "index.json"
        if not index_path.exists() or index_path.read_text() != index:
            changed += 1
            if not args.check:
                index_path.write_text(index)
    n_fix = sum(1 for r in rows if r["status"] == "fixture")
    print(f"{len(rows)} architectures, {n_fix} fixtures, {changed} changed", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
