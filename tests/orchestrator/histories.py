"""Metric histories the rule tests share: a healthy, noisy dense-like run."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from gapwatch.correction import names as N
from gapwatch.orchestrator.watch.replay import lockstep

Row = dict[str, Any]
POST, TEXT = N.tail("post_tool", "p95"), N.tail("text", "p95")


def healthy(rng: random.Random, steps: int = 40, tail: float = 0.05) -> list[Row]:
    """A dense-like run: every figure noisy around a healthy level (the mean score of a
    batch of about 80 rewards whose std is 0.45: noise 0.05)."""
    rows = []
    for s in range(1, steps + 1):
        rows.append(
            {
                "step": s,
                N.SCORE_MEAN: 0.4 + rng.gauss(0, 0.05),
                N.SCORE_STD: 0.45,
                N.SCORE_MIN: -0.1,
                N.SCORE_MAX: 1.0,
                N.ZERO_ADV_FRAC: min(1.0, max(0.0, 0.3 + rng.gauss(0, 0.1))),
                N.RESPONSE_LENGTH_MEAN: 80 + rng.gauss(0, 15),
                N.RESPONSE_BUDGET: 512.0,
                N.CLIP_RATIO: max(0.0, 0.01 + rng.gauss(0, 0.01)),
                N.PROBS_DIFF_MEAN: 0.006 * (1 + rng.gauss(0, 0.1)),
                TEXT: tail * (1 + rng.gauss(0, 0.2)),
                POST: 1.2 * tail * (1 + rng.gauss(0, 0.2)),
                N.ess("post_tool"): min(1.0, max(0.3, 0.8 + rng.gauss(0, 0.1))),
            }
        )
    return rows


def watched(rs: Any, hist: list[Row], control: list[Row] | None) -> Iterator[tuple[Any, list[Any]]]:
    """Feed one watcher of the rule set ``rs`` the run row by row, the control's rows up to
    each step before it (as the Monitor does, through replay's ``lockstep``); yield (the
    watcher, the step's decisions)."""
    w = rs.watch()
    for _, decisions in lockstep(w, hist, iter(control or ())):
        yield w, decisions
