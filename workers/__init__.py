"""gapwatch workers: one RL run (agentic env, policy, codecs, samplers, GRPO loop).

``from workers import RunConfig, train``; ``for res in train(cfg): res.step, res.metrics,
res.distributions``. Registries: ``workers.envs.names()``, ``workers.codecs.names()``,
``workers.samplers.names()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers.config import RunConfig

if TYPE_CHECKING:
    from workers.loop import StepResult, train

__all__ = ["RunConfig", "StepResult", "train"]


def __getattr__(name: str) -> Any:
    # The loop pulls in transformers; load it only when asked for.
    if name in ("train", "StepResult"):
        from workers import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
