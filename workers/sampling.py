"""The sampler contract, a leaf module: what the GRPO loop needs from an inference engine.

``Generation`` (one sampled action), the ``Sampler`` protocol, and the dtype names every
engine and the trainer share. Nothing here imports another gapwatch module, so samplers,
rollouts, the model loader and the vLLM engine can all depend on it without a cycle.
Implementations live in ``workers.samplers`` (torch) and ``workers.vllm_sampler``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

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


class Sampler(Protocol):
    """What the GRPO loop needs from an inference engine."""

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int
    ) -> list[Generation]:
        """Sample one action per prompt (token ids of the whole history)."""
        ...

    def sync(self, model: nn.Module) -> None:
        """Load the trainer's current weights."""
        ...
