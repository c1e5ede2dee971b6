"""vLLM speculative decoding (`--speculative-config`): what it changes in the memory plan (docs/hybrid.md).

Sources (vLLM 0.32.0 unless a version is named; the older files read from the released wheels):

- methods: `MTPModelTypes` / `EagleModelTypes` / `SpeculativeMethod`, vllm/config/speculative.py:38-83. An MTP
  method runs the checkpoint's own multi-token-prediction layers (`mtp.*`); `eagle` / `eagle3` / `draft_model`
  load a separate draft model; `ngram` (and `suffix`) draft from the prompt, no weights.
- MTP weights: `Qwen3_5MultiTokenPredictor` (vllm/model_executor/models/qwen3_5_mtp.py:69-140) builds
  `mtp_num_hidden_layers` (default 1) `Qwen3_5DecoderLayer(layer_type="full_attention")`, an `fc` of
  2 × hidden → hidden (ColumnParallelLinear) and three RMSNorms (`norm`, `pre_fc_norm_hidden`,
  `pre_fc_norm_embedding`); its embedding and lm_head are the target's (`_maybe_share_embeddings`,
  `_maybe_share_lm_head`, vllm/v1/spec_decode/llm_base_proposer.py:1398-1399). DeepSeek's
  `DeepSeekMultiTokenPredictorLayer` (deepseek_mtp.py:76-144) is the same shape (enorm, hnorm, eh_proj, one
  decoder layer, shared_head norm). vramctl charges, per MTP layer, one full-attention decoder layer of the target
  (its last layer's MLP / MoE kind) + the 2h × h projection + three norms.
- the drafter's KV: the runner collects every attention layer of the static forward context, the drafter's too
  (`get_kv_cache_spec`, vllm/v1/worker/gpu_model_runner.py), so each MTP layer is one more full-attention layer
  of the target's shape in the KV groups (Qwen3.6-27B: 17 full-attention + 48 Gated DeltaNet layers, groups of 17).
- a hybrid's state: `MambaBase.get_kv_cache_spec` sets `num_speculative_blocks = num_speculative_tokens`
  (`[0.20.2] vllm/model_executor/layers/mamba/abstract.py:54-58`, 0.32.0 :79-83); `MambaSpec.max_memory_usage_bytes`
  counts them from 0.15 (`[0.15.0] vllm/v1/kv_cache_interface.py:298-300`: none 1 + n, align 2 + n; 0.10.2 - 0.14
  count one page, or cdiv(max_model_len, mamba block)); the conv state gains n columns (`conv_kernel - 1 + num_spec`,
  `MambaStateShapeCalculator`, `[0.20.2] mamba_utils.py:171-180`, 0.32.0 :204-213) for the classes that pass
  `num_spec`: Qwen3-Next from 0.10.2, Qwen3.5 from 0.17 (every release planned), Kimi-Linear from 0.15, every Mamba2
  layer from 0.17 (`MambaMixer2.get_state_shape` passes `self.num_spec`, `[0.17.0] / [0.20.2]
  vllm/model_executor/layers/mamba/mamba_mixer2.py`; not in 0.12.0 / 0.14.0; 0.15 - 0.16 not read); Mamba1 (Jamba)
  and short convolution (LFM2) never.

- a separate draft model (`eagle`, `eagle3`, `draft_model`, `dflash`): vLLM builds it with the target's dtype
  (`SpeculativeConfig.__post_init__`, vllm/config/speculative.py) on `draft_tensor_parallel_size` ranks (default the
  target's TP; only 1 or the target's TP, `_verify_and_get_draft_tp` :1712-1743; `draft_model` needs the target's,
  `DraftModelProposer._raise_if_draft_tp_mismatch`, vllm/v1/spec_decode/draft_model.py:63-79). Without `method`,
  vLLM picks `eagle` for a draft named `*eagle-*` and `eagle3` for `*eagle3*` (speculative.py:1329-1337).
  `draft_model` loads the whole draft and shares nothing (`_maybe_share_embeddings` / `_maybe_share_lm_head`
  overridden to pass, draft_model.py:115-122). EAGLE heads (`EagleLlamaForCausalLM`, llama_eagle.py;
  `Eagle3LlamaForCausalLM`, llama_eagle3.py): `num_hidden_layers` decoder layers of the draft's config, an `fc`
  (ReplicatedLinear, whole on every rank) of 2h -> h (EAGLE) or num_aux x target_hidden -> h (EAGLE-3, 3 aux states
  by default), EAGLE-3's first layer reads 2h into its qkv (`qkv_input_size`, llama_eagle3.py:82) and adds a
  `hidden_norm`; EAGLE has no final norm and no input_layernorm in layer 0; EAGLE-3 has its own lm_head of
  `draft_vocab_size` rows and a `d2t` map (int64) when that differs from the target's vocab. The embedding is the
  target's when the checkpoint has none or an identical one and the widths match, on one pipeline stage only
  (`_maybe_share_embeddings`, llm_base_proposer.py:1416-1506; the same rule in `EagleProposer.load_model` of the
  earlier vllm/v1/spec_decode/eagle.py): vramctl counts it shared (a draft with its own, distinct embedding holds
  one more vocab x h / tp, said in the notes); EAGLE's lm_head is always the target's.
- the draft's KV: its attention layers are collected with the target's (`_draft_attn_layer_names`,
  llm_base_proposer.py:1319-1338). Layers of the target's per-rank KV width join the groups as more full-attention
  layers (as MTP's do). Other widths on a target whose layers are all full attention make one group of mixed pages
  (`UniformTypeKVCacheSpecs`, `get_kv_cache_groups`, vllm/v1/core/kv_cache_utils.py:2159-2191; page = the sum of the
  layers' pages): vramctl counts them as the whole number of target-width layers they equal (Llama-3.2-1B's 16
  layers of 8 x 64 = 8 layers of Llama-3.1-8B's 8 x 128) and refuses what is not a whole number, or a hybrid /
  sliding-window / MLA target with a draft of another width (padded pages, `unify_kv_cache_spec_page_size`).
- DFlash (`dflash`, vLLM 0.20 →, `VllmRules.has_dflash`): `DFlashProposer` (vllm/v1/spec_decode/dflash.py) builds a
  `DFlashDraftModel` config as `DFlashQwen3ForCausalLM` (vllm/model_executor/models/qwen3_dflash.py:771-811):
  num_hidden_layers Qwen3 decoder layers (non-causal attention with q / k norms, :183-409), `fc` num_aux × target
  hidden -> h (ReplicatedLinear, :494-505; num_aux from `dflash_config.target_layer_ids`, else the draft's layers,
  :108-117), `hidden_norm`, `norm` and a `mask_embedding` of h (:475-478); embedding and lm_head are the target's
  (the checkpoints ship neither; `_maybe_share_embeddings` / `_maybe_share_lm_head`, llm_base_proposer.py:1416-1556),
  a reduced draft vocab has its own lm_head and `draft_id_to_target_id` (:790-810). Its layers are KV layers
  (`get_draft_kv_cache_layer_names`, :828-829) joined as the EAGLE layers above. Its dummy run (dflash.py:215-269)
  projects all the tokens' context states to K / V for every layer at once (`precompute_and_store_context_kv`,
  qwen3_dflash.py:599-700) and runs one forward on at most max_num_seqs × (1 + n) query tokens (`max_query_tokens`,
  dflash.py:40): `_dflash_phase`; its graphs stop at the first capture size holding those queries
  (`dflash_capture_sizes`; the V2 runner's FULL decode-only DFlash graphs, vllm/v1/worker/gpu/spec_decode/dflash/
  speculator.py:126-150, are not modelled apart). Other DFlash layouts (DFlash2, Laguna) and `dspark` (its own classes per
  target) are not counted.
- ngram / suffix draft from the prompt or a suffix tree: no weights, no KV.

What the profile run and the graph capture add (`profile_charges`; one rank of the last pipeline stage; the
version switches are `VllmRules.speculative_profile_drafters`, `speculative_rejection_warmup` and
`speculative_capture_sizes`, each cited there):

- the drafter's forward in the profile run: `profile_run` calls `_dummy_run(self.max_num_tokens, is_profile=True)`
  (vllm/v1/worker/gpu_model_runner.py:6133-6201, v0.32.0), which runs the target's forward and then, with the
  target's `hidden_states` still held, `self.drafter.dummy_run(num_tokens)` (:5856-5900), i.e. the drafter at the
  full max_num_batched_tokens. `dummy_run` (vllm/v1/spec_decode/llm_base_proposer.py:1618-1670) runs
  `self.model(...)` once per draft token, one after the other, with no `compute_logits`: its peak does not grow with
  num_speculative_tokens. The target's activations are freed by then, so the two phases overlap: vramctl charges
  max(0, drafter phase − target phase), drafter phase = forward_factor × (the drafter's largest layer working set
  at those tokens + its fc input: 2h for MTP / EAGLE, num_aux × target hidden for EAGLE-3) + the target's hidden
  states it still holds (tokens × h, × (1 + num_aux) for EAGLE-3's auxiliary states), target phase = forward_factor ×
  the target's working set (`estimates.forward_working_set`). An MTP layer has the target's shape, so what it adds is
  the held and concatenated hidden states; a small draft model usually adds nothing. The V2 runner (0.33 →) calls
  `speculator.propose(dummy_run=True)` in `_dummy_run` (vllm/v1/worker/gpu/model_runner.py:960-985 (0.34.0)): the
  same charge; its draft logits (num_reqs × vocab) fall under the sampler warm-up's peak.
- the rejection sampler's warm-up: `_dummy_sampler_run` (gpu_model_runner.py:5998-6045, v0.32.0) builds ONE dummy
  draft token per request (`draft_token_ids = [[0] for _ in range(num_reqs)]`), whatever num_speculative_tokens,
  and, after the sampler's own warm-up, rebinds `logits` to (1 + 1) × num_reqs rows of dummy logits in the model
  dtype and runs the rejection sampler on them. It gathers the bonus rows (num_reqs × vocab, the sampler's input as
  in the warm-up) and runs the whole sampler on them with `max_num_logprobs=-1` and
  `logprobs_mode_override="raw_logits"` (vllm/v1/sample/rejection_sampler.py:140-175; sampler.py:85-97: an fp32
  copy of the raw logits). Beyond the warm-up's peak (the copies of the calibrated sampler term, whose input is
  the num_reqs × vocab logits now freed and replaced by the gathered bonus rows) it holds the 2 num_reqs × vocab
  dummy logits and the fp32 raw copy: num_reqs × vocab × (2 × dtype bytes + 4)
  (`VllmRules.speculative_rejection_warmup` "bonus-sampler", 0.12 - 0.32). `draft_probs` stay None with the default
  `draft_sample_method = "greedy"` (vllm/config/speculative.py:600). 0.8.5 - 0.11 ("overlapped") warm it on
  `target_logits` with the bonus tokens given, no sampler inside: below the warm-up's peak, nothing added. The V2
  runner's `_dummy_sampler_run` (0.33 →) has no rejection warm-up.
- CUDA graphs: the default capture sizes grow with decode_query_len = 1 + num_speculative_tokens
  (`scheduler.default_capture_sizes`), which adds target graphs; and the drafter's own piecewise graphs are
  captured in the same `_dummy_run` calls ("Eagle currently only supports PIECEWISE cudagraphs", `use_cudagraphs
  = is_graph_capturing and cudagraph_runtime_mode == PIECEWISE ... and not self.speculative_config.enforce_eager`,
  gpu_model_runner.py:5868-5880, v0.32.0): under the default FULL_AND_PIECEWISE (and PIECEWISE) every capture size
  also captures the drafter, (drafter layers + 1) pieces each, charged at the target's per-piece cost; none with
  `--speculative-config '{"enforce_eager": true}'` (`SpeculativeConfig.enforce_eager`, speculative.py:390), with
  cudagraph_mode FULL / FULL_DECODE_ONLY, or eager. The drafter's dispatcher keys are PIECEWISE at the capture
  sizes whenever the target's mixed mode is PIECEWISE or FULL (`initialize_cudagraph_keys`,
  llm_base_proposer.py:421-436): under FULL the capture pass runs the target in FULL mode, so the drafter's graphs
  are captured on first use while serving, after the KV pool is sized (not charged). The V2 runner captures the speculator with its own
  CudaGraphManager, counted in its graph profile (vllm/v1/worker/gpu/cudagraph_utils.py, 0.33.0).

Not modelled: `max_num_scheduled_tokens` (vllm/config/vllm.py:2254-2290), the 0.34 V2 runner's trimming of the
dummy run by the drafting slots (num_reqs × max_num_new_slots_for_drafting tokens), SM100's split prefill / decode
capture sizes of 0.34, and the drafter graphs' own per-piece cost (taken as the target's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from vramctl.core.engines.vllm import estimates as est
from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.errors import BadInputError
from vramctl.core.params import VOCAB_PADDING, mtp_layer_rank_bytes, rank_weight_bytes, serving_dtype_bytes
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import ModelSpec
from vramctl.core.weights import rope_cache_bytes, stage_rank_weight_bytes

MTP_METHODS = frozenset(
    {
        "mtp", "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
        "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
        "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
        "bailing_hybrid_mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp",
    }
)
"""`MTPModelTypes`, vllm/config/speculative.py:38-60 (v0.32.0)."""

DRAFT_MODEL_METHODS = frozenset({"eagle", "eagle3", "draft_model", "medusa", "mlp_speculator", "dflash", "dspark"})
"""Methods that load a separate draft model."""

MODELLED_DRAFT_METHODS = frozenset({"eagle", "eagle3", "draft_model", "dflash"})
"""The draft-model methods whose weights and KV vramctl counts (the rest: said not modelled)."""

DFLASH_ARCHITECTURES = frozenset({"DFlashDraftModel", "MuseGlimmerAssistantModel", "DFlashMuseGlimmerAssistantModel"})
"""Draft architectures vLLM builds as `DFlashQwen3ForCausalLM` (an architecture not starting or ending in `DFlash` is
renamed `DFlash<arch>`, `EAGLEConfig`, vllm/transformers_utils/configs/eagle.py:65-76; the registry's entries,
vllm/model_executor/models/registry.py:634, 643-644 (0.32.0)). Others (DFlash2, Laguna) are said not modelled."""

NO_WEIGHT_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
"""Drafts from the prompt (n-gram lookup) or a suffix tree: no draft weights, no KV."""


@dataclass(frozen=True)
class DraftModel:
    """The draft model named in `--speculative-config` `model`, as the registry loaded it (a bundled profile, a
    local folder, the HF cache or the Hub), with the EAGLE keys of its config.json."""

    name: str
    spec: ModelSpec
    draft_vocab_size: int | None = None
    """EAGLE-3's reduced lm_head (`draft_vocab_size`); None: the vocab size."""
    num_aux_hidden_states: int = 3
    """EAGLE-3's aux hidden states fed to `fc` (`num_aux_hidden_states`, or the length of
    `eagle_config.eagle_aux_hidden_state_layer_ids`; 3 by default, llama_eagle3.py)."""
    use_aux_hidden_state: bool = True
    """`eagle_config.use_aux_hidden_state` (False: no `fc`, the last hidden state as in EAGLE)."""
    target_hidden_size: int | None = None
    """`target_hidden_size` when the draft's hidden size differs from the target's."""
    dflash_aux_layers: int | None = None
    """DFlash: the target layers whose hidden states feed `fc` (`eagle_aux_hidden_state_layer_ids`, else
    `dflash_config.target_layer_ids`; None: the draft's num_hidden_layers, `_get_dflash_fc_input_size`,
    qwen3_dflash.py:108-117)."""
    dflash_use_aux: bool = True
    """DFlash: `dflash_config.use_aux_hidden_state` (False: no `fc`, qwen3_dflash.py:454-457, 494-505)."""
    dflash_sliding: bool = False
    """DFlash: `dflash_config.use_swa` or a sliding entry in `layer_types` (sliding-window draft layers)."""
    mask_token: bool = False
    """`dflash_config.mask_token_id` or `mask_token_id` is set (vLLM refuses parallel drafting without it,
    llm_base_proposer.py:361-380)."""


def _positive(config: Mapping[str, Any], key: str, where: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInputError(f"{where}: {key} {value!r} is not a positive integer")
    return value


def draft_from_config(name: str, spec: ModelSpec, config: Mapping[str, Any]) -> DraftModel:
    """The DraftModel of a loaded spec and its config.json (the EAGLE keys llama_eagle3.py reads)."""
    where = f"--speculative-config model {name}"
    eagle = config.get("eagle_config")
    eagle = eagle if isinstance(eagle, Mapping) else {}
    aux = _positive(config, "num_aux_hidden_states", where)
    if aux is None:
        ids = eagle.get("eagle_aux_hidden_state_layer_ids")
        aux = len(ids) if isinstance(ids, list) and ids else 3
    use_aux = eagle.get("use_aux_hidden_state", True)
    dflash = config.get("dflash_config")
    dflash = dflash if isinstance(dflash, Mapping) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids") or config.get("eagle_aux_hidden_state_layer_ids")
    ids = ids or dflash.get("target_layer_ids")
    layer_types = config.get("layer_types")
    sliding = bool(dflash.get("use_swa")) or (
        isinstance(layer_types, list) and "sliding_attention" in layer_types
    )
    return DraftModel(
        name=name,
        spec=spec,
        draft_vocab_size=_positive(config, "draft_vocab_size", where),
        num_aux_hidden_states=aux,
        use_aux_hidden_state=use_aux is not False,
        target_hidden_size=_positive(config, "target_hidden_size", where),
        dflash_aux_layers=len(ids) if isinstance(ids, list) and ids else None,
        dflash_use_aux=dflash.get("use_aux_hidden_state", True) is not False,
        dflash_sliding=sliding,
        mask_token=dflash.get("mask_token_id") is not None or config.get("mask_token_id") is not None,
    )


def draft_method(method: str | None, model: str | None) -> str | None:
    """vLLM's method for a config naming `model`: `draft_model` unless given, then `eagle` for a name with `eagle-`
    `eagle3` for one with `eagle3` and `dflash` for one with `dflash` (SpeculativeConfig.__post_init__,
    vllm/config/speculative.py:1130-1139, 1329-1343, v0.32.0); None without a model (an MTP or n-gram method, or no speculative decoding)."""
    name = method.lower() if method else None
    if model is None or name in MTP_METHODS or name in NO_WEIGHT_METHODS:
        return name
    if model.strip().lower() in ("ngram", "[ngram]"):
        return "ngram"
    if name in (None, "draft_model"):
        lowered = model.lower()
        if "eagle-" in lowered:
            return "eagle"
        if "eagle3" in lowered:
            return "eagle3"
        if "dflash" in lowered:
            return "dflash"
        return "draft_model"
    return name


def needs_draft_model(method: str | None, model: str | None) -> bool:
    """Whether vramctl loads `model` as a draft to count it (eagle, eagle3, draft_model, dflash)."""
    return model is not None and draft_method(method, model) in MODELLED_DRAFT_METHODS


@dataclass(frozen=True)
class Speculative:
    """What `--speculative-config` changes, resolved for one model and version."""

    method: str
    num_speculative_tokens: int
    drafter_kv_layers: int
    """Full-attention layers of the target's shape the drafter adds to the KV groups (MTP: the checkpoint's MTP
    layers; a draft model: its attention layers, as the whole number of target-width layers they equal)."""
    state_blocks: int
    """Extra state blocks per request and state group (`num_speculative_blocks`, counted from vLLM 0.15)."""
    conv_columns: int
    """Extra columns of every conv state."""
    draft: DraftModel | None = None
    """The separate draft model loaded and counted (eagle, eagle3, draft_model); None otherwise."""
    draft_tensor_parallel_size: int = 1
    """The ranks the draft model is split over (`draft_tensor_parallel_size`)."""
    draft_layers: int = 0
    """The draft model's own attention layers (before the width conversion of `drafter_kv_layers`)."""
    drafter_eager: bool = False
    """`--speculative-config` `enforce_eager` (else the target's `--enforce-eager`): no drafter CUDA graphs."""
    profile: ProfileCharges | None = None
    """What the profile run and the graph capture add on the last stage (set by the planner, `profile_charges`)."""

    @property
    def is_mtp(self) -> bool:
        return self.method in MTP_METHODS


def _kv_width(spec: ModelSpec, tp: int) -> int:
    """K (or V) elements per token of one attention layer on one rank: KV heads split by tp (one head each when tp
    exceeds them), × head_dim."""
    return max(1, spec.num_key_value_heads // tp) * spec.head_dim


def _draft_kv_layers(model: ModelSpec, draft: DraftModel, tp: int, draft_tp: int) -> int:
    """The draft's attention layers as target-width full-attention layers (the module docstring)."""
    d = draft.spec
    where = f"--speculative-config model {draft.name}"
    if d.mla is not None or d.state_space is not None or d.num_sliding_layers:
        raise BadInputError(
            f"{where}: a draft with MLA, state or sliding-window layers is not modelled; plan without the draft"
        )
    layers = d.num_hidden_layers
    own, target = _kv_width(d, draft_tp), _kv_width(model, tp)
    if own == target and model.mla is None:
        return layers
    mixed = model.mla is not None or model.state_space is not None or model.num_sliding_layers
    if mixed or (layers * own) % target:
        raise BadInputError(
            f"{where}: its KV layers ({d.num_key_value_heads} heads x {d.head_dim}) differ from {model.name}'s and "
            "would share a padded page with them; that layout is not modelled (use a draft of the target's KV shape)"
        )
    return layers * own // target


def _dflash_draft(draft: DraftModel | None, version: str) -> DraftModel | None:
    """The DFlash draft as vramctl counts it: refused before 0.20 (`VllmRules.has_dflash`), without a mask token
    (as vLLM refuses it) or with sliding-window layers (their own KV group, not modelled); None (said not counted)
    for an architecture vLLM does not build as `DFlashQwen3ForCausalLM`."""
    if not rules_for(version).has_dflash:
        raise BadInputError(
            f"--speculative-config method 'dflash': vLLM {version} has no DFlash drafter (it arrived in 0.20); "
            "use --engine-version 0.20 or later"
        )
    if draft is None:
        return None
    where = f"--speculative-config model {draft.name}"
    if not draft.mask_token:
        raise BadInputError(
            f"{where}: a DFlash draft needs dflash_config.mask_token_id (or mask_token_id) in its config.json "
            "(vLLM: 'For parallel drafting, the draft model config must have `dflash_config.mask_token_id`')"
        )
    if draft.dflash_sliding:
        raise BadInputError(
            f"{where}: a DFlash draft with sliding-window layers (dflash_config.use_swa / layer_types) is not "
            "modelled; plan without the draft"
        )
    arch = draft.spec.architecture
    if arch in DFLASH_ARCHITECTURES:
        return draft
    if not (arch.startswith("DFlash") or arch.endswith("DFlash") or arch == "LiLiCorrDraftModel"):
        # EAGLEConfig renames it DFlash<arch> (configs/eagle.py:65-76), which vLLM's registry does not hold
        raise BadInputError(
            f"{where}: architecture {arch!r} becomes 'DFlash{arch}' in vLLM, which has no such model; a DFlash "
            "draft's config.json names DFlashDraftModel"
        )
    return None  # DFlash2, Laguna, LiLiCorr: other layouts, said not counted


def resolve(
    model: ModelSpec,
    version: str,
    method: str | None,
    num_tokens: int,
    *,
    draft_model: str | None = None,
    draft: DraftModel | None = None,
    tensor_parallel_size: int = 1,
    draft_tensor_parallel_size: int | None = None,
    drafter_eager: bool = False,
) -> Speculative | None:
    """None without speculative decoding (no config, or num_speculative_tokens 0: vLLM then drafts nothing and its
    layers' `num_speculative_blocks` are 0). `draft`: the loaded `draft_model` when the method loads one (without
    it, its weights and KV are said not counted)."""
    if not num_tokens:
        return None
    name = draft_method(method, draft_model) or ("mtp" if model.num_mtp_layers else "draft_model")
    if name in DRAFT_MODEL_METHODS and draft_model is None:
        # vLLM: "num_speculative_tokens was provided but without speculative model." (speculative.py:1186-1190)
        raise BadInputError(
            f"--speculative-config method {name!r} needs the draft model: add \"model\": \"ORG/NAME\" or a local "
            "folder (vLLM refuses it without one)"
        )
    rules = rules_for(version)
    drafter = 0
    tp = tensor_parallel_size
    draft_tp = tp
    if name in MTP_METHODS:
        # Qwen3-Next / Qwen3.5's MTP modules default to one layer (getattr(config, ..., 1), qwen3_next_mtp.py:63,
        # qwen3_5_mtp.py); other MTP models need the count in their config (n_predict, speculative.py:686-731)
        drafter = model.num_mtp_layers or (1 if model.architecture.startswith(("Qwen3Next", "Qwen3_5")) else 0)
        if not drafter:
            raise BadInputError(
                f"--speculative-config method {name!r}: {model.name} has no multi-token-prediction layers in its "
                "config (num_nextn_predict_layers / mtp_num_hidden_layers); use a draft model or ngram"
            )
    elif name in DRAFT_MODEL_METHODS and draft_tensor_parallel_size is not None:
        allowed = (tp,) if name == "draft_model" else (1, tp)
        if draft_tensor_parallel_size not in allowed:
            raise BadInputError(
                f"--speculative-config.draft_tensor_parallel_size {draft_tensor_parallel_size}: vLLM takes "
                + (f"only the target's {tp} for draft_model" if name == "draft_model" else f"1 or the target's {tp}")
            )
        draft_tp = draft_tensor_parallel_size
    if draft is not None and name not in MODELLED_DRAFT_METHODS:
        draft = None
    if name == "dflash":
        draft = _dflash_draft(draft, version)
    draft_layers = 0
    if draft is not None:
        if name == "draft_model" and draft.spec.vocab_size != model.vocab_size:
            # verify_equal_vocab_size_if_draft_model, vllm/config/speculative.py:1870-1888
            raise BadInputError(
                f"--speculative-config model {draft.name}: vocab_size {draft.spec.vocab_size} is not the target's "
                f"{model.vocab_size} (vLLM: 'Target and draft model should have the same vocabulary size')"
            )
        draft_layers = draft.spec.num_hidden_layers
        drafter = _draft_kv_layers(model, draft, tp, draft_tp)
    st = model.state_space
    # MambaSpec counts num_speculative_blocks from 0.15 (the `mode` rule)
    state_blocks = num_tokens if st is not None and rules.mamba_state_blocks == "mode" else 0
    conv = num_tokens if st is not None and st.kind in rules.speculative_conv_kinds else 0
    return Speculative(name, num_tokens, drafter, state_blocks, conv, draft, draft_tp, draft_layers, drafter_eager)


def resolve_settings(model: ModelSpec, version: str, settings: ServeSettings) -> Speculative | None:
    """`resolve` for the serve flags."""
    return resolve(
        model,
        version,
        settings.speculative_method,
        settings.num_speculative_tokens,
        draft_model=settings.speculative_model,
        draft=settings.speculative_draft,
        tensor_parallel_size=settings.tensor_parallel_size,
        draft_tensor_parallel_size=settings.speculative_draft_tensor_parallel_size,
        drafter_eager=settings.enforce_eager
        if settings.speculative_enforce_eager is None
        else settings.speculative_enforce_eager,
    )


@dataclass(frozen=True)
class DraftWeights:
    """A draft model's bytes on one rank, part by part."""

    layers: int
    embedding: int
    lm_head: int
    extra: int
    """EAGLE's fc, EAGLE-3's wider first qkv, hidden_norm and d2t map, the final norm."""
    shared_embedding: int
    """The embedding vLLM shares with the target (not counted): what a distinct own copy would add."""

    @property
    def total(self) -> int:
        return self.layers + self.embedding + self.lm_head + self.extra


def _padded_rows(vocab: int, tp: int) -> int:
    return -(-(-(-vocab // VOCAB_PADDING) * VOCAB_PADDING) // tp)


def draft_weights(
    model: ModelSpec, spec: Speculative, *, dtype: str, pipeline_parallel_size: int = 1
) -> DraftWeights | None:
    """The draft model's bytes on one rank (module docstring); None without a counted draft."""
    draft = spec.draft
    if draft is None:
        return None
    d, tp = draft.spec, spec.draft_tensor_parallel_size
    if spec.method == "draft_model":
        # the whole checkpoint, as a model of its own, in the target's dtype
        # the whole checkpoint, as a model of its own, in the target's dtype, with its rotary cache (another
        # get_rope key than the target's when its head size or length differs)
        total = stage_rank_weight_bytes(d, tp=tp, pp=1, dtype=dtype)[0]
        rank = rank_weight_bytes(d, tp, pad_vocab=True)
        rope = rope_cache_bytes(d, dtype)
        return DraftWeights(total - rank.embedding - rank.lm_head, rank.embedding, rank.lm_head, rope, 0)
    # the head in the target's dtype, unquantised (EAGLE heads ship in 16 bits)
    served = dtype if dtype not in ("", "auto") else d.torch_dtype
    plain = replace(
        d, weight_bytes=0, tie_word_embeddings=False, quantization=None, quant_bits=None, quant_group_size=None,
        torch_dtype=served,
    )
    element = serving_dtype_bytes(plain)
    rank = rank_weight_bytes(plain, tp, pad_vocab=True)
    h = d.hidden_size
    norm = h * element
    embedding = rank.embedding
    shares = pipeline_parallel_size == 1 and h == model.hidden_size
    shared = embedding if shares else 0
    if shares:
        embedding = 0
    if spec.method == "dflash":
        return _dflash_weights(model, spec, plain, embedding, shared)
    if spec.method == "eagle":
        # no final norm, no input_layernorm in layer 0 (disable_input_layernorm), fc 2h -> h whole on each rank;
        # the lm_head is the target's
        extra = 2 * h * h * element - norm
        return DraftWeights(sum(rank.layers), embedding, 0, extra, shared)
    # eagle3: layer 0's qkv reads 2h (one more h x (q + k + v) on this rank), hidden_norm, fc, final norm,
    # lm_head of draft_vocab rows, d2t (int64) when the draft vocab differs
    q = -(-d.num_attention_heads * d.head_dim // tp)
    kv = 2 * _kv_width(d, tp)
    extra = (q + kv) * h * element + norm + norm
    if draft.use_aux_hidden_state:
        extra += draft.num_aux_hidden_states * (draft.target_hidden_size or model.hidden_size) * h * element
    vocab = draft.draft_vocab_size or d.vocab_size
    lm_head = _padded_rows(vocab, tp) * h * element
    if vocab != model.vocab_size:
        extra += vocab * 8
    return DraftWeights(sum(rank.layers), embedding, lm_head, extra, shared)


def _dflash_weights(model: ModelSpec, spec: Speculative, plain: ModelSpec, embedding: int, shared: int) -> DraftWeights:
    """`DFlashQwen3ForCausalLM` (vllm/model_executor/models/qwen3_dflash.py:771-811, 0.32.0) on one rank: its
    num_hidden_layers Qwen3 decoder layers (q / k norms of head_dim each, :291-292), `fc` of num_aux × target hidden
    -> h (ReplicatedLinear, whole on each rank, :494-505), `hidden_norm`, the final `norm` and the `mask_embedding`
    of h (allocated whatever the checkpoint, :475-478); the lm_head is the target's (the checkpoint ships none:
    `_maybe_share_lm_head`, llm_base_proposer.py:1508-1556) unless its draft vocab differs (then its own rows and
    the int64 `draft_id_to_target_id` map, :790-810); the embedding as for EAGLE."""
    draft = spec.draft
    assert draft is not None
    d, tp = replace(plain, qk_norm=True, qk_norm_whole=False), spec.draft_tensor_parallel_size
    element = serving_dtype_bytes(d)
    rank = rank_weight_bytes(d, tp, pad_vocab=True)
    h = d.hidden_size
    extra = 3 * h * element
    if draft.dflash_use_aux:
        aux = draft.dflash_aux_layers or d.num_hidden_layers
        extra += aux * (draft.target_hidden_size or model.hidden_size) * h * element
    vocab = draft.draft_vocab_size or d.vocab_size
    lm_head = 0
    if vocab != model.vocab_size:
        lm_head = _padded_rows(vocab, tp) * h * element
        extra += vocab * 8
    return DraftWeights(sum(rank.layers), embedding, lm_head, extra, shared)


def drafter_rank_bytes(model: ModelSpec, spec: Speculative, *, dtype: str, tp: int, ep: int = 1, pp: int = 1) -> int:
    """What the drafter loads on one rank of the last stage: the MTP layers, or a draft model's weights."""
    if spec.is_mtp:
        return spec.drafter_kv_layers * mtp_layer_rank_bytes(model, tp, ep)
    weights = draft_weights(model, spec, dtype=dtype, pipeline_parallel_size=pp)
    return weights.total if weights is not None else 0


def notes(spec: Speculative, model: ModelSpec, drafter_bytes: int, *, dtype: str = "auto", pp: int = 1) -> list[str]:
    """The plan's lines on speculative decoding."""
    gib = 2**30
    if spec.is_mtp:
        what = (
            f"{spec.drafter_kv_layers} MTP layer(s) of the checkpoint load ({drafter_bytes / gib:.2f} GiB per "
            "rank: a full-attention decoder layer, the 2h x h projection and three norms; embedding and lm_head "
            f"shared) and add {spec.drafter_kv_layers} full-attention layer(s) to the KV groups"
        )
    elif spec.draft is not None:
        w = draft_weights(model, spec, dtype=dtype, pipeline_parallel_size=pp)
        assert w is not None
        d = spec.draft.spec
        what = (
            f"the draft {spec.draft.name} loads {drafter_bytes / gib:.2f} GiB per rank (draft TP "
            f"{spec.draft_tensor_parallel_size}: {spec.draft_layers} layer(s) {w.layers / gib:.2f}, embedding "
            f"{w.embedding / gib:.2f}, lm_head {w.lm_head / gib:.2f}, other {w.extra / gib:.2f} GiB)"
            + (
                f"; its embedding is counted shared with the target (vLLM shares it when the checkpoint has none or "
                f"an identical copy; a distinct one adds {w.shared_embedding / gib:.2f} GiB)"
                if w.shared_embedding
                else ""
            )
            + ("; the lm_head is the target's" if spec.method == "eagle" or (spec.method == "dflash" and not w.lm_head)
               else "")
            + (f"; fc reads {spec.draft.dflash_aux_layers or d.num_hidden_layers} target layer(s)' hidden states"
               if spec.method == "dflash" and spec.draft.dflash_use_aux else "")
            + f", and its {spec.draft_layers} attention layer(s) ({d.num_key_value_heads} KV heads x {d.head_dim}) "
            f"join the KV groups as {spec.drafter_kv_layers} layer(s) of the target's width (tokens and blocks fall)"
        )
    elif spec.method in NO_WEIGHT_METHODS:
        what = "drafts from the prompt / a suffix tree: no draft weights and no draft KV"
    else:
        what = "no MTP layers"
    out = [
        f"Speculative decoding ({spec.method}, {spec.num_speculative_tokens} draft token(s)): {what}."
    ]
    if model.state_space is not None:
        out.append(
            f"Hybrid state with speculative decoding: + {spec.state_blocks} state block(s) per request and state "
            f"group (num_speculative_blocks) and + {spec.conv_columns} conv-state column(s) per layer (the mamba page, "
            "and with it the attention block, can grow)."
        )
    if not spec.is_mtp and spec.draft is None and spec.method not in NO_WEIGHT_METHODS:
        out.append(
            f"The {spec.method} draft model's weights and KV are not counted (only the target's changes are)."
        )
    charges = spec.profile
    if charges is not None:
        out.append(
            f"Profile run and graphs (last stage, per rank): the drafter's forward at max_num_batched_tokens adds "
            f"{charges.drafter_activation_bytes / gib:.2f} GiB above the target's forward, the rejection sampler's "
            f"warm-up {charges.rejection_sampler_bytes / gib:.2f} GiB (one dummy draft token per request, whatever "
            f"num_speculative_tokens), the drafter's graphs {charges.drafter_graph_bytes / gib:.2f} GiB "
            f"({charges.drafter_graph_pieces} pieces: {charges.drafter_capture_sizes} capture sizes x "
            f"({charges.drafter_layers} drafter layers + 1)); capture sizes for decode_query_len "
            f"{1 + spec.num_speculative_tokens}: {charges.capture_sizes} ({charges.capture_sizes_added:+d} against "
            "no speculative decoding)."
        )
    return out


@dataclass(frozen=True)
class ProfileCharges:
    """What speculative decoding adds to vLLM's profile run and graph capture on one rank of the last stage
    (module docstring); each part is included in the plan's `activation_peak` / `cuda_graph` term."""

    drafter_activation_bytes: int
    rejection_sampler_bytes: int
    drafter_graph_bytes: int
    drafter_graph_pieces: int
    drafter_layers: int
    capture_sizes: int
    capture_sizes_added: int
    """Capture sizes against the same flags without speculative decoding (can be negative: vLLM's grid)."""
    drafter_capture_sizes: int = 0
    """The sizes the drafter's graphs are captured at (all of them, but DFlash: `dflash_capture_sizes`)."""

    def to_json(self) -> dict[str, int]:
        return {
            "drafter_activation_bytes": self.drafter_activation_bytes,
            "rejection_sampler_bytes": self.rejection_sampler_bytes,
            "drafter_graph_bytes": self.drafter_graph_bytes,
            "drafter_graph_pieces": self.drafter_graph_pieces,
            "drafter_layers": self.drafter_layers,
            "capture_sizes": self.capture_sizes,
            "capture_sizes_added": self.capture_sizes_added,
            "drafter_capture_sizes": self.drafter_capture_sizes,
        }


def dflash_capture_sizes(spec: Speculative, capture_sizes: tuple[int, ...], max_num_seqs: int) -> tuple[int, ...]:
    """The sizes DFlash's drafter graphs are captured at: its dummy run clamps the tokens to `max_query_tokens` =
    max_num_seqs × (1 + n) (vllm/v1/spec_decode/dflash.py:40, 229) and pads them to a capture size, and a size is
    captured once (`CUDAGraphWrapper.concrete_cudagraph_entries`, vllm/compilation/cuda_graph.py:259-267): the sizes
    up to the first one that holds max_query_tokens."""
    limit = max_num_seqs * (1 + spec.num_speculative_tokens)
    ordered = sorted(capture_sizes)
    cap = next((size for size in ordered if size >= limit), ordered[-1] if ordered else 0)
    return tuple(size for size in ordered if size <= cap)


def profiled_drafter(spec: Speculative, version: str) -> bool:
    """Whether the version's profile run (and graph capture) runs this drafter (`speculative_profile_drafters`)."""
    kind = rules_for(version).speculative_profile_drafters
    if kind == "none" or (spec.draft is None and not spec.is_mtp):
        return False
    if kind == "eagle":
        return spec.is_mtp or spec.method in ("eagle", "eagle3")
    return True


def drafter_layers(spec: Speculative) -> int:
    """The drafter's decoder layers on one rank: the MTP layers, or the counted draft model's layers."""
    if spec.is_mtp:
        return spec.drafter_kv_layers
    return spec.draft_layers if spec.draft is not None else 0


def drafter_activation_bytes(
    model: ModelSpec,
    spec: Speculative,
    *,
    tokens: int,
    tp: int,
    act_bytes: float,
    forward_factor: float,
    num_reqs: int | None = None,
) -> int:
    """The drafter phase of the profile run above the target's forward (module docstring): max(0, factor × (drafter
    working set + fc input) + held hidden states − factor × target working set), at `tokens` tokens (DFlash:
    `_dflash_phase`; `num_reqs`: max_num_seqs, which bounds its query tokens)."""
    h = model.hidden_size
    target = forward_factor * est.forward_working_set(model, tokens, tp=tp, act_bytes=act_bytes)
    held = tokens * h * act_bytes
    if spec.method == "dflash" and spec.draft is not None:
        phase = _dflash_phase(spec, tokens=tokens, num_reqs=num_reqs or tokens, act_bytes=act_bytes,
                              forward_factor=forward_factor)
        return max(0, int(phase + held - target))
    if spec.is_mtp:
        working = est.forward_working_set(model, tokens, tp=tp, act_bytes=act_bytes)
        fc_in = tokens * 2 * h * act_bytes
    elif spec.draft is not None:
        d = spec.draft
        working = est.forward_working_set(d.spec, tokens, tp=spec.draft_tensor_parallel_size, act_bytes=act_bytes)
        fc_in = 0.0
        if spec.method == "eagle":
            fc_in = tokens * 2 * d.spec.hidden_size * act_bytes
        elif spec.method == "eagle3":
            aux = d.num_aux_hidden_states if d.use_aux_hidden_state else 0
            width = d.target_hidden_size or h
            fc_in = tokens * max(2 * d.spec.hidden_size, aux * width) * act_bytes
            held += aux * tokens * width * act_bytes
    else:
        return 0
    return max(0, int(forward_factor * (working + fc_in) + held - target))


def _dflash_phase(spec: Speculative, *, tokens: int, num_reqs: int, act_bytes: float, forward_factor: float) -> float:
    """DFlash's `dummy_run` (vllm/v1/spec_decode/dflash.py:215-269, 0.32.0): `precompute_and_store_context_kv` on
    all `tokens` context states (qwen3_dflash.py:599-700: the normed copy of tokens × h, the fused K/V projection of
    tokens × layers × 2 × kv and its contiguous permuted copy, alive together), then one forward of the drafter on
    min(tokens, max_num_seqs × (1 + num_speculative_tokens)) query tokens (`max_query_tokens`, dflash.py:40, 229); no
    `fc` (the dummy context states are the proposer's own buffer). The larger of the two."""
    draft = spec.draft
    assert draft is not None
    d, tp = draft.spec, spec.draft_tensor_parallel_size
    context = tokens * (d.hidden_size + 4 * d.num_hidden_layers * _kv_width(d, tp)) * act_bytes
    queries = min(tokens, num_reqs * (1 + spec.num_speculative_tokens))
    forward = forward_factor * est.forward_working_set(d, queries, tp=tp, act_bytes=act_bytes)
    return max(context, forward)


def rejection_sampler_bytes(model: ModelSpec, *, num_reqs: int, act_bytes: float) -> int:
    """The rejection sampler's warm-up beyond the sampler's ("bonus-sampler" form): num_reqs × vocab × (2 × dtype
    bytes + 4) (module docstring)."""
    return int(num_reqs * model.vocab_size * (2 * act_bytes + 4))


def profile_charges(
    model: ModelSpec,
    spec: Speculative,
    *,
    version: str,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int,
    act_bytes: float,
    capture_sizes: tuple[int, ...],
    cudagraph_mode: str | None,
    capture_sizes_without: int | None = None,
    regime: str,
    custom_all_reduce: bool = False,
    cal: est.Calibration = est.CALIBRATION,
) -> ProfileCharges:
    """The parts speculative decoding adds to the profile run and the graph pool (module docstring).
    `capture_sizes_without`: how many sizes the same flags capture without it; `cudagraph_mode`: the mode set by
    the flags (None: the release's default, which has piecewise graphs)."""
    rules = rules_for(version)
    profiled = not rules.v0 and profiled_drafter(spec, version)
    layers = drafter_layers(spec) if profiled else 0
    activation = (
        drafter_activation_bytes(
            model,
            spec,
            tokens=max_num_batched_tokens,
            tp=tp,
            act_bytes=act_bytes,
            forward_factor=cal.forward_factor,
            num_reqs=max_num_seqs,
        )
        if profiled
        else 0
    )
    num_reqs = min(max_num_seqs, max_num_batched_tokens)
    bonus = rules.speculative_rejection_warmup == "bonus-sampler"
    rejection = rejection_sampler_bytes(model, num_reqs=num_reqs, act_bytes=act_bytes) if bonus else 0
    piecewise = cudagraph_mode in (None, "PIECEWISE", "FULL_AND_PIECEWISE")
    graphs = profiled and piecewise and not spec.drafter_eager and bool(capture_sizes) and layers > 0
    graph_bytes = pieces = 0
    drafter_sizes = capture_sizes if spec.method != "dflash" else dflash_capture_sizes(spec, capture_sizes, max_num_seqs)
    if graphs:
        pool = est.graph_pool(
            model,
            capture_sizes=drafter_sizes,
            layers_on_rank=layers,
            regime=regime,
            tp=tp,
            custom_all_reduce=custom_all_reduce,
            cal=cal,
        )
        graph_bytes = pool.bytes - cal.graph_fixed_bytes
        pieces = dict(pool.parts)["pieces"]
    return ProfileCharges(
        drafter_activation_bytes=activation,
        rejection_sampler_bytes=rejection,
        drafter_graph_bytes=graph_bytes,
        drafter_graph_pieces=pieces,
        drafter_layers=layers,
        capture_sizes=len(capture_sizes),
        capture_sizes_added=0 if capture_sizes_without is None else len(capture_sizes) - capture_sizes_without,
        drafter_capture_sizes=len(drafter_sizes) if graphs else 0,
    )


def with_activation(activation: est.Estimate, charges: ProfileCharges, cal: est.Calibration) -> est.Estimate:
    """The activation estimate with the drafter's and the rejection sampler's parts added (its band grows by the
    same relative band)."""
    extra = charges.drafter_activation_bytes + charges.rejection_sampler_bytes
    if not extra:
        return activation
    gib = 2**30
    return est.Estimate(
        activation.bytes + extra,
        activation.uncertainty_bytes + int(cal.activation_rel_band * extra),
        activation.formula
        + f"; speculative decoding: + drafter forward {charges.drafter_activation_bytes / gib:.2f} GiB + rejection "
        f"sampler warm-up {charges.rejection_sampler_bytes / gib:.2f} GiB",
        (
            *activation.parts,
            ("drafter", charges.drafter_activation_bytes),
            ("rejection_sampler", charges.rejection_sampler_bytes),
        ),
    )


def with_graphs(graph: est.Estimate, charges: ProfileCharges, cal: est.Calibration) -> est.Estimate:
    """The graph estimate with the drafter's graphs added."""
    if not charges.drafter_graph_bytes:
        return graph
    gib = 2**30
    return est.Estimate(
        graph.bytes + charges.drafter_graph_bytes,
        graph.uncertainty_bytes + int(cal.graph_rel_band * charges.drafter_graph_bytes),
        graph.formula
        + f"; + drafter graphs {charges.drafter_graph_bytes / gib:.2f} GiB ({charges.drafter_graph_pieces} pieces)",
        (*graph.parts, ("drafter", charges.drafter_graph_bytes)),
    )
