"""Samplers: the inference engine that chooses each token (never compressed).

One interface (``workers.sampling.Sampler``): ``generate(prompts, ...)`` returns, per
prompt, the emitted token ids, the sampler's log-prob of each under the actual sampling
distribution (after temperature), and why it stopped; ``sync(model)`` loads the
trainer's updated weights. Factories take explicit arguments:
``make(name, model, tokenizer, device=..., dtype=..., seed=..., stops=...)``.

- ``torch``: a copy of the trainer's weights in ``sampler_dtype`` (bfloat16 by default, as
  vLLM serves), batched generation with a KV cache, left padding, per-sequence stop at a
  stop string, EOS or the token budget (a finished sequence leaves the batch); a prefix
  every prompt shares (worked examples) is read once. Deterministic for a
  ``torch.Generator``.
- ``vllm``: ``workers/vllm_sampler.py``, imported only when chosen (GPU, ``gpu`` extra).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from gapwatch.workers.registry import Registry
from gapwatch.workers.sampling import DTYPE, Generation, Sampler, lm_forward

_REGISTRY: Registry[Sampler] = Registry("sampler")
register = _REGISTRY.register
"""Decorator: register a sampler factory
``(model, tokenizer, *, device, dtype, seed, stops) -> Sampler``."""
names = _REGISTRY.names
"""Sorted names of the registered samplers."""


def make(
    name: str,
    model: nn.Module,
    tokenizer: Any,
    *,
    device: str,
    dtype: str,
    seed: int,
    stops: tuple[str, ...],
) -> Sampler:
    """Build sampler ``name`` for the trainer's ``model``.

    ``device`` and ``dtype`` (a ``workers.sampling.DTYPE`` name) place the sampler's
    weights; ``seed`` seeds an engine that keeps its own generator; ``stops`` are the
    strings that end an action (``workers.envs.STOP_STRINGS``).
    """
    factory = _REGISTRY.factory(name)
    return factory(model, tokenizer, device=device, dtype=dtype, seed=seed, stops=stops)


class StopMatcher:
    """Per-sequence stop detection on decoded text (works for any tokenizer)."""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...]) -> None:
        self.tokenizer, self.stops = tokenizer, stops
        self.keep = max(len(s) for s in stops) + 16
        self._piece: dict[int, str] = {}

    def piece(self, tok: int) -> str:
        """Decoded text of one token id (cached)."""
        if tok not in self._piece:
            self._piece[tok] = self.tokenizer.decode([tok], skip_special_tokens=False)
        return self._piece[tok]

    def hit(self, tail: str) -> bool:
        """Does ``tail`` contain a stop string?"""
        return any(s in tail for s in self.stops)


class TorchSampler:
    """Dense forward of a ``sampler_dtype`` copy of the trainer's weights, with a KV cache.

    Built from the trainer's model BEFORE a codec is attached to it, so the copy is dense.
    """

    def __init__(
        self, model: nn.Module, tokenizer: Any, *, device: str, dtype: str, stops: tuple[str, ...]
    ) -> None:
        self.device = torch.device(device)
        self.model = copy.deepcopy(model).to(device=self.device, dtype=DTYPE[dtype]).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        self.eos = tokenizer.eos_token_id
        self.stop = StopMatcher(tokenizer, stops)

    def sync(self, model: nn.Module) -> None:
        """Copy the trainer's weights in (cast to this sampler's dtype)."""
        with torch.no_grad():
            for dst, src in zip(self.model.parameters(), model.parameters(), strict=True):
                dst.copy_(src)

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        shared: int = 0,
    ) -> list[Generation]:
        """Batched sampling; each sequence stops at a stop string, EOS or the budget. The
        first ``shared`` ids (the same in every prompt) are read once, their cache repeated."""
        gen = torch.Generator(device=self.device).manual_seed(seed)
        b, dev = len(prompts), self.device
        cache = None
        if shared > 0:  # (1, S) read once, its KV cache repeated over the batch
            _, cache = lm_forward(self.model, torch.tensor([prompts[0][:shared]], device=dev))
            cache.batch_repeat_interleave(b)
        rests = [p[shared:] for p in prompts]
        width = max(len(r) for r in rests)
        ids = torch.full((b, width), self.pad, dtype=torch.long)
        attn = torch.zeros((b, shared + width), dtype=torch.long)
        attn[:, :shared] = 1
        for i, r in enumerate(rests):  # left padding (between the shared part and the rest)
            ids[i, width - len(r) :] = torch.tensor(r)
            attn[i, shared + width - len(r) :] = 1
        ids, attn = ids.to(dev), attn.to(dev)
        pos = (attn.cumsum(-1) - 1).clamp_min(0)[:, shared:]  # (B, W)
        logits, cache = lm_forward(
            self.model, ids, attention_mask=attn, position_ids=pos, cache=cache, logits_to_keep=1
        )
        full = logits[:, -1].float()  # (B, V) every sequence's next-token logits
        emitted: list[list[int]] = [[] for _ in range(b)]
        logps: list[list[float]] = [[] for _ in range(b)]
        tails = [""] * b
        alive = [True] * b
        live = list(range(b))  # the sequences still in the forward's batch, in order
        next_pos = pos[:, -1:] + 1  # (b_live, 1)
        for _ in range(max_new_tokens):
            lp = torch.log_softmax(full / temperature, dim=-1)  # (B, V)
            # a draw for every sequence, finished ones too: each sequence's random stream
            # does not depend on when the others stop
            tok = torch.multinomial(lp.exp(), 1, generator=gen)  # (B, 1)
            tok_lp = lp.gather(-1, tok)  # (B, 1)
            # one device-to-host copy per decode step, not two per sequence (on CUDA each
            # element read would be its own synchronising copy)
            toks, tok_lps = tok[:, 0].tolist(), tok_lp[:, 0].tolist()
            for i in live:
                t = toks[i]
                emitted[i].append(t)
                logps[i].append(tok_lps[i])
                tails[i] = (tails[i] + self.stop.piece(t))[-self.stop.keep :]
                if t == self.eos or self.stop.hit(tails[i]):
                    alive[i] = False
            if not any(alive):
                break
            keep = [j for j, i in enumerate(live) if alive[i]]
            if len(keep) < len(live):  # finished sequences leave the forward's batch
                sel = torch.tensor(keep, device=dev)
                cache.batch_select_indices(sel)
                attn, next_pos = attn[sel], next_pos[sel]
                live = [live[j] for j in keep]
            attn = torch.cat(
                [attn, torch.ones((len(live), 1), dtype=attn.dtype, device=dev)], dim=1
            )
            ids_now = tok[torch.tensor(live, device=dev)]  # (b_live, 1)
            logits, cache = lm_forward(
                self.model, ids_now, attention_mask=attn, position_ids=next_pos, cache=cache
            )
            full = torch.zeros_like(full)  # finished sequences: a dummy (uniform) row
            full[live] = logits[:, -1].float()
            next_pos = next_pos + 1
        return [
            Generation(e, lp, truncated=alive[i])
            for i, (e, lp) in enumerate(zip(emitted, logps, strict=True))
        ]


@register("torch")
def _torch(
    model: nn.Module, tokenizer: Any, *, device: str, dtype: str, seed: int, stops: tuple[str, ...]
) -> Sampler:
    # seed: unused; generate() takes a seed per call
    return TorchSampler(model, tokenizer, device=device, dtype=dtype, stops=stops)


@register("vllm")
def _vllm(
    model: nn.Module, tokenizer: Any, *, device: str, dtype: str, seed: int, stops: tuple[str, ...]
) -> Sampler:
    from gapwatch.workers.vllm_sampler import VLLMSampler  # GPU only; the `gpu` extra

    return VLLMSampler(model, tokenizer, dtype=dtype, seed=seed, stops=stops)
