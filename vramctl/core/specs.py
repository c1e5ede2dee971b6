"""Typed, frozen descriptions of a model and a GPU: what every budget, profile and tier calculation reads.

The registry (vramctl/registry) builds these from profiles/*.yaml or a local config.json / model folder.
Everything here is pure data plus small derived properties; sizes are int bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vramctl.core.dsv4 import Dsv4Shape
from vramctl.core.gemma4 import Gemma4Shape

# Per-layer attention kinds, as config.json `layer_types` names them (HF transformers convention).
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
# Recurrent-state layers of hybrid models (docs/hybrid.md): a fixed-size state per request, no per-token KV.
MAMBA = "mamba"
"""A Mamba1 / Mamba2 mixer or short-convolution layer (Nemotron-H `M`, Granite-4.0-H `mamba`, Jamba, LFM2 `conv`)."""
LINEAR_ATTENTION = "linear_attention"
"""A Gated DeltaNet linear-attention layer (Qwen3-Next)."""
MLP_ONLY = "mlp_only"
"""A layer with no token mixer (Nemotron-H `-` MLP and `E` MoE layers): no cache at all."""
STATE_KINDS = frozenset({MAMBA, LINEAR_ATTENTION})

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "uint8": 1,
    "int4": 0.5,
    "fp4": 0.5,
    "mxfp4": 0.5,
    "nvfp4": 0.5,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of a dtype name (`bfloat16` → 2, `fp8` → 1, `int4` → 0.5)."""
    key = dtype.lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise KeyError(dtype)
    return DTYPE_BYTES[key]


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts feed-forward layers."""

    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    """Intermediate size of the shared expert MLP (total, not per shared expert); 0 when none."""
    first_k_dense_replace: int = 0
    """The first k layers use a dense MLP of `intermediate_size` (DeepSeek, Kimi)."""
    moe_layer_freq: int = 1
    moe_layer_offset: int = 0
    """MoE layers are those with `layer % moe_layer_freq == moe_layer_offset` (Jamba `expert_layer_offset`: 1)."""
    router_bias: bool = False
    """The router (gate) linear has a bias (gpt-oss)."""
    expert_bias: bool = False
    """Each expert's projections have biases (gpt-oss)."""
    score_correction_bias: bool = False
    """A per-expert routing bias tensor (DeepSeek-V3 `e_score_correction_bias`, noaux_tc)."""
    shared_expert_gate: bool = False
    """A sigmoid gate (hidden → 1) on the shared expert (Qwen2-MoE)."""
    layer_indices: tuple[int, ...] = ()
    """The MoE layers named one by one (Nemotron-H `E` layers); when set, first_k_dense_replace / moe_layer_freq /
    moe_layer_offset are not read."""
    gated_experts: bool = True
    """Routed and shared experts are gate + up + down (SwiGLU); False: up + down only (Nemotron-H relu²)."""
    latent_size: int = 0
    """Routed experts work in a latent width, with hidden → latent / latent → hidden projections around them
    (Nemotron-H `moe_latent_size`); 0: the hidden size."""


@dataclass(frozen=True)
class VisionTowerSpec:
    """The shape of a multimodal wrapper's vision tower that the engines' encoder profiling depends on (read from
    `vision_config` by vramctl.registry.vision_towers; the processors' defaults cited there).

    `family` names how the processor turns an image into tower patches and LM tokens: `qwen2_vl` / `qwen2_5_vl` /
    `qwen3_vl` (dynamic resolution up to `max_pixels`, `merge` × `merge` patches per token, video frames in pairs of
    `temporal_patch_size`), `siglip` (Gemma 3: one `image_size` crop, average-pooled to `tokens_per_crop`), `clip`
    (LLaVA-1.5: one crop, a token per patch), `llava_next` (a base crop + the best `image_grid_pinpoints` tiling),
    `llama4` (up to `max_crops` tiles + a global one, pixel-shuffled) and `pixtral` (one `image_size` image, 2 × 2
    merged)."""

    family: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    mlp_gated: bool
    """gate + up + down (Qwen2.5-VL, Pixtral) rather than fc1 + fc2."""
    patch_size: int
    out_hidden_size: int
    """Width of one encoder output token (the language model's hidden size; Qwen3-VL: × (1 + DeepStack levels))."""
    merge: int = 1
    """Patches per LM token along one edge (2: a 2 × 2 merger)."""
    temporal_patch_size: int = 1
    image_size: int = 0
    """Fixed-resolution towers: the crop edge in pixels (0 for dynamic resolution)."""
    max_pixels: int = 0
    """Dynamic-resolution towers: the image processor's largest image in pixels (its `max_pixels` / `longest_edge`)."""
    video_max_pixels: int = 0
    """Qwen3-VL: the video processor's `longest_edge` (frames × pixels of a temporal pair); 0: as images."""
    tokens_per_crop: int = 0
    """Fixed-resolution towers: LM tokens per crop (Gemma 3 `mm_tokens_per_image`, CLIP / Llama 4 tiles)."""
    max_crops: int = 1
    """Llama 4: tiles per image at most (the processor's `max_patches`)."""
    class_token: bool = False
    """The tower prepends a class token to each crop (CLIP, Llama 4)."""
    grid_pinpoints: tuple[tuple[int, int], ...] = ()
    """LLaVA-NeXT's `image_grid_pinpoints` (height, width)."""
    in_channels: int = 3


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one latent vector per token and layer."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    indexer_head_dim: int = 0
    """DeepSeek-V3.2's sparse-attention indexer (config `index_topk` / `index_head_dim`): its own K cache per layer
    and token, 0 for plain MLA."""
    indexer_heads: int = 0
    """The indexer's query heads (`index_n_heads`, 64 in V3.2): its weights (wq_b, weights_proj) scale with them."""
    indexer_topk: int = 0
    """Tokens each query attends to (`index_topk`, 2048): vLLM keeps a `max_num_batched_tokens × index_topk` int32
    buffer of the chosen indices (vramctl.core.weights.indexer_topk_buffer_bytes)."""

    @property
    def indexer_bytes_per_token(self) -> int:
        """vLLM `DeepseekV32IndexerCache`: an MLAAttentionSpec of head_size index_head_dim + index_head_dim // 128 × 4
        uint8 (FP8 values and a float32 scale per 128; vllm/model_executor/models/deepseek_v2.py), 132 B for 128."""
        if not self.indexer_head_dim:
            return 0
        return self.indexer_head_dim + self.indexer_head_dim // 128 * 4

    @property
    def latent_dim(self) -> int:
        """What vLLM caches per token and layer: kv_lora_rank + qk_rope_head_dim (e.g. 512 + 64 = 576)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class DerivedCheckpoint:
    """A pre-quantised checkpoint planned from a bundled base because its own config could not be had
    (`vramctl.registry.derived`): which base, which quantisation the name implies, and how sure the weights are."""

    checkpoint: str
    """The name asked for (`Lorbus/Qwen3.6-27B-int4-AutoRound`)."""
    base: str
    """The bundled model it is derived from (`Qwen/Qwen3.6-27B`)."""
    method: str
    """The inferred quantisation in words (`auto-round int4, group 128`)."""
    marker: str
    """The part of the name that implied it (`int4-AutoRound`)."""
    why: str
    """Why the checkpoint's own config.json was not read (offline, no network, HTTP 401 / 404, ...)."""
    weight_band_bytes: int
    """Half-width of the band around the derived weight bytes (whole checkpoint, tp 1)."""
    defaults: str
    """The quantiser's defaults assumed, each with its public source."""

    def to_json(self) -> dict[str, object]:
        return {
            "checkpoint": self.checkpoint,
            "base": self.base,
            "method": self.method,
            "marker": self.marker,
            "why_config_unavailable": self.why,
            "weight_band_bytes": self.weight_band_bytes,
            "defaults": self.defaults,
            "exact_numbers": exact_numbers_hint(self.checkpoint),
        }


def derived_warning(model: ModelSpec) -> str:
    """The one loud line a plan of a derived checkpoint starts its warnings with."""
    d = model.derived
    assert d is not None
    return (
        f"DERIVED, NOT READ: {d.checkpoint}'s config.json was unavailable ({d.why}); planned as the bundled {d.base} "
        f"quantised as {d.method} (from '{d.marker}' in the name, the quantiser's defaults): weights "
        f"{model.weight_bytes / 2**30:.2f} ± {d.weight_band_bytes / 2**30:.2f} GiB. {exact_numbers_hint(d.checkpoint)}"
    )


def exact_numbers_hint(checkpoint: str) -> str:
    """The one line telling the user how to get the checkpoint's exact numbers."""
    return (
        f"For exact numbers go online (the Hub config and safetensors headers are read then), or fetch the config on "
        f"a connected machine (`hf download {checkpoint} config.json`), or pass the checkpoint's folder / config.json "
        "with --model PATH"
    )


@dataclass(frozen=True)
class StateSpaceSpec:
    """The recurrent state of a hybrid model's Mamba2 / Gated DeltaNet layers (all such layers share it).

    `mamba2`: conv state over intermediate_size + 2 × n_groups × state_size channels, SSM state of
    num_heads × head_dim × state_size (vLLM `MambaStateShapeCalculator.mamba2_state_shape`).
    `gated_delta_net`: n_groups = linear_num_key_heads, state_size = linear_key_head_dim, num_heads =
    linear_num_value_heads, head_dim = linear_value_head_dim; conv over 2 × k + v channels, state
    num_v_heads × head_v_dim × head_k_dim (`gated_delta_net_state_shape`).
    """

    kind: str
    """`mamba2`, `gated_delta_net`, `kda` (Kimi Delta Attention: n_groups = num_heads = linear heads, head_dim =
    state_size = the linear head_dim; conv over 3 × heads × head_dim channels, recurrent (heads, head_dim, head_dim))
    or `mamba1` (Jamba: num_heads = intermediate_size = the Mamba width, head_dim 1, n_groups 0; conv over the
    width, SSM (width, state_size)) or `short_conv` (LFM2: num_heads = intermediate_size = conv_dim, conv_kernel =
    conv_L_cache; a conv state only)."""
    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    intermediate_size: int
    """Mamba2: num_heads × head_dim (the mixer width); Gated DeltaNet: num_heads × head_dim (value dim)."""
    ssm_dtype: str | None = None
    """`mamba_ssm_dtype` of the config, when it names one (SGLang reads it; vLLM's default is the model dtype)."""
    chunk_size: int | None = None
    """`mamba_chunk_size` / `chunk_size` (vLLM aligns blocks to it with prefix caching)."""


@dataclass(frozen=True)
class ModelSpec:
    """The facts about a model that memory math needs, with their sources."""

    name: str
    """Canonical id, the HF repo id where there is one (`meta-llama/Meta-Llama-3-8B-Instruct`)."""
    architecture: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    """The context both engines accept (for yarn SGLang's, the smaller; `vllm_max_position_embeddings`)."""
    torch_dtype: str
    param_count: int
    """Exact parameter count (Llama-3-8B: 8,030,261,248)."""
    weight_bytes: int
    """Bytes of the checkpoint's tensors as loaded (exact from safetensors headers where known)."""
    tie_word_embeddings: bool = False
    layer_types: tuple[str, ...] = ()
    """Per-layer attention kind; empty means every layer is full attention."""
    sliding_window: int | None = None
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    quantization: str | None = None
    """`fp8`, `awq`, `gptq`, `mxfp4`, ... or None for an unquantised checkpoint."""
    aliases: tuple[str, ...] = ()
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    """(fact, source) pairs: where each number came from."""
    # Tensor-layout facts that only the parameter count needs (vramctl/core/params.py); defaults = Llama.
    attention_qkv_bias: bool = False
    """q/k/v projections have biases (Qwen2 / Qwen2.5, gpt-oss, `attention_bias: true`)."""
    attention_out_bias: bool = False
    """The output projection has a bias (gpt-oss, Llama with `attention_bias: true`)."""
    qk_norm: bool = False
    """Per-head RMSNorm on q and k (Qwen3, Gemma-3): 2 × head_dim weights per layer."""
    qk_norm_whole: bool = False
    """With qk_norm: the q / k norms span the whole projection, (heads + kv_heads) × head_dim weights per layer
    (OLMo-2, MiniMax-M2, Command-R+ `use_qk_norm`) instead of 2 × head_dim."""
    attention_sinks: bool = False
    """A learned sink logit per attention head and layer (gpt-oss)."""
    attention_out_gate: int = 0
    """Rows of an attention output-gate projection from hidden_size in every layer, 0 for none: heads × head_dim
    (AFMoE gate_proj, MuseGlimmer output_gate_proj) or one per head (Laguna g_proj)."""
    mlp_bias: bool = False
    norms_per_layer: int = 2
    """RMSNorm weight vectors of hidden_size per layer: 2 (Llama), 4 (Gemma-2/3, GLM-4-0414 pre+post norms), 1 (Cohere's
    parallel attention + MLP block)."""
    num_mtp_layers: int = 0
    """Multi-token-prediction layers in the checkpoint that a plain serve does not load (DeepSeek-V3, GLM-4.5
    `num_nextn_predict_layers`; MiniMax-M2 `num_mtp_modules`)."""
    mtp_unquantised: bool = False
    """A quantised checkpoint whose MTP layers vLLM builds in 16 bits (its quantization_config leaves them out:
    `vramctl.registry.models._mtp_unquantised`); False: in the checkpoint's method, like the decoder."""
    mlp_gated: bool = True
    """gate + up + down (SwiGLU/GeGLU); False: fc1 + fc2 (OPT, GPT-2)."""
    norm_bias: bool = False
    """LayerNorm with a bias (OPT): 2 × hidden per norm instead of 1."""
    learned_position_embeddings: int = 0
    """Rows of a learned absolute position table (OPT: max_position_embeddings + 2); 0 for RoPE models."""
    quant_bits: int | None = None
    """Bits per quantised weight (AWQ/GPTQ/compressed-tensors `bits` / `num_bits`; 8 for FP8, 4 for MXFP4)."""
    quant_group_size: int | None = None
    """Weights sharing one scale: AWQ/GPTQ `group_size`; block-FP8 block edge (`weight_block_size` 128)."""
    quant_lm_head: bool = False
    """The checkpoint packs its lm_head too (GPTQ / AWQ `lm_head: true`, GPTQModel's option): vLLM builds the
    ParallelLMHead with the method (`GPTQConfig` / `AWQMarlinConfig.lm_head_quantized`,
    vllm/model_executor/layers/quantization/gptq.py, awq_marlin.py)."""
    quant_zero_points: bool = False
    """A compressed-tensors int checkpoint with asymmetric weights (`symmetric: false`): a packed zero point per group
    and output row beside the scales (`weight_zero_point`, int32 [rows / pack, groups] in vLLM
    compressed_tensors_wNa16.py). AWQ / GPTQ / auto-round always store theirs (params._ZERO_POINT_METHODS)."""
    quant_algos: tuple[str, ...] = ()
    """The per-module algos of a ModelOpt MIXED_PRECISION checkpoint (`modelopt_mixed`, most modules first; empty
    otherwise): the planner checks the release loads each (vramctl.registry.modelopt_mixed.MIXED_ALGO_MIN_VLLM)."""
    checkpoint_kv_cache_dtype: str | None = None
    """The KV cache dtype a ModelOpt checkpoint declares (`kv_cache_quant_algo` / `kv_cache_scheme`, as vLLM maps it:
    `fp8`, `nvfp4`), which `--kv-cache-dtype auto` resolves to from vLLM 0.14; None when it declares none."""
    vision_params: int = 0
    """Parameters of a multimodal wrapper's vision tower and projector (counted in param_count, 16-bit)."""
    vision_layers: int | None = None
    """`vision_config.num_hidden_layers` of a multimodal wrapper (None: a text model, or not given)."""
    vision_hidden_size: int | None = None
    """`vision_config.hidden_size` of a multimodal wrapper (SGLang's VLM mem_fraction_static adjustment)."""
    vision: VisionTowerSpec | None = None
    """The vision tower's shape for the engines' encoder profiling (vLLM's dummy image batch); None: a text model or a
    tower vramctl does not know (`vramctl.registry.vision_towers.vision_tower_shape`)."""
    state_space: StateSpaceSpec | None = None
    """Hybrid attention + Mamba2 / Gated DeltaNet models: the per-layer recurrent state (layer_types then names
    MAMBA / LINEAR_ATTENTION / MLP_ONLY layers beside the attention ones)."""
    vllm_max_position_embeddings: int | None = None
    """vLLM's derived max_model_len when it exceeds max_position_embeddings (a yarn config: vLLM scales
    original_max_position_embeddings by the factor, SGLang keeps max_position_embeddings); None: the same."""
    vllm_unscaled_yarn_len: int | None = None
    """vLLM ≥ 0.30's derived max_model_len for a yarn-family rope (yarn, deepseek_yarn, deepseek_llama_scaling) when
    it differs from `vllm_max_model_len`: the config's length, no longer scaled (vramctl.core.engines.vllm_yarn)."""
    attention_free: bool = False
    """The architecture is attention-free in vLLM (`IsAttentionFree`: mamba, mamba2, falcon_mamba); see
    `is_attention_free`."""
    max_len_assumed: bool = False
    """config.json names no context length (Mamba, Mamba2): vLLM assumes 2048 but takes any --max-model-len the user
    gives without the VLLM_ALLOW_LONG_MAX_MODEL_LEN check (`_get_and_verify_max_len`, vllm/config/model.py, v0.32.0:
    "If max_model_len is specified, we use it.")."""
    rope_cache_elements: int = 0
    """cos/sin values the engine's rotary embeddings precompute (positions × rotary_dim, summed over the distinct
    RoPE set-ups): a buffer allocated with the weights (vramctl.registry.models._rope_cache_elements)."""
    dsv4: Dsv4Shape | None = field(default=None, compare=False)
    """DeepSeek-V4 (compressed sparse attention): the shape its weights and five-kind KV cache are sized from
    (vramctl.core.dsv4, vramctl.core.dsv4_cache); None for every other model."""
    gemma4: Gemma4Shape | None = field(default=None, compare=False)
    """Gemma-4 (per-layer head sizes and KV heads, K = V, KV-shared layers): the shape its weights and two-page KV
    cache are sized from (vramctl.core.gemma4, vramctl.core.gemma4_cache); None for every other model."""
    derived: DerivedCheckpoint | None = field(default=None, compare=False)
    """Set when the spec is a bundled base with a quantisation inferred from a checkpoint's name (its own config was
    unavailable): the plan says so and widens the weights band (`vramctl.registry.derived`)."""

    @property
    def vllm_max_model_len(self) -> int:
        """The longest max_model_len vLLM derives for this model (its default and its limit)."""
        return self.vllm_max_position_embeddings or self.max_position_embeddings

    @property
    def is_hybrid_state(self) -> bool:
        """Layers with a recurrent state beside attention layers (Qwen3-Next, Nemotron-H, Granite-4.0-H)."""
        return self.state_space is not None

    @property
    def is_attention_free(self) -> bool:
        """vLLM's `IsAttentionFree` models (Mamba, Mamba2, FalconMamba): every layer a Mamba mixer, a pool of one
        state per request (docs/hybrid.md, "Pure Mamba"). An all-Mamba Granite-4.0-H is not one: its class is
        `IsHybrid` and vLLM plans it as a hybrid (`ModelConfig.is_hybrid`, vllm/config/model.py, v0.32.0)."""
        return self.state_space is not None and self.attention_free

    @property
    def is_state_only(self) -> bool:
        """State layers and no attention layer: the attention-free models and an all-Mamba Granite-4.0-H. vLLM has
        no attention page to unify the mamba page with, so the page is the unpadded state (docs/hybrid.md)."""
        return self.state_space is not None and not any(
            kind in (FULL_ATTENTION, SLIDING_ATTENTION) for kind in self.layer_types
        )

    @property
    def num_state_layers(self) -> int:
        """Mamba2 / Gated DeltaNet layers (0 for a pure-attention model)."""
        return sum(1 for kind in self.layer_types if kind in STATE_KINDS)

    @property
    def is_multimodal(self) -> bool:
        """The config has a vision tower (SGLang applies its VLM adjustment to mem_fraction_static)."""
        return self.vision_params > 0 or self.vision_layers is not None or self.vision_hidden_size is not None

    @property
    def is_mla(self) -> bool:
        return self.mla is not None

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def dtype_bytes(self) -> float:
        return dtype_bytes(self.torch_dtype)

    def attention_kinds(self) -> tuple[str, ...]:
        """One attention kind per layer (full or sliding)."""
        if self.layer_types:
            return self.layer_types
        if self.sliding_window is not None:
            return (SLIDING_ATTENTION,) * self.num_hidden_layers
        return (FULL_ATTENTION,) * self.num_hidden_layers

    @property
    def num_sliding_layers(self) -> int:
        return sum(1 for kind in self.attention_kinds() if kind == SLIDING_ATTENTION)

    @property
    def num_full_layers(self) -> int:
        if self.state_space is not None:  # hybrid: only the layers that hold per-token KV
            return sum(1 for kind in self.attention_kinds() if kind == FULL_ATTENTION)
        return self.num_hidden_layers - self.num_sliding_layers


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model: what the driver reports and the links that move KV."""

    name: str
    """Short id: `h100-sxm`, `a100-80gb`, `l4`, `mi300x`."""
    display_name: str
    cuda_total_bytes: int
    """Total that cudaMemGetInfo / torch report (vLLM's total_memory): after ECC and driver reservations."""
    nvidia_smi_total_mib: int
    """`nvidia-smi --query-gpu=memory.total` in MiB: what SGLang's heuristic reads as gpu_mem."""
    hbm_bandwidth_bytes_per_s: float
    pcie_generation: int
    pcie_lanes: int
    host_link_bytes_per_s: float
    """Host link bandwidth per direction (nominal)."""
    dense_bf16_flops: float
    """Dense (no sparsity) bf16 tensor FLOP/s, datasheet."""
    vendor: str = "nvidia"
    compute_capability: str | None = None
    aliases: tuple[str, ...] = ()
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)
