"""Write the fake Hub repos under repos/ (run once; the output is committed): configs with the fields of the
public checkpoints they are named after, and safetensors headers built from those shapes (no weights)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parent / "repos"
ELEMENT = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I32": 4, "U8": 1, "I8": 1}


def llama_tensors(
    cfg: dict[str, Any], linear: str = "BF16", scales: str | None = None
) -> list[tuple[str, str, list[int]]]:
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim", h // heads)
    out: list[tuple[str, str, list[int]]] = [("model.embed_tokens.weight", "BF16", [v, h])]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out += [
            (p + "input_layernorm.weight", "BF16", [h]),
            (p + "post_attention_layernorm.weight", "BF16", [h]),
        ]
        for name, rows, cols in (
            ("self_attn.q_proj", heads * d, h),
            ("self_attn.k_proj", kv * d, h),
            ("self_attn.v_proj", kv * d, h),
            ("self_attn.o_proj", h, heads * d),
            ("mlp.gate_proj", i, h),
            ("mlp.up_proj", i, h),
            ("mlp.down_proj", h, i),
        ):
            out.append((p + name + ".weight", linear, [rows, cols]))
            if scales:
                out.append((p + name + ".weight_scale", scales, [rows, 1]))
    out.append(("model.norm.weight", "BF16", [h]))
    if not cfg.get("tie_word_embeddings"):
        out.append(("lm_head.weight", "BF16", [v, h]))
    return out


def header(tensors: list[tuple[str, str, list[int]]]) -> dict[str, Any]:
    doc: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        n = ELEMENT[dtype]
        for s in shape:
            n *= s
        doc[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    return doc


def write(repo: str, files: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
    folder = ROOT / repo
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content, indent=1)
        (folder / name).write_text(text)
    if meta:
        (folder / "_repo.json").write_text(json.dumps(meta))


LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": 128040,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
LLAMA_32_1B = {
    **LLAMA_31_8B,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "head_dim": 64,
    "tie_word_embeddings": True,
    "rope_scaling": {**LLAMA_31_8B["rope_scaling"], "factor": 32.0},  # type: ignore[dict-item]
}
FP8_DYNAMIC = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head"],
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": 8,
                "type": "float",
                "strategy": "channel",
                "symmetric": True,
                "dynamic": False,
            },
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
        }
    },
}


def main() -> None:
    shutil.rmtree(ROOT, ignore_errors=True)
    # A sharded bf16 checkpoint (index + 2 shards), named after a real public repo that is not bundled.
    tensors = llama_tensors(LLAMA_31_8B)
    half = len(tensors) // 2
    shards = {
        "model-00001-of-00002.safetensors": tensors[:half],
        "model-00002-of-00002.safetensors": tensors[half:],
    }
    files: dict[str, Any] = {"config.json": LLAMA_31_8B}
    weight_map = {}
    for shard, part in shards.items():
        files[shard + ".header"] = json.dumps(header(part), separators=(",", ":"))
        weight_map.update({name: shard for name, _, _ in part})
    files["model.safetensors.index.json"] = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    write(
        "NousResearch/Hermes-3-Llama-3.1-8B",
        files,
        {"revisions": {"v1.0": "1111111111111111111111111111111111111111"}},
    )
    # A single-file compressed-tensors FP8-dynamic checkpoint (FP8 weights + a bf16 scale per output row).
    fp8 = {**LLAMA_32_1B, "quantization_config": FP8_DYNAMIC}
    one = header(llama_tensors(LLAMA_32_1B, linear="F8_E4M3", scales="BF16"))
    write(
        "RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic",
        {"config.json": fp8, "model.safetensors.header": json.dumps(one)},
    )
    # A gated repo (token hf_fake_token grants it).
    small = header(llama_tensors({**LLAMA_32_1B, "num_hidden_layers": 2}))
    write(
        "gated-org/Gated-1B",
        {
            "config.json": {**LLAMA_32_1B, "num_hidden_layers": 2},
            "model.safetensors.header": json.dumps(small),
        },
        {"gated_token": "hf_fake_token", "commit": "2222222222222222222222222222222222222222"},
    )
    # Bad repos.
    write(
        "bad-org/malformed-config",
        {"config.json": '{"architectures": ["LlamaForCausalLM"], "hidden_size": 40'},
    )
    write(
        "bad-org/huge-config",
        {"config.json": json.dumps(LLAMA_32_1B)},
        {"sizes": {"config.json": 100_000_000}},
    )
    write("bad-org/no-config", {"README.md": "# a GGUF-only repo\n"})
    write(
        "bad-org/diffusers-unet", {"config.json": {"_class_name": "UNet2DConditionModel", "sample_size": 64}}
    )
    write(
        "bad-org/malformed-header",
        {
            "config.json": LLAMA_32_1B,
            "model.safetensors.header": '{"model.embed_tokens.weight": {"dtype": "BF16", "sha',
        },
    )
    wrong = header(llama_tensors({**LLAMA_32_1B, "num_hidden_layers": 2}))
    wrong["model.norm.weight"]["shape"] = [7]  # the offsets say 2048 elements
    write(
        "bad-org/inconsistent-header",
        {"config.json": LLAMA_32_1B, "model.safetensors.header": json.dumps(wrong)},
    )
    write("bad-org/bin-only", {"config.json": LLAMA_32_1B, "pytorch_model.bin": "not read"})
    write("slow-org/Slow-1B", {"config.json": LLAMA_32_1B}, {"delay_s": 4})
    # A ModelOpt FP8 export: quantisation in hf_quant_config.json, not config.json; F32 scalar scales.
    modelopt = []
    for name, dtype, shape in llama_tensors(LLAMA_32_1B, linear="F8_E4M3"):
        modelopt.append((name, dtype, shape))
        if dtype == "F8_E4M3":
            modelopt += [
                (name.replace(".weight", ".weight_scale"), "F32", []),
                (name.replace(".weight", ".input_scale"), "F32", []),
            ]
    hf_quant = {
        "producer": {"name": "modelopt", "version": "0.19.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]},
    }
    write(
        "nvidia/Llama-3.2-1B-Instruct-FP8",
        {
            "config.json": LLAMA_32_1B,
            "hf_quant_config.json": hf_quant,
            "model.safetensors.header": json.dumps(header(modelopt)),
        },
    )


if __name__ == "__main__":
    main()
