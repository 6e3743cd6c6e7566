"""The plain, immutable rows the store's read API returns (no ORM objects leak out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple


@dataclass(frozen=True, slots=True)
class SweepRow:
    id: int
    name: str
    status: str
    created: datetime
    config_text: str
    run_counts: dict[str, int] = field(default_factory=dict)
    """Number of runs per run status (only statuses that occur)."""


@dataclass(frozen=True, slots=True)
class RunRow:
    id: int
    sweep_id: int
    trial_id: str
    role: str
    pair_key: str
    seed: int
    compression: str
    correction: str
    config: dict[str, Any]
    status: str
    stop_rule: str | None
    stop_step: int | None
    error: str | None
    started: datetime
    ended: datetime | None
    last_step: int | None
    """Newest step with a stored metric or distribution; None before the first step."""
    checkpoint_step: int | None = None
    """The step the newest checkpoint was saved after (None: no checkpoint)."""
    checkpoint_path: str | None = None
    """Where that checkpoint is."""
    attempts: int | None = None
    """How many times the run's trainer was started (None: not counted, an older run)."""
    active_at: datetime | None = None
    """When the run last showed life: its newest step written, or its trainer (re)started."""
    step_interval_s: float | None = None
    """Its typical wall time between two new steps (None before its second step)."""


class Point(NamedTuple):
    """One point of a (downsampled) series. ``value`` is None exactly when ``flag`` is set."""

    run_id: int
    name: str
    step: int
    value: float | None
    flag: str | None


@dataclass(frozen=True, slots=True)
class DistRow:
    step: int
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DecisionRow:
    id: int
    run_id: int
    step: int
    rule: str
    action: str
    evidence: dict[str, Any]
    created: datetime
