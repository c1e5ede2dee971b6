"""GPT-2, GPT-J, Bloom, Falcon and DBRX configs → the field names and block layout the rest of the registry reads.

Their config.json files keep their own names (`n_embd`, `n_layer`, `n_head`, `n_positions`, `n_inner`: the
`attribute_map` of transformers 5.19's GPT2Config / GPTJConfig / BloomConfig) and blocks unlike Llama's: LayerNorms
with a bias, an MLP of two projections without a gate, biases on the projections. vLLM 0.32 serves them with
gpt2.py, gpt_j.py, bloom.py and falcon.py. `spec_from_config` books every LEGACY_TYPES model ungated with LayerNorm
biases, and reads the norms per block from the private key `_norms_per_layer` set here.
"""

from __future__ import annotations

from typing import Any

_NAMES = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_inner": "intermediate_size",
}
LEGACY_TYPES = {"gpt2", "gptj", "bloom", "falcon"}


def dbrx_names(config: dict[str, Any]) -> dict[str, Any]:
    """DBRX (DbrxConfig, vLLM 0.32 dbrx.py:63-87, 158-169, 197-221): `d_model`, `n_heads`, `n_layers`, and the nested
    `attn_config.kv_n_heads`, `ffn_config.ffn_hidden_size` (each expert's width), `moe_num_experts`, `moe_top_k`. Its
    blocks are Llama's with gated experts on every layer and two bias-free LayerNorms (transformers DbrxBlock)."""
    if str(config.get("model_type")) != "dbrx":
        return config
    out = dict(config)
    raw_attn, raw_ffn = out.get("attn_config"), out.get("ffn_config")
    attn: dict[str, Any] = raw_attn if isinstance(raw_attn, dict) else {}
    ffn: dict[str, Any] = raw_ffn if isinstance(raw_ffn, dict) else {}
    names = {
        "hidden_size": out.get("d_model"),
        "num_attention_heads": out.get("n_heads"),
        "num_hidden_layers": out.get("n_layers"),
        "num_key_value_heads": attn.get("kv_n_heads"),
        "intermediate_size": ffn.get("ffn_hidden_size"),
        "num_local_experts": ffn.get("moe_num_experts"),
        "num_experts_per_tok": ffn.get("moe_top_k"),
    }
    for ours, value in names.items():
        if value is not None and out.get(ours) is None:
            out[ours] = value
    return out


def legacy_layout(config: dict[str, Any]) -> dict[str, Any]:
    """The config with standard names and layout keys added; other model types unchanged.

    - GPT-2 / Bloom: q/k/v and output biases, MLP biases, 2 LayerNorms per block; the MLP is 4 × hidden when
      `n_inner` is null (GPT2MLP, BloomMLP). GPT-2 also has a learned position table (`spec_from_config`).
    - GPT-J: no attention biases, MLP fc_in / fc_out with biases, one LayerNorm per block (attention and MLP in
      parallel, vLLM gpt_j.py GPTJBlock). Its lm_head bias (vocab) and Bloom's embedding LayerNorm (2 × hidden)
      are left out (< 0.01 %).
    - Falcon (vLLM falcon.py:113-121, 235, 284-305): KV heads = `num_kv_heads` with `new_decoder_architecture`, 1
      with `multi_query`, else the heads; MLP 4 × hidden whatever `ffn_hidden_size` says (vLLM's FalconMLP);
      `bias` on every projection; one LayerNorm per parallel block, two with `num_ln_in_parallel_attn` 2 (the
      default of the new architecture) or without `parallel_attn`.
    """
    kind = str(config.get("model_type"))
    if kind not in LEGACY_TYPES:
        return config
    out = dict(config)
    for theirs, ours in _NAMES.items():
        if out.get(theirs) is not None and out.get(ours) is None:
            out[ours] = out[theirs]
    hidden = out.get("hidden_size")
    if kind == "falcon":
        if isinstance(hidden, int):
            out["intermediate_size"] = 4 * hidden
        new_arch = out.get("new_decoder_architecture") is True
        if out.get("num_key_value_heads") is None:
            multi_query = out.get("multi_query", True) is not False
            heads = out.get("num_kv_heads") if new_arch else 1 if multi_query else None
            if heads is not None:
                out["num_key_value_heads"] = heads
        bias = out.get("bias") is True
        out.setdefault("attention_bias", bias)
        out.setdefault("mlp_bias", bias)
        raw_lns = out.get("num_ln_in_parallel_attn")
        lns = raw_lns if raw_lns in (1, 2) and not isinstance(raw_lns, bool) else (2 if new_arch else 1)
        out["_norms_per_layer"] = lns if out.get("parallel_attn", True) is not False else 2
    else:
        if out.get("intermediate_size") is None and isinstance(hidden, int):
            out["intermediate_size"] = 4 * hidden
        out.setdefault("attention_bias", kind != "gptj")
        out.setdefault("mlp_bias", True)
        out["_norms_per_layer"] = 1 if kind == "gptj" else 2
    return out
