"""Tiny ModelSpecs and configs for the measure tests: small enough that a profile runs on CPU in well under a second."""

from __future__ import annotations

from vramctl.core.specs import FULL_ATTENTION, SLIDING_ATTENTION, MLASpec, ModelSpec, MoESpec


def tiny_dense(**changes: object) -> ModelSpec:
    base = dict(
        name="test/tiny-llama",
        architecture="LlamaForCausalLM",
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=1024,
        max_position_embeddings=2048,
        torch_dtype="bfloat16",
        param_count=0,
        weight_bytes=0,
    )
    base.update(changes)
    spec = ModelSpec(**base)  # type: ignore[arg-type]
    return spec


def tiny_moe() -> ModelSpec:
    return tiny_dense(
        name="test/tiny-moe",
        architecture="Qwen3MoeForCausalLM",
        moe=MoESpec(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128),
    )


def tiny_mla() -> ModelSpec:
    return tiny_dense(
        name="test/tiny-mla",
        architecture="DeepseekV3ForCausalLM",
        num_key_value_heads=4,
        mla=MLASpec(kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, q_lora_rank=96),
        moe=MoESpec(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            num_shared_experts=1,
            first_k_dense_replace=1,
        ),
    )


def tiny_sliding() -> ModelSpec:
    return tiny_dense(
        name="test/tiny-gemma",
        layer_types=(SLIDING_ATTENTION, FULL_ATTENTION, SLIDING_ATTENTION, FULL_ATTENTION),
        sliding_window=32,
    )


TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}

# Flags that keep a CPU profile of the tiny model well under a second (bf16 elementwise ops are slow on
# CPUs without AVX512-BF16, so the tests run the model in float32).
FAST = [
    "--device",
    "cpu",
    "--device-memory",
    "2GiB",
    "--max-num-batched-tokens",
    "256",
    "--max-num-seqs",
    "8",
    "--dtype",
    "float32",
]
