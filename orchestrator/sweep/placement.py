"""Where a trial ran: the node and the GPU ids Ray gave it, recorded in its run's config.

Ray schedules *logical* GPUs: a trial asking for ``gpus: 1`` (or ``0.5``) is given GPU
ids on its node and a ``CUDA_VISIBLE_DEVICES`` naming them, and the worker's ``cuda``
is then that GPU. ``with_placement(train_fn)`` wraps any Tune trainable so that, before
it trains, the trial reports one result carrying :func:`placement` (under
``PLACEMENT_KEY``, no step); the Recorder (``orchestrator.sweep.recorder``) stores it in the
run's config as ``placement`` and the Monitor ignores it. So every trial, including one
that fails at once (``device: cuda`` where no GPU is usable), says in the store which
node and GPUs it had, and the two-node scheduling test checks that no two concurrent
trials on a node shared a whole GPU.

Not here: asking for resources (``orchestrator.sweep.driver`` passes ``resources`` to Tune).
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from gapwatch.orchestrator.sweep.trainable import TRIAL_KEY

PLACEMENT_KEY = "gw_placement"
"""Result key: where the trial runs (a dict, see :func:`placement`)."""


def placement() -> dict[str, Any]:
    """This process's node and GPUs as Ray assigned them (inside a Ray worker)."""
    import ray

    ctx = ray.get_runtime_context()
    return {
        "node_id": ctx.get_node_id(),
        "host": socket.gethostname(),
        "gpu_ids": [str(i) for i in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "pid": os.getpid(),
        "started_at": time.time(),
    }


def report_placement(trial_key: str) -> None:
    """One ``tune.report`` of this trial's placement (no step: rules and steps skip it)."""
    from ray import tune

    tune.report({TRIAL_KEY: trial_key, PLACEMENT_KEY: placement()})


def placement_of(result: dict[str, Any]) -> dict[str, Any] | None:
    """The placement a result carries, or None."""
    p = result.get(PLACEMENT_KEY)
    return dict(p) if isinstance(p, dict) else None


def with_placement(train_fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """``train_fn`` that first reports where its trial runs."""

    @functools.wraps(train_fn)
    def placed(config: dict[str, Any]) -> None:
        report_placement(str(config["spec"]["trial_key"]))
        train_fn(config)

    return placed
