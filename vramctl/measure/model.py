"""A reference decoder built from a ModelSpec, with random weights created directly on the device.

It exists to *occupy memory the way the served model does*, not to produce meaningful tokens:
- weights: every tensor of the architecture (embedding, per-layer attention and MLP / MoE, norms, LM head),
  in the model's dtype, created on the device (no download, no disk), sharded per tensor-parallel rank as
  vLLM shards them (attention heads and MLP / expert intermediate split over ranks, KV heads
  max(1, kv_heads // tp), vocabulary split for the embedding and LM head);
- the profile forward: a flattened batch of `max_num_batched_tokens` tokens split into
  min(max_num_seqs, tokens) sequences as vLLM's `_dummy_run` splits them (equal lengths, the remainder on
  the last; `gpu_model_runner.py:6072-6145`, `vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0)), RMSNorm, RoPE, causal
  attention through `F.scaled_dot_product_attention` (GQA / MHA, sliding-window masks, MLA with the latent
  kv_a_proj → kv_lora_rank + rope and the kv_b_proj up-projection), SwiGLU MLP or a routed MoE
  (softmax router, top-k, per-expert SwiGLU into fused-MoE-sized intermediate buffers, shared experts);
- the sampler warm-up: fp32 logits over max_num_seqs rows, temperature, top-k / top-p by sort, softmax,
  exponential-race sampling (vLLM `_dummy_sampler_run`);
- a decode step over a paged KV cache (slot-mapping write, block-table gather, masked attention) whose
  tensors have static shapes, so it can be captured into a CUDA graph.

The attention kernels differ from the engine's (FlashAttention / FlashInfer / FlashMLA): their workspaces
are not reproduced, and the decode-step MoE runs every expert densely on the batch (a capturable form).
docs/profile.md lists these approximations.

`num_layers` builds a slice of the model (the `--num-layers` override); the profiler scales the weight
term to the full depth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.specs import SLIDING_ATTENTION, ModelSpec

_INIT_STD = 0.02
_FP8_INIT_BYTE = 0x0A
"""float8_e4m3fn 0|0001|010 = 2^-6 × 1.25 = 0.01953, the fp8 neighbour of _INIT_STD."""
_ROPE_THETA = 10000.0
_RMS_EPS = 1e-6


def torch_dtype_of(name: str) -> Any:
    """`bfloat16` / `bf16` / `float16` / `float32` → torch dtype; quantised names fall back to bfloat16."""
    import torch

    key = name.lower().removeprefix("torch.")
    table = {
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
        "half": torch.float16,
        "float32": torch.float32,
        "fp32": torch.float32,
        "float": torch.float32,
    }
    if key in table:
        return table[key]
    raise BadInputError(f"--dtype {name!r}: the reference model runs in bfloat16, float16 or float32")


@dataclass(frozen=True)
class Shard:
    """What one tensor-parallel rank holds."""

    tp_rank: int
    tp_size: int
    heads: int
    kv_heads: int
    intermediate: int
    moe_intermediate: int
    shared_intermediate: int
    vocab: int
    layers: int

    @classmethod
    def of(
        cls, spec: ModelSpec, *, tp_rank: int = 0, tp_size: int = 1, num_layers: int | None = None
    ) -> Shard:
        if tp_size < 1:
            raise BadInputError(f"--tensor-parallel-size {tp_size}: must be at least 1")
        if spec.num_attention_heads % tp_size:
            raise BadInputError(
                f"--tensor-parallel-size {tp_size}: {spec.name} has {spec.num_attention_heads} attention heads, "
                "not divisible by it"
            )
        kv = spec.num_key_value_heads
        if not spec.is_mla and kv >= tp_size and kv % tp_size:
            raise BadInputError(
                f"--tensor-parallel-size {tp_size}: {spec.name} has {kv} KV heads, not divisible by it"
            )
        layers = spec.num_hidden_layers if num_layers is None else num_layers
        if not 1 <= layers <= spec.num_hidden_layers:
            raise BadInputError(
                f"--num-layers {num_layers}: must be between 1 and {spec.name}'s {spec.num_hidden_layers} layers"
            )
        moe = spec.moe
        return cls(
            tp_rank=tp_rank,
            tp_size=tp_size,
            heads=spec.num_attention_heads // tp_size,
            kv_heads=1 if spec.is_mla else max(1, kv // tp_size),
            intermediate=max(1, math.ceil(spec.intermediate_size / tp_size)),
            moe_intermediate=max(1, math.ceil(moe.moe_intermediate_size / tp_size)) if moe else 0,
            shared_intermediate=(
                max(1, math.ceil(_shared_intermediate(spec) / tp_size))
                if moe and _shared_intermediate(spec)
                else 0
            ),
            vocab=math.ceil(spec.vocab_size / tp_size),
            layers=layers,
        )


def _shared_intermediate(spec: ModelSpec) -> int:
    moe = spec.moe
    if moe is None:
        return 0
    if moe.shared_expert_intermediate_size:
        return moe.shared_expert_intermediate_size
    return moe.num_shared_experts * moe.moe_intermediate_size


def _is_moe_layer(spec: ModelSpec, index: int) -> bool:
    moe = spec.moe
    if moe is None or index < moe.first_k_dense_replace:
        return False
    return (index + 1) % max(1, moe.moe_layer_freq) == 0


@dataclass
class Layer:
    index: int
    sliding: bool
    moe: bool
    w: dict[str, Any] = field(default_factory=dict)


def check_supported(spec: ModelSpec) -> None:
    """BadInputError (exit 2) for a model the reference model cannot build, before any device is opened."""
    st = spec.state_space
    if st is not None:
        raise BadInputError(
            f"{spec.name}: the reference model has no {st.kind} layers, so its measurement would be of another "
            f"model; plan it (`vramctl plan {spec.name}`) or read a real start-up (`vramctl read-log`)"
        )


class ReferenceModel:
    """Random-weight decoder for memory measurement (see the module docstring)."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        device: str,
        dtype: str = "auto",
        num_layers: int | None = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        group: Any = None,
        seed: int = 0,
    ) -> None:
        import torch

        check_supported(spec)
        self.spec = spec
        self.device = torch.device(device)
        self.dtype = torch_dtype_of(spec.torch_dtype if dtype == "auto" else dtype)
        if self.dtype == torch.float32 and dtype == "auto":
            # vLLM's --dtype auto runs a float32 checkpoint in bfloat16 / float16.
            self.dtype = torch.bfloat16
        self.shard = Shard.of(spec, tp_rank=tp_rank, tp_size=tp_size, num_layers=num_layers)
        self.quant = weight_storage(spec)
        self.group = group
        self.head_dim = spec.head_dim
        self._gen = torch.Generator(device=self.device)
        self._gen.manual_seed(seed + tp_rank)
        kinds = spec.attention_kinds()
        self.layers: list[Layer] = []
        with torch.no_grad():
            self.embed = self._param(self.shard.vocab, spec.hidden_size)
            for i in range(self.shard.layers):
                layer = Layer(index=i, sliding=kinds[i] == SLIDING_ATTENTION, moe=_is_moe_layer(spec, i))
                self._build_layer(layer)
                self.layers.append(layer)
            self.final_norm = self._ones(spec.hidden_size)
            self.lm_head = (
                self.embed if spec.tie_word_embeddings else self._param(self.shard.vocab, spec.hidden_size)
            )
        self._rope_cache: dict[tuple[int, int], tuple[Any, Any]] = {}

    # ------------------------------------------------------------------ weights
    def _param(self, *shape: int, random: bool = False) -> Any:
        """A weight of the model dtype, every page written. On CUDA normal(0, 0.02); on the CPU a constant
        (writing random bf16 runs at ~0.1 GB/s there, and the values do not change the memory), except
        where the values steer the computation (`random`: the MoE router)."""
        import torch

        t = torch.empty(*shape, device=self.device, dtype=self.dtype)
        if random or self.device.type != "cpu":
            t.normal_(0.0, _INIT_STD, generator=self._gen)
        else:
            t.fill_(_INIT_STD)
        return t

    def _matrix(self, *shape: int) -> Any:
        """A projection / expert matrix in the checkpoint's storage: fp8 (1 B), packed 4-bit (0.5 B), or dtype."""
        import torch

        if self.quant == "fp8":
            # made in place as bytes (no model-dtype temporary three times the matrix's storage): e4m3fn
            # with exponent field 1 (2^-6) → ±0.0156…0.0293; on the CPU the constant 0x0A = 0.01953
            t = torch.empty(*shape, device=self.device, dtype=torch.float8_e4m3fn)
            raw = t.view(torch.uint8)
            if self.device.type == "cpu":
                raw.fill_(_FP8_INIT_BYTE)
            else:
                raw.random_(0, 256, generator=self._gen).bitwise_and_(0x87).bitwise_or_(0x08)
            return t
        if self.quant == "int4":
            packed = torch.empty(*shape[:-1], -(-shape[-1] // 2), device=self.device, dtype=torch.uint8)
            return packed.random_(0, 256, generator=self._gen)
        return self._param(*shape)

    def _dequant(self, w: Any) -> Any:
        """The matrix in the compute dtype (one at a time: a transient the engines' fused kernels avoid)."""
        import torch

        if w.dtype == torch.uint8:
            # two 4-bit values per byte
            return (
                torch.stack(((w & 15), (w >> 4)), dim=-1).flatten(-2).to(self.dtype).sub_(8).mul_(_INIT_STD)
            )
        return w.to(self.dtype)

    def _lin(self, x: Any, w: Any) -> Any:
        import torch.nn.functional as F

        return F.linear(x, w if w.dtype == self.dtype else self._dequant(w))

    def _ones(self, n: int) -> Any:
        import torch

        return torch.ones(n, device=self.device, dtype=self.dtype)

    def _build_layer(self, layer: Layer) -> None:
        for name, shape in layer_shapes(self.spec, self.shard, layer.index).items():
            if name.endswith("norm"):
                layer.w[name] = self._ones(shape[0])
            elif name == "router":
                layer.w[name] = self._param(*shape, random=True)
            else:
                layer.w[name] = self._matrix(*shape)

    def weight_bytes(self) -> int:
        """Bytes of every weight tensor this rank holds (tied embeddings counted once)."""
        seen: set[int] = set()
        total = 0
        tensors = [self.embed, self.lm_head, self.final_norm]
        for layer in self.layers:
            tensors.extend(layer.w.values())
        for t in tensors:
            if id(t) in seen:
                continue
            seen.add(id(t))
            total += int(t.numel()) * int(t.element_size())
        return total

    # ------------------------------------------------------------------ building blocks
    def _all_reduce(self, t: Any) -> Any:
        if self.group is None or self.shard.tp_size == 1:
            return t
        import torch.distributed as dist

        dist.all_reduce(t, group=self.group)
        return t

    def _rms_norm(self, x: Any, weight: Any) -> Any:
        import torch

        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + _RMS_EPS)
        return xf.to(x.dtype) * weight

    def _rope(self, positions: Any, dim: int) -> tuple[Any, Any]:
        import torch

        inv = 1.0 / (_ROPE_THETA ** (torch.arange(0, dim, 2, device=self.device, dtype=torch.float32) / dim))
        freqs = positions.float()[:, None] * inv[None, :]
        return freqs.cos().to(self.dtype), freqs.sin().to(self.dtype)

    @staticmethod
    def _apply_rope(x: Any, cos: Any, sin: Any) -> Any:
        """x: [T, H, D] with D even; cos / sin: [T, D/2] (neox style: rotate the two halves)."""
        import torch

        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    def _embed(self, token_ids: Any) -> Any:
        import torch
        import torch.nn.functional as F

        if self.shard.tp_size == 1:
            return F.embedding(token_ids, self.embed)
        start = self.shard.tp_rank * self.shard.vocab
        local = token_ids - start
        mask = (local < 0) | (local >= self.shard.vocab)
        out = F.embedding(local.masked_fill(mask, 0), self.embed)
        out = out.masked_fill(mask[:, None], 0)
        del local
        return self._all_reduce(out.contiguous()) if torch.is_tensor(out) else out

    def _mlp(self, x: Any, gate_up: Any, down: Any) -> Any:
        import torch.nn.functional as F

        gu = self._lin(x, gate_up)
        half = gu.shape[-1] // 2
        act = F.silu(gu[..., :half]) * gu[..., half:]
        del gu
        return self._lin(act, down)

    def _moe(self, x: Any, w: dict[str, Any]) -> Any:
        """Routed experts, fused-MoE style: [T·k, 2I] and [T·k, I] intermediates, weighted sum over k."""
        import torch
        import torch.nn.functional as F

        moe = self.spec.moe
        assert moe is not None
        tokens = x.shape[0]
        k = moe.num_experts_per_tok
        router_logits = self._lin(x, w["router"]).float()
        probs = router_logits.softmax(dim=-1)
        topk_w, topk_ids = probs.topk(k, dim=-1)
        topk_w = (topk_w / topk_w.sum(-1, keepdim=True)).to(x.dtype)
        inter = self.shard.moe_intermediate
        cache1 = torch.empty(tokens * k, 2 * inter, device=x.device, dtype=x.dtype)
        cache3 = torch.empty(tokens * k, x.shape[1], device=x.device, dtype=x.dtype)
        flat_ids = topk_ids.reshape(-1)
        order = flat_ids.argsort()
        counts = torch.bincount(flat_ids, minlength=moe.num_experts).tolist()
        start = 0
        src_tok = order // k
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            rows = order[start : start + count]
            cache1[rows] = self._lin(x[src_tok[start : start + count]], w["w13"][expert])
            start += count
        cache2 = F.silu(cache1[:, :inter]) * cache1[:, inter:]
        del cache1
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            rows = order[start : start + count]
            cache3[rows] = self._lin(cache2[rows], w["w2"][expert])
            start += count
        del cache2
        out = (cache3.view(tokens, k, -1) * topk_w[:, :, None]).sum(dim=1)
        del cache3
        if "shared_gate_up" in w:
            out = out + self._mlp(x, w["shared_gate_up"], w["shared_down"])
        return out

    def _moe_dense(self, x: Any, w: dict[str, Any]) -> Any:
        """Capturable MoE for the decode graph: every expert on the batch, weighted by the routing mask."""
        import torch

        moe = self.spec.moe
        assert moe is not None
        probs = self._lin(x, w["router"]).float().softmax(dim=-1)
        topk_w, topk_ids = probs.topk(moe.num_experts_per_tok, dim=-1)
        dense_w = (
            torch.zeros_like(probs).scatter_(1, topk_ids, topk_w / topk_w.sum(-1, keepdim=True)).to(x.dtype)
        )
        out = torch.zeros_like(x)
        for expert in range(moe.num_experts):
            out += self._mlp(x, w["w13"][expert], w["w2"][expert]) * dense_w[:, expert : expert + 1]
        if "shared_gate_up" in w:
            out = out + self._mlp(x, w["shared_gate_up"], w["shared_down"])
        return out

    def _ffn(self, layer: Layer, x: Any, *, capturable: bool = False) -> Any:
        w = layer.w
        if layer.moe:
            out = self._moe_dense(x, w) if capturable else self._moe(x, w)
        else:
            out = self._mlp(x, w["gate_up"], w["down"])
        return self._all_reduce(out)

    # ------------------------------------------------------------------ attention (prefill)
    def _qkv(self, layer: Layer, x: Any, positions: Any) -> tuple[Any, Any, Any]:
        """q [T, H, Dq], k [T, Hk, Dq], v [T, Hk, Dv] for this rank."""

        spec, sh, w = self.spec, self.shard, layer.w
        t = x.shape[0]
        if spec.mla is not None:
            mla = spec.mla
            nope, rope, vdim = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
            if "q_a" in w:
                q = self._lin(self._rms_norm(self._lin(x, w["q_a"]), w["q_a_norm"]), w["q_b"])
            else:
                q = self._lin(x, w["q"])
            q = q.view(t, sh.heads, nope + rope)
            latent = self._lin(x, w["kv_a"])  # [T, kv_lora_rank + rope]: what the KV cache stores
            c_kv = self._rms_norm(latent[:, : mla.kv_lora_rank], w["kv_a_norm"])
            cos, sin = self._rope(positions, rope)
            k_pe = self._apply_rope(latent[:, None, mla.kv_lora_rank :], cos, sin)
            q = self._cat_rope(q, nope, cos, sin)
            kv = self._lin(c_kv, w["kv_b"]).view(t, sh.heads, nope + vdim)
            k = self._cat(kv[..., :nope], k_pe.expand(t, sh.heads, rope))
            v = kv[..., nope:]
            return q, k, v
        d = spec.head_dim
        qkv = self._lin(x, w["qkv"])
        q = qkv[:, : sh.heads * d].view(t, sh.heads, d)
        k = qkv[:, sh.heads * d : (sh.heads + sh.kv_heads) * d].view(t, sh.kv_heads, d)
        v = qkv[:, (sh.heads + sh.kv_heads) * d :].view(t, sh.kv_heads, d)
        cos, sin = self._rope(positions, d)
        return self._apply_rope(q, cos, sin), self._apply_rope(k, cos, sin), v

    def _cat_rope(self, q: Any, nope: int, cos: Any, sin: Any) -> Any:
        return self._cat(q[..., :nope], self._apply_rope(q[..., nope:], cos, sin))

    @staticmethod
    def _cat(a: Any, b: Any) -> Any:
        import torch

        return torch.cat((a, b), dim=-1)

    def _attend(self, layer: Layer, q: Any, k: Any, v: Any, seq_lens: list[int]) -> Any:
        """Causal attention per sequence; equal-length sequences go through one batched SDPA call."""
        import torch
        import torch.nn.functional as F

        outs = []
        start = 0
        i = 0
        window = self.spec.sliding_window if layer.sliding else None
        gqa = q.shape[1] != k.shape[1]
        while i < len(seq_lens):
            length = seq_lens[i]
            j = i
            while j < len(seq_lens) and seq_lens[j] == length:
                j += 1
            n = j - i
            end = start + n * length
            qs = q[start:end].view(n, length, q.shape[1], -1).transpose(1, 2)
            ks = k[start:end].view(n, length, k.shape[1], -1).transpose(1, 2)
            vs = v[start:end].view(n, length, v.shape[1], -1).transpose(1, 2)
            if window is not None and window < length:
                pos = torch.arange(length, device=q.device)
                mask = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] < window)
                if gqa:
                    # a masked GQA call would fall back to the math kernel (an L×L score matrix per head):
                    # expand K / V instead, which the memory-efficient kernel takes with a mask
                    ks = ks.repeat_interleave(qs.shape[1] // ks.shape[1], dim=1)
                    vs = vs.repeat_interleave(qs.shape[1] // vs.shape[1], dim=1)
                o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask)
            else:
                o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=gqa)
            outs.append(o.transpose(1, 2).reshape(n * length, -1))
            start, i = end, j
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)

    # ------------------------------------------------------------------ forward passes
    def forward(self, token_ids: Any, seq_lens: list[int]) -> Any:
        """The profile run: hidden states of the last token of every sequence, [len(seq_lens), hidden]."""
        import torch

        with torch.inference_mode():
            positions = torch.cat([torch.arange(n, device=self.device) for n in seq_lens])
            h = self._embed(token_ids)
            for layer in self.layers:
                x = self._rms_norm(h, layer.w["input_norm"])
                q, k, v = self._qkv(layer, x, positions)
                attn = self._attend(layer, q, k, v, seq_lens)
                del q, k, v, x
                h = h + self._all_reduce(self._lin(attn, layer.w["o"]))
                del attn
                x = self._rms_norm(h, layer.w["post_norm"])
                h = h + self._ffn(layer, x)
                del x
            h = self._rms_norm(h, self.final_norm)
            last = torch.tensor(seq_lens, device=self.device).cumsum(0) - 1
            return h[last]

    def compute_logits(self, hidden: Any) -> Any:
        """[rows, vocab] logits, gathered over the vocabulary shards."""
        import torch
        import torch.nn.functional as F

        with torch.inference_mode():
            local = F.linear(hidden, self.lm_head)
            if self.group is None or self.shard.tp_size == 1:
                return local[:, : self.spec.vocab_size]
            import torch.distributed as dist

            parts = [torch.empty_like(local) for _ in range(self.shard.tp_size)]
            dist.all_gather(parts, local.contiguous(), group=self.group)
            return torch.cat(parts, dim=-1)[:, : self.spec.vocab_size]

    def sampler_warmup(self, logits: Any, *, top_k: int = 20, top_p: float = 0.9) -> Any:
        """vLLM's dummy sampler run: fp32 logits, temperature, top-k / top-p by sort, softmax, sampling."""
        import torch

        with torch.inference_mode():
            rows = logits.shape[0]
            x = logits.to(torch.float32)
            temperature = torch.full((rows, 1), 0.7, device=x.device)
            x = x / temperature
            sorted_logits, sorted_idx = x.sort(dim=-1, descending=False)
            kth = sorted_logits.shape[-1] - min(top_k, sorted_logits.shape[-1])
            threshold = sorted_logits[:, kth : kth + 1]
            sorted_logits = sorted_logits.masked_fill(sorted_logits < threshold, float("-inf"))
            probs_sorted = sorted_logits.softmax(dim=-1)
            cum = probs_sorted.cumsum(dim=-1)
            sorted_logits = sorted_logits.masked_fill(cum <= 1 - top_p, float("-inf"))
            x = x.scatter(-1, sorted_idx, sorted_logits)
            del sorted_logits, sorted_idx, probs_sorted, cum
            probs = x.softmax(dim=-1)
            q = torch.empty_like(probs).exponential_()
            return probs.div(q).argmax(dim=-1)

    # ------------------------------------------------------------------ paged KV cache and decode
    def kv_cache_shape(self, num_blocks: int, block_size: int) -> tuple[int, ...]:
        """One layer's cache: MLA [blocks, block_size, latent]; else [blocks, 2, block_size, kv_heads, head_dim]."""
        if self.spec.mla is not None:
            return (num_blocks, block_size, self.spec.mla.latent_dim)
        return (num_blocks, 2, block_size, self.shard.kv_heads, self.spec.head_dim)

    def allocate_kv_cache(
        self, num_blocks: int, block_size: int, *, dtype: Any = None, touch: bool = True
    ) -> list[Any]:
        """One cache tensor per layer. `touch` writes zeros so the pages are really resident (CPU)."""
        import torch

        caches = []
        for _ in self.layers:
            t = torch.empty(
                self.kv_cache_shape(num_blocks, block_size), device=self.device, dtype=dtype or self.dtype
            )
            if touch:
                t.zero_()
            caches.append(t)
        return caches

    def decode_step(
        self,
        token_ids: Any,
        positions: Any,
        slot_mapping: Any,
        block_table: Any,
        seq_lens: Any,
        kv_caches: list[Any],
    ) -> Any:
        """One decode token per sequence over the paged cache; static shapes, no host syncs (capturable)."""
        import torch
        import torch.nn.functional as F

        spec, sh = self.spec, self.shard
        b = token_ids.shape[0]
        with torch.inference_mode():
            h = self._embed(token_ids)
            for layer, cache in zip(self.layers, kv_caches, strict=True):
                x = self._rms_norm(h, layer.w["input_norm"])
                block_size = cache.shape[2] if spec.mla is None else cache.shape[1]
                span = block_table.shape[1] * block_size
                valid = torch.arange(span, device=self.device)[None, :] < seq_lens[:, None]
                if spec.mla is not None:
                    mla = spec.mla
                    nope, rope, vdim = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
                    if "q_a" in layer.w:
                        q = self._lin(
                            self._rms_norm(self._lin(x, layer.w["q_a"]), layer.w["q_a_norm"]), layer.w["q_b"]
                        )
                    else:
                        q = self._lin(x, layer.w["q"])
                    cos, sin = self._rope(positions, rope)
                    q = self._cat_rope(q.view(b, sh.heads, nope + rope), nope, cos, sin)
                    latent = self._lin(x, layer.w["kv_a"])
                    latent = self._cat(
                        latent[:, : mla.kv_lora_rank],
                        self._apply_rope(latent[:, None, mla.kv_lora_rank :], cos, sin)[:, 0],
                    )
                    cache.view(-1, mla.latent_dim).index_copy_(0, slot_mapping, latent.to(cache.dtype))
                    ctx = cache[block_table].view(b, span, mla.latent_dim).to(self.dtype)
                    c_kv = self._rms_norm(ctx[..., : mla.kv_lora_rank], layer.w["kv_a_norm"])
                    kv = self._lin(c_kv, layer.w["kv_b"]).view(b, span, sh.heads, nope + vdim)
                    k = self._cat(
                        kv[..., :nope], ctx[..., None, mla.kv_lora_rank :].expand(b, span, sh.heads, rope)
                    )
                    v = kv[..., nope:]
                    o = F.scaled_dot_product_attention(
                        q[:, :, None, :],
                        k.transpose(1, 2),
                        v.transpose(1, 2),
                        attn_mask=valid[:, None, None, :],
                    )
                    attn = o.reshape(b, sh.heads * vdim)
                else:
                    d = spec.head_dim
                    qkv = self._lin(x, layer.w["qkv"])
                    cos, sin = self._rope(positions, d)
                    q = self._apply_rope(qkv[:, : sh.heads * d].view(b, sh.heads, d), cos, sin)
                    k_new = self._apply_rope(
                        qkv[:, sh.heads * d : (sh.heads + sh.kv_heads) * d].view(b, sh.kv_heads, d), cos, sin
                    )
                    v_new = qkv[:, (sh.heads + sh.kv_heads) * d :].view(b, sh.kv_heads, d)
                    # cache [blocks, 2, block_size, kv_heads, d]: K then V of each block, written in place
                    flat = cache.view(-1, sh.kv_heads, d)
                    k_rows = (slot_mapping // block_size) * (2 * block_size) + slot_mapping % block_size
                    flat.index_copy_(0, k_rows, k_new.to(cache.dtype))
                    flat.index_copy_(0, k_rows + block_size, v_new.to(cache.dtype))
                    ctx = cache[block_table]  # [b, blocks_per_seq, 2, block_size, kv_heads, d]
                    k = ctx[:, :, 0].reshape(b, span, sh.kv_heads, d).to(self.dtype).transpose(1, 2)
                    v = ctx[:, :, 1].reshape(b, span, sh.kv_heads, d).to(self.dtype).transpose(1, 2)
                    o = F.scaled_dot_product_attention(
                        q[:, :, None, :],
                        k,
                        v,
                        attn_mask=valid[:, None, None, :],
                        enable_gqa=sh.heads != sh.kv_heads,
                    )
                    attn = o.reshape(b, sh.heads * d)
                h = h + self._all_reduce(self._lin(attn, layer.w["o"]))
                x = self._rms_norm(h, layer.w["post_norm"])
                h = h + self._ffn(layer, x, capturable=True)
            h = self._rms_norm(h, self.final_norm)
            return F.linear(h, self.lm_head)


def layer_shapes(spec: ModelSpec, shard: Shard, index: int) -> dict[str, tuple[int, ...]]:
    """The weight tensors of layer `index` on one rank, name → shape (norm vectors end in `norm`)."""
    hidden = spec.hidden_size
    shapes: dict[str, tuple[int, ...]] = {"input_norm": (hidden,), "post_norm": (hidden,)}
    if spec.mla is not None:
        mla = spec.mla
        qk_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            shapes["q_a"] = (mla.q_lora_rank, hidden)
            shapes["q_a_norm"] = (mla.q_lora_rank,)
            shapes["q_b"] = (shard.heads * qk_dim, mla.q_lora_rank)
        else:
            shapes["q"] = (shard.heads * qk_dim, hidden)
        shapes["kv_a"] = (mla.kv_lora_rank + mla.qk_rope_head_dim, hidden)
        shapes["kv_a_norm"] = (mla.kv_lora_rank,)
        shapes["kv_b"] = (shard.heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank)
        shapes["o"] = (hidden, shard.heads * mla.v_head_dim)
    else:
        d = spec.head_dim
        shapes["qkv"] = ((shard.heads + 2 * shard.kv_heads) * d, hidden)
        shapes["o"] = (hidden, shard.heads * d)
    if _is_moe_layer(spec, index):
        moe = spec.moe
        assert moe is not None
        shapes["router"] = (moe.num_experts, hidden)
        shapes["w13"] = (moe.num_experts, 2 * shard.moe_intermediate, hidden)
        shapes["w2"] = (moe.num_experts, hidden, shard.moe_intermediate)
        if shard.shared_intermediate:
            shapes["shared_gate_up"] = (2 * shard.shared_intermediate, hidden)
            shapes["shared_down"] = (hidden, shard.shared_intermediate)
    else:
        shapes["gate_up"] = (2 * shard.intermediate, hidden)
        shapes["down"] = (hidden, shard.intermediate)
    return shapes


def weight_storage(spec: ModelSpec) -> str | None:
    """How the checkpoint stores its projection / expert matrices: `fp8`, `int4` (AWQ, GPTQ, MXFP4...), or
    None (the model dtype). Embeddings, norms, the router and the LM head stay in the model dtype, as in
    those checkpoints."""
    q = (spec.quantization or "").lower()
    if not q:
        return None
    if "fp8" in q or q in ("fbgemm_fp8", "compressed-tensors-fp8", "modelopt"):
        return "fp8"
    if q in ("awq", "gptq", "mxfp4", "nvfp4", "int4", "awq_marlin", "gptq_marlin", "bitsandbytes", "fp4"):
        return "int4"
    return None


def layer_weight_bytes(spec: ModelSpec, shard: Shard, index: int, element_bytes: int) -> int:
    """Bytes of layer `index`'s weights on one rank, in the checkpoint's storage (see `weight_storage`)."""
    quant = weight_storage(spec)
    total = 0.0
    for name, shape in layer_shapes(spec, shard, index).items():
        n = math.prod(shape)
        if name.endswith("norm") or name == "router" or quant is None:
            total += n * element_bytes
        elif quant == "fp8":
            total += n
        else:
            total += math.prod(shape[:-1]) * -(-shape[-1] // 2)
    return int(total)


def planned_weight_bytes(spec: ModelSpec, shard: Shard, element_bytes: int) -> int:
    """What building the reference model (shard.layers layers, this rank) will allocate, before allocating it."""
    embed = shard.vocab * spec.hidden_size * element_bytes
    edges = embed * (1 if spec.tie_word_embeddings else 2) + spec.hidden_size * element_bytes
    return edges + sum(layer_weight_bytes(spec, shard, i, element_bytes) for i in range(shard.layers))


def check_host_room(what: str, need_bytes: int, free_bytes: int) -> None:
    """On the cpu device, refuse (as an out-of-memory) what would not fit: touching pages past the host's
    memory summons the kernel's OOM killer, not an exception, and other processes may be the ones killed."""
    from vramctl.measure.device import HOST_HEADROOM_FRACTION, host_memory

    host_free, _ = host_memory()
    room = min(free_bytes, int(host_free * HOST_HEADROOM_FRACTION))
    if need_bytes > room:
        raise MemoryError(
            f"cannot allocate {need_bytes} bytes for {what}: {free_bytes} bytes free on the device, "
            f"{host_free} bytes available on the host"
        )




def layer_elements(spec: ModelSpec, shard: Shard, index: int) -> int:
    """Weight elements of layer `index` on one rank."""
    return sum(math.prod(shape) for shape in layer_shapes(spec, shard, index).values())


def split_tokens(num_tokens: int, num_seqs: int) -> list[int]:
    """vLLM `_dummy_run`: num_tokens // num_reqs each, the remainder on the last (num_reqs ≤ num_tokens)."""
    reqs = max(1, min(num_seqs, num_tokens))
    lens = [num_tokens // reqs] * reqs
    lens[-1] += num_tokens % reqs
    return lens


def decode_inputs(model: ReferenceModel, batch: int, num_blocks: int, block_size: int) -> dict[str, Any]:
    """Static decode inputs: sequence i holds one token in block (i mod num_blocks); the new token at slot 1."""
    import torch

    dev = model.device
    blocks = torch.arange(batch, device=dev) % num_blocks
    return {
        "token_ids": torch.randint(0, model.spec.vocab_size, (batch,), device=dev),
        "positions": torch.ones(batch, dtype=torch.long, device=dev),
        "slot_mapping": blocks * block_size + 1 % block_size,
        "block_table": blocks[:, None].contiguous(),
        "seq_lens": torch.full((batch,), min(2, block_size), dtype=torch.long, device=dev),
    }
