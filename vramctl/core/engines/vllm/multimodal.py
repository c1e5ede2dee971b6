"""vLLM's multimodal encoder profiling: the dummy item batch V1's profile run encodes, the encoder's forward peak on
it, and the encoder outputs it holds while the language model's dummy run sets the activation peak.

What V1 runs (`GPUModelRunner.profile_run`, `vllm/v1/worker/gpu_model_runner.py:6133-6206` (0.32.0); `[0.8.3]
gpu_model_runner.py:1506-1580` the same order):

1. unless `--skip-mm-profiling` (0.10.2 →) or every modality's limit is 0, the modality with the most tokens per
   item (`MultiModalBudget.get_modality_with_max_tokens`), its max tokens per item T from the processor
   (`get_mm_max_tokens_per_item`, else the dummy inputs' placeholders), the encoder budget B = max(
   max_num_batched_tokens, T) (`compute_mm_encoder_budget`, `vllm/v1/core/encoder_cache_manager.py:316-362`) and N
   items (`VllmRules.mm_items_rule`); it logs "Encoder cache will be initialized with a budget of B tokens, and
   profiled with N <modality> items of the maximum feature size.";
2. `embed_multimodal` on N copies of the largest dummy item (built for a sequence length `VllmRules.mm_dummy_seq_len`
   names: before 0.11 a Qwen-VL video can be shorter than the T the budget was sized for): the vision tower's forward
   over every patch of the batch, then the projector / merger;
3. the N outputs stay in `encoder_cache` (`encoder_cache[f"tmp_{i}"] = output`, `:6189-6190`) through the language
   model's `_dummy_run` and the sampler warm-up, and are cleared after (`:6205`).

So the torch peak above the weights is max(encoder forward, language-model dummy run) + the held outputs. This module
computes N, T, B and both bytes; `budget` adds them to the activation term as its named parts `mm_encoder` (what the
encoder's forward adds above the language model's peak) and `mm_encoder_outputs`.

The encoder's forward peak (per rank, P patches on the rank, ViT width d, MLP width I, act bytes b):

    pixels  = P × C × T_patch × patch² × (4 + b)   (the processor's fp32 pixel values and their cast to the ViT dtype)
    layer   = b × (2·P·d + max(P·(3d + d + d) / s, P·(g·I + I) / s))
              (residual + normed input; q, k, v, the attention output and its per-item concatenation, or the MLP's
               fc1 / gate + up (g = 1 / 2) and activation; s = TP with `--mm-encoder-tp-mode weights`, else 1)
    merger  = b × P × d × 2                        (the merged-patch input of the projector and its first Linear)
    forward = pixels + max(layer, merger)
    outputs = N × T × LM hidden × b                (held in encoder_cache on every rank)

The attention backend decides whether an S × S score matrix exists: on CUDA the ViT takes FLASH_ATTN (varlen, SM 8.0
→) or TORCH_SDPA item by item (`get_vit_attn_backend`, `vllm/platforms/cuda.py:519-566`; `torch_sdpa_wrapper`,
`vllm/v1/attention/ops/vit_attn_wrappers.py:272-302`, no mask, so PyTorch's memory-efficient kernel): neither
materialises the scores, so no O(S²) term. With `--mm-encoder-tp-mode data` (`run_dp_sharded_mrope_vision_model`,
`vllm/model_executor/models/vision.py:392`) each rank holds the whole tower and encodes its share of the items,
ceil(N / TP); towers without `supports_encoder_tp_data` fall back to `weights`.

Not modelled: V0 (it encodes the dummy images inside the model's forward, and Gemma 3 on V0 builds masked O(S²)
attention; the plan warns), LLaVA-NeXT / Llama 4's per-tile loops beyond one batch, the encoder CUDA graphs of
recent versions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vramctl.core.engines.vllm.rules import VllmRules
from vramctl.core.errors import BadInputError
from vramctl.core.specs import ModelSpec, VisionTowerSpec
from vramctl.core.units import GiB

MM_ENCODER_REL_BAND = 0.5
"""Half-width of the band around the encoder parts: a working-set formula read off the towers' code, not fitted
(too few logged multimodal profile runs; docs/accuracy.md)."""

_QWEN = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
_TP_DATA_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llama4"})
"""Towers whose vLLM class sets `supports_encoder_tp_data = True` (qwen2_vl.py, qwen2_5_vl.py, qwen3_vl.py,
mllama4.py at 0.32.0)."""


@dataclass(frozen=True)
class MmEncoderProfile:
    """The encoder's share of one rank's profile run (all zero with a `skipped` reason when vLLM does not run it)."""

    modality: str = ""
    tokens_per_item: int = 0
    """T: LM tokens of the largest dummy item."""
    budget_tokens: int = 0
    """B: the encoder budget vLLM logs."""
    items: int = 0
    """N: dummy items encoded."""
    items_on_rank: int = 0
    patches_per_item: int = 0
    """Tower patches of the dummy item encoded (every crop / tile, class tokens included; see `dummy_item`)."""
    forward_bytes: int = 0
    """The encoder's transient forward peak on this rank."""
    outputs_bytes: int = 0
    """The N outputs held through the language model's dummy run."""
    formula: str = ""
    skipped: str = ""
    """Why vLLM does not profile the encoder ('' when it does)."""
    tower_loaded: bool = True
    """False where every modality's limit is 0 and the version then neither builds nor loads the tower
    (`VllmRules.skips_unused_tower`): the weights leave it out."""
    unmodelled: str = ""
    """Why vramctl does not model the pass vLLM runs ('' when it does); the activation term then leaves it out."""

    @property
    def profiled(self) -> bool:
        """vLLM profiles the encoder and vramctl models it: the activation term includes it."""
        return not self.skipped and not self.unmodelled

    def log_line(self) -> str:
        """vLLM's line for this profile (`gpu_model_runner.py:6165-6172` (0.32.0))."""
        return (
            f"Encoder cache will be initialized with a budget of {self.budget_tokens} tokens, and profiled with "
            f"{self.items} {self.modality} items of the maximum feature size."
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"profiled": not self.skipped}
        if self.skipped:
            out["skipped"] = self.skipped
            out["tower_loaded"] = self.tower_loaded
            return out
        if self.unmodelled:
            out["unmodelled"] = self.unmodelled
            return out
        out.update(
            modality=self.modality,
            tokens_per_item=self.tokens_per_item,
            encoder_budget_tokens=self.budget_tokens,
            items=self.items,
            items_on_rank=self.items_on_rank,
            patches_per_item=self.patches_per_item,
            forward_bytes=self.forward_bytes,
            outputs_bytes=self.outputs_bytes,
            formula=self.formula,
        )
        return out


def _qwen_image_tokens(max_pixels: int, unit: int, factorised: bool) -> int:
    if factorised:
        return max(1, max_pixels // (unit * unit))
    side = math.isqrt(max_pixels) // unit
    return max(1, side * side)


def _qwen_video_tokens(image: int, temporal: int, room: int, max_frames: int) -> int:
    """Tokens of the longest dummy video that fits `room` tokens: frames padded to whole temporal pairs, at least one,
    at most `max_frames` (`_get_max_video_frames`, `get_num_frames_with_most_features`, qwen2_vl.py (0.32.0))."""
    t = max(1, temporal)
    frames = max(1, t * (max(0, room) // max(1, image)))  # the most n with ceil(n / t) × image ≤ room (vLLM's loop)
    frames = max(1, min(frames, max_frames))
    return math.ceil(frames / t) * image


def dummy_item(
    v: VisionTowerSpec,
    modality: str,
    rules: VllmRules,
    *,
    tokens: int,
    patches: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    max_pixels: int | None = None,
) -> tuple[int, int]:
    """(tokens, patches) of the dummy item the encoder actually runs on: the largest item (`tokens`, `patches`), except a
    Qwen2-VL / Qwen2.5-VL video built for a shorter sequence before 0.11 (`VllmRules.mm_dummy_seq_len`)."""
    if modality != "video" or v.family not in ("qwen2_vl", "qwen2_5_vl") or rules.mm_dummy_seq_len != "batched-tokens":
        return tokens, patches
    unit = v.patch_size * v.merge
    image = _qwen_image_tokens(max_pixels or v.max_pixels, unit, rules.qwen_factorised_max_image)
    built = _qwen_video_tokens(image, v.temporal_patch_size, max_num_batched_tokens, rules.qwen_max_frames_per_video)
    return built, built * v.merge * v.merge


def _modalities(v: VisionTowerSpec) -> tuple[str, ...]:
    """The modalities the processor supports, in vLLM's order (image first)."""
    return ("image", "video") if v.family in _QWEN else ("image",)


def tokens_per_item(
    v: VisionTowerSpec, modality: str, rules: VllmRules, *, max_model_len: int, max_pixels: int | None = None
) -> tuple[int, int]:
    """(T, tower patches of one item) of the largest dummy item of `modality`.

    Qwen2-VL family: images of `max_pixels` (`--mm-processor-kwargs`, else the checkpoint's) at (patch × merge)²
    pixels per token; videos of as many frames as fit max_model_len (minus one image before 0.10.2), at most
    `_MAX_FRAMES_PER_VIDEO`, padded to whole temporal pairs (`get_max_video_tokens`, qwen2_vl.py:1130-1193 (0.32.0));
    Qwen3-VL videos: two frames at the video processor's `longest_edge` / temporal_patch_size (`qwen3_vl.py:1038-1068`).
    Fixed-resolution towers: Gemma 3 one 896-px crop pooled to `mm_tokens_per_image` (pan-and-scan off by default);
    LLaVA-1.5 one crop; LLaVA-NeXT the base crop + the pinpoint with the most features (its grid, one newline per
    row); Llama 4 `max_patches` tiles + a global tile; Pixtral one `image_size` image, merge × merge."""
    fam = v.family
    if fam in _QWEN:
        unit = v.patch_size * v.merge
        image = _qwen_image_tokens(max_pixels or v.max_pixels, unit, rules.qwen_factorised_max_image)
        merge2 = v.merge * v.merge
        if modality == "image":
            return image, image * merge2
        if fam == "qwen3_vl" and v.video_max_pixels:
            video = _qwen_image_tokens(v.video_max_pixels // max(1, v.temporal_patch_size), unit, True)
            return video, video * merge2
        room = max_model_len - (image if rules.mm_counts_subtract_images else 0)
        tokens = _qwen_video_tokens(image, v.temporal_patch_size, room, rules.qwen_max_frames_per_video)
        return tokens, tokens * merge2
    grid = v.image_size // v.patch_size if v.image_size else 0
    per_crop = grid * grid + (1 if v.class_token else 0)
    if fam == "llava_next":
        best, crops = v.tokens_per_crop, 1
        for h, w in v.grid_pinpoints:
            rows, cols = h // v.patch_size, w // v.patch_size
            feats = rows * cols + rows + v.tokens_per_crop
            if feats > best:
                best, crops = feats, (h // v.image_size) * (w // v.image_size) + 1
        return best, crops * per_crop
    if fam == "llama4":
        crops = v.max_crops + 1 if v.max_crops > 1 else 1
        return crops * v.tokens_per_crop, crops * per_crop
    if fam == "pixtral":
        merged = grid // max(1, v.merge)
        return merged * merged, grid * grid
    return v.tokens_per_crop, per_crop  # siglip (Gemma 3), clip (LLaVA-1.5)


def encoder_items(
    rules: VllmRules,
    tokens: int,
    budget: int,
    limit: int,
    *,
    max_num_seqs: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    chunked_prefill: bool,
) -> int:
    """N: the dummy items of `tokens` tokens each that the profile run encodes (`VllmRules.mm_items_rule`)."""
    if rules.mm_items_rule == "ceil":
        return min(-(-budget // tokens), max_num_seqs * limit)
    if rules.mm_items_rule == "floor":
        return max(1, min(budget // tokens, max_num_seqs * limit))
    per_prompt = max(1, min(limit, max_model_len // tokens))
    reqs = max_num_seqs if chunked_prefill else min(max_num_seqs, max_num_batched_tokens // tokens)
    return max(1, min(budget // tokens, reqs * per_prompt))


def forward_bytes(
    v: VisionTowerSpec, patches: int, *, tp_split: int, act_bytes: float
) -> tuple[int, str]:
    """(the tower's forward peak over `patches` patches on one rank, its formula); see the module docstring."""
    d, inter, s = v.hidden_size, v.intermediate_size, max(1, tp_split)
    attn = patches * 5 * d // s
    mlp = patches * ((2 if v.mlp_gated else 1) * inter + inter) // s
    layer = int(act_bytes * (2 * patches * d + max(attn, mlp)))
    merger = int(act_bytes * patches * d * 2)
    t = max(1, v.temporal_patch_size)
    pixels = int(patches * v.in_channels * t * v.patch_size * v.patch_size * (4 + act_bytes))
    total = pixels + max(layer, merger)
    formula = (
        f"{patches:,} patches × (ViT layer working set {layer / GiB:.2f} GiB: residual + "
        + ("gated " if v.mlp_gated else "")
        + f"MLP {inter}{f' / TP {s}' if s > 1 else ''} or q, k, v, output; pixel values {pixels / GiB:.2f} GiB)"
    )
    return total, formula


def mm_encoder_profile(
    model: ModelSpec,
    rules: VllmRules,
    *,
    max_num_batched_tokens: int,
    max_model_len: int,
    max_num_seqs: int,
    tp: int,
    act_bytes: float = 2,
    limits: tuple[tuple[str, int], ...] | None = None,
    max_pixels: int | None = None,
    skip: bool = False,
    language_model_only: bool = False,
    tp_mode: str | None = None,
    chunked_prefill: bool = True,
) -> MmEncoderProfile | None:
    """The encoder's share of V1's profile run on one rank; None for a text model, a tower vramctl does not know, or
    the V0 engine (see the module docstring)."""
    if tp_mode not in (None, "weights", "data"):
        raise BadInputError(f"--mm-encoder-tp-mode {tp_mode!r}: vLLM takes weights or data")
    v = model.vision
    if v is None or rules.v0:
        return None
    if skip and rules.has_skip_mm_profiling:
        return MmEncoderProfile(skipped="--skip-mm-profiling: vLLM does not profile the encoder (its peak is yours)")
    given = dict(limits or ())

    def limit_of(modality: str) -> int:
        if language_model_only and rules.has_language_model_only:
            return 0
        return given.get(modality, rules.mm_default_limit)

    active = [m for m in _modalities(v) if limit_of(m) > 0]
    if not active:
        why = "--language-model-only" if language_model_only and rules.has_language_model_only else (
            "--limit-mm-per-prompt is 0 for every modality"
        )
        unloaded = rules.skips_unused_tower
        return MmEncoderProfile(
            skipped=f"{why}: no encoder budget, nothing profiled"
            + ("; the vision tower is not loaded either" if unloaded else ""),
            tower_loaded=not unloaded,
        )
    if v.family == "qwen3_vl" and "video" in active and not rules.qwen3_vl_video_max_pixels:
        return MmEncoderProfile(
            unmodelled="vLLM before 0.15 profiles Qwen3-VL with a dummy video that fills max_model_len with frames, "
            "which vramctl does not model (--limit-mm-per-prompt '{\"video\": 0}' leaves the image pass, modelled)"
        )
    sized = {
        m: tokens_per_item(v, m, rules, max_model_len=max_model_len, max_pixels=max_pixels) for m in active
    }
    if rules.mm_tie_prefers_later_name:
        modality = max(active, key=lambda m: (sized[m][0], m))
    else:
        modality = max(active, key=lambda m: sized[m][0])  # the first listed of equals
    tokens, patches = sized[modality]
    budget = max(max_num_batched_tokens, tokens)
    items = encoder_items(
        rules,
        tokens,
        budget,
        limit_of(modality),
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        chunked_prefill=chunked_prefill,
    )
    built, built_patches = dummy_item(
        v,
        modality,
        rules,
        tokens=tokens,
        patches=patches,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        max_pixels=max_pixels,
    )
    data_mode = tp_mode == "data" and tp > 1 and v.family in _TP_DATA_FAMILIES
    on_rank = -(-items // tp) if data_mode else items
    fwd, fwd_formula = forward_bytes(v, on_rank * built_patches, tp_split=1 if data_mode else tp, act_bytes=act_bytes)
    outputs = int(items * built * v.out_hidden_size * act_bytes)
    formula = (
        f"{items} {modality} item(s) × {built:,} tokens (encoder budget {budget:,}"
        + (f", sized for {tokens:,}-token items" if built != tokens else "")
        + ")"
        + (f", {on_rank} on this rank (--mm-encoder-tp-mode data)" if data_mode else "")
        + f": forward {fwd / GiB:.2f} GiB = {fwd_formula}; outputs held {outputs / GiB:.2f} GiB = {items} × "
        f"{built:,} × {v.out_hidden_size} × {act_bytes:g} B"
    )
    return MmEncoderProfile(
        modality=modality,
        tokens_per_item=tokens,
        budget_tokens=budget,
        items=items,
        items_on_rank=on_rank,
        patches_per_item=built_patches,
        forward_bytes=fwd,
        outputs_bytes=outputs,
        formula=formula,
    )
