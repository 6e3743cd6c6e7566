"""Shared fixtures: a small, fast quick-preset config (the warm start is cached on disk)."""

from __future__ import annotations

from typing import Any

import pytest

from gapwatch.workers import RunConfig
from gapwatch.workers.sampling import Sampler


def small(**over: Any) -> RunConfig:
    """The quick preset shrunk for tests: 4 tasks x 4 trajectories, 1 CPU thread."""
    base: dict[str, Any] = {"steps": 3, "tasks_per_step": 4, "group_size": 4, "num_threads": 1}
    return RunConfig.preset("quick", **{**base, **over})


def make_sampler(model: Any, tokenizer: Any, cfg: RunConfig) -> Sampler:
    """The config's sampler over ``model``, built as the GRPO loop builds it."""
    from gapwatch.workers.loop import make_sampler as build

    return build(cfg, model, tokenizer)


@pytest.fixture(scope="session")
def warm_model_dir() -> str:
    """The cached warm-started tiny model (built once, ~1.5 min, on first use)."""
    from gapwatch.workers.model import ensure_warm_start

    return str(ensure_warm_start(small()))
