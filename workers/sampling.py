"""The sampler contract, a leaf module: what the GRPO loop needs from an inference engine.

``Generation`` (one sampled action), the ``Sampler`` protocol, and the dtype names every
engine and the trainer share. Nothing here imports another gapwatch module, so samplers,
rollouts, the model loader and the vLLM engine can all depend on it without a cycle.
Implementations live in ``workers.samplers`` (torch) and ``workers.vllm_sampler``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Final, Protocol

import torch
from torch import nn

DTYPE: Final[dict[str, torch.dtype]] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""Weight dtypes by the name a config uses (``sampler_dtype``, ``trainer_dtype``)."""


@dataclass
class Generation:
    """One sampled action."""

    ids: list[int]
    """Emitted token ids (including a stop/EOS token)."""
    logps: list[float]
    """Sampler log-prob of each emitted token, after temperature."""
    truncated: bool
    """True when cut at the token budget (no stop string, no EOS)."""


def lm_forward(
    model: nn.Module,
    ids: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: Any = None,
    logits_to_keep: int = 0,
) -> tuple[torch.Tensor, Any]:
    """A causal LM's forward with a KV cache: ``(logits, cache)``.

    ``ids`` (B, T) follow what ``cache`` holds (None: nothing); ``logits_to_keep`` > 0
    computes the logits of the last that many positions only (0: all). transformers
    names the cache argument ``cache`` from 5.x, ``past_key_values`` before: both work.
    """
    name = _cache_arg(type(model).forward)
    out = model(
        input_ids=ids, attention_mask=attention_mask, position_ids=position_ids,
        use_cache=True, logits_to_keep=logits_to_keep, **{name: cache},
    )  # fmt: skip
    kept = getattr(out, "cache", None)
    return out.logits, kept if kept is not None else out.past_key_values


@functools.cache
def _cache_arg(forward: Any) -> str:
    params = inspect.signature(forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class Sampler(Protocol):
    """What the GRPO loop needs from an inference engine."""

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        seed: int,
        shared: int = 0,
    ) -> list[Generation]:
        """Sample one action per prompt (token ids of the whole history); the first
        ``shared`` ids are the same in every prompt (an engine may compute them once)."""
        ...

    def sync(self, model: nn.Module) -> None:
        """Load the trainer's current weights."""
        ...
