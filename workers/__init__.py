"""gapwatch workers: one RL run (agentic env, policy, codecs, samplers, GRPO loop).

``from gapwatch.workers import RunConfig, train``; ``for res in train(cfg): res.step, res.metrics,
res.distributions``. Registries: ``workers.envs.names()``, ``workers.codecs.names()``,
``workers.samplers.names()``.

Nothing is imported until asked for: ``workers.validation`` (pydantic only) serves the
rules and the CLI without loading torch, and the loop pulls in transformers only when a
run starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gapwatch.workers.config import RunConfig
    from gapwatch.workers.loop import StepResult, train

__all__ = ["RunConfig", "StepResult", "train"]


def __getattr__(name: str) -> Any:
    if name == "RunConfig":
        from gapwatch.workers import config

        return config.RunConfig
    if name in ("train", "StepResult"):
        from gapwatch.workers import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
