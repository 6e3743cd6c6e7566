"""The Ray Tune trainable: one trial of the built-in worker, one ``tune.report`` per step.

``trainable(config)`` builds ``workers.RunConfig`` from the trial spec and reports each
step of a ``workers.loop.GRPORun``, with a checkpoint (Tune's checkpoint API) every
``checkpoint_every`` steps, taken up from the newest one Tune hands back (a retry after the
trial's node was lost: ``orchestrator.sweep.attempts``) or, on ``--resume``, from the one the
store recorded.
:func:`report_steps` reports any other source of steps (a test's wrapper). A report carries the trial key
and the step, the metrics nested under one key and the distributions JSON-encoded under
another, so Tune flattens neither; :func:`unpack` reads one back on the driver.

A test seam, unset in use: ``HOLD_ENV`` makes a trial wait at a given step for a file, so a
test can act on a sweep mid-way (kill a node) at a point known from events, not from time.

Not here: what the driver does with a result (``orchestrator.sweep.monitor``,
``orchestrator.sweep.recorder``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

TRIAL_KEY = "gw_trial"
"""Result key: the trial's stable ``trial_key`` (the store's run ``trial_id``)."""
STEP_KEY = "gw_step"
"""Result key: the step (from 1) this result reports."""
METRICS_KEY = "gw_metrics"
"""Result key: the step's ``{metric name: value}`` dict."""
DISTS_KEY = "gw_dists"
"""Result key: the step's distributions, JSON-encoded (one string, so Tune keeps it whole)."""
HOLD_ENV = "GAPWATCH_TEST_HOLD"
"""Tests only: ``STEP:PATH`` makes a built-in trial that has just reported step STEP wait
until the file PATH exists. Read in the trial's own process (a Ray worker inherits it from
``ray start``'s environment). The node-loss test holds every trial past its first
checkpoint until it has killed a node, so no trial can finish before the kill however fast
the machine, and releases them after."""


class Step(Protocol):
    """What a source of steps yields (``workers.StepResult`` is one)."""

    step: int
    metrics: dict[str, float]
    distributions: dict[str, dict[str, Any]]


class Reported(NamedTuple):
    """One of our results, as the driver reads it back."""

    key: str
    step: int
    metrics: dict[str, float]
    dists_json: str


def pack(trial_key: str, res: Step) -> dict[str, Any]:
    """The ``tune.report`` dict of one step."""
    return {
        TRIAL_KEY: trial_key,
        STEP_KEY: int(res.step),
        METRICS_KEY: {k: float(v) for k, v in res.metrics.items()},
        DISTS_KEY: json.dumps(res.distributions),
    }


def unpack(result: dict[str, Any]) -> Reported | None:
    """Our fields of a Tune result; None for Tune's own bookkeeping results."""
    key = result.get(TRIAL_KEY)
    if key is None or STEP_KEY not in result:
        return None
    return Reported(
        str(key), int(result[STEP_KEY]), dict(result.get(METRICS_KEY) or {}),
        result.get(DISTS_KEY) or "{}",
    )  # fmt: skip


def report_steps(trial_key: str, steps: Iterable[Step]) -> None:
    """``tune.report`` each step (Tune blocks each report until the driver takes it)."""
    from ray import tune

    for res in steps:
        tune.report(pack(trial_key, res))


def hold(step: int) -> None:
    """Wait here if ``HOLD_ENV`` names this step, until its file exists (see there)."""
    at, _, path = os.environ.get(HOLD_ENV, "").partition(":")
    if not path or int(at) != step:
        return
    while not os.path.exists(path):
        time.sleep(0.05)


def trainable(config: dict[str, Any]) -> None:
    """One Tune trial of the built-in worker: a ``GRPORun`` over the spec's RunConfig,
    taken up from this trial's newest Tune checkpoint (a retry) or else from
    ``spec["restore"]`` (``--resume``) where either is there, saving a checkpoint through
    Tune every ``spec["checkpoint_every"]`` steps."""
    from ray import tune

    from gapwatch.workers import RunConfig
    from gapwatch.workers.loop import GRPORun

    spec = config["spec"]
    restore = spec.get("restore")
    retry = tune.get_checkpoint()
    with contextlib.ExitStack() as held:
        path = held.enter_context(retry.as_directory()) if retry is not None else None
        resume = path or (restore and restore["path"])
        run = GRPORun(RunConfig.from_dict(dict(spec["run"])), resume=resume)
    every = spec.get("checkpoint_every")
    with tempfile.TemporaryDirectory(prefix="gw-ckpt-") as tmp:
        for res in run.steps():
            checkpoint = None
            if every and res.step % every == 0 and res.step < run.cfg.steps:
                path = run.save(Path(tmp) / f"step{res.step}")
                checkpoint = tune.Checkpoint.from_directory(str(path))
            tune.report(pack(spec["trial_key"], res), checkpoint=checkpoint)
            hold(res.step)
