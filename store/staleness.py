"""Is a ``running`` run still running? The rule ``gapwatch runs`` shows ``stale`` by.

A run's status is written by the process that records it (``gapwatch run``, a sweep's
driver, a watch, a trainer's callback). A process killed with SIGKILL, lost with its
machine, or a watch left with Ctrl-C cannot write its end, and its run stays ``running``
in the store for ever. Rather than guess a status, the listing shows such a run as
``stale`` (a display only: the stored status is left as it is, because the process may
be alive where this machine cannot see it, and it alone knows how the run ended).

The rule (:func:`is_stale`): a run stored as ``running`` is stale when both

1. it has been silent longer than its own pace allows: no new step for more than
   ``max(STALE_STEPS x step_interval_s, STALE_FLOOR_S)`` seconds (the floor alone before
   its second step), counted from ``active_at`` (its newest step, or its trainer's
   latest (re)start; ``started`` for a run recorded before revision 0007); and
2. no live process vouches for it: where the run records the process that trains it
   (``placement``: ``host``, ``pid``, ``started_at``, as ``gapwatch run``, the TRL
   callback and a sweep's trials do) and that host is this machine, that pid is not
   alive (or now belongs to a process started after the run's, a pid used again). A
   process on another host, or none recorded (a watched log), cannot be checked here:
   silence alone decides.

``step_interval_s`` is kept by the store's writes (:func:`next_interval`): the wall time
between two new steps, smoothed (a weight of ``INTERVAL_WEIGHT`` per new step) with each
sample capped at ``INTERVAL_CAP`` times the current figure, so one long pause (an
evaluation, a checkpoint save, a restart) lengthens it a little and not for long, as a
median would, while a run that really slows down is followed within a few steps.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .rows import RunRow

STALE_STEPS = 10.0
"""A running run may be silent for this many of its own step intervals."""
STALE_FLOOR_S = 1800.0
"""...and in any case for this long (seconds): a run of 1 s steps that pauses for an
evaluation is not stale at once. The same bound as a command trial's default hung
``worker: idle``."""
INTERVAL_WEIGHT = 0.2
"""Weight of each new sample in ``step_interval_s`` (an exponential moving average)."""
INTERVAL_CAP = 4.0
"""A sample counts as at most this many times the current ``step_interval_s``."""
START_SLACK_S = 2.0
"""A process that started this long after the recorded ``started_at`` is another one."""


def next_interval(current: float | None, sample: float) -> float:
    """``step_interval_s`` after a new step came ``sample`` s after the one before."""
    sample = max(0.0, sample)
    if current is None:
        return sample
    return current + INTERVAL_WEIGHT * (min(sample, INTERVAL_CAP * current) - current)


def this_process() -> dict[str, Any]:
    """This process as a run's ``placement`` records it (host, pid, when)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started_at": time.time()}


def _started_epoch(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch; Linux ``/proc``), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def process_alive(placement: Mapping[str, Any] | None) -> bool | None:
    """Whether the process a run records lives: None where it cannot be told here (none
    recorded, or on another host)."""
    if not isinstance(placement, Mapping) or placement.get("host") != socket.gethostname():
        return None
    pid = placement.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    with contextlib.suppress(OSError, IndexError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":  # exited, not yet reaped
            return False
    since = placement.get("started_at")
    if not isinstance(since, int | float) or (began := _started_epoch(pid)) is None:
        return True
    return began <= since + START_SLACK_S  # later: the pid names another process now


def allowance_s(run: RunRow) -> float:
    """How long ``run`` may go without a new step before it can be stale (seconds)."""
    if run.step_interval_s is None:
        return STALE_FLOOR_S
    return max(STALE_STEPS * run.step_interval_s, STALE_FLOOR_S)


def silent_s(run: RunRow, now: datetime | None = None) -> float:
    """Seconds since ``run`` last showed life (``active_at``, else ``started``)."""
    now = now or datetime.now(UTC)
    return (now - (run.active_at or run.started)).total_seconds()


def is_stale(run: RunRow, now: datetime | None = None) -> bool:
    """Whether ``run`` is stored as running but is, by the rule above, not."""
    if run.status != "running" or silent_s(run, now) <= allowance_s(run):
        return False
    return process_alive(run.config.get("placement")) is not True


def shown_status(run: RunRow, now: datetime | None = None) -> str:
    """The status to show: ``stale`` for a stale run, else the stored one."""
    return "stale" if is_stale(run, now) else run.status
