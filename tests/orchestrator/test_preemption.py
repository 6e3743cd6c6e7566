"""A node preempted with notice: its trials move, one attempt each, from their checkpoints.

A real two-node Ray cluster on this machine (``procs.two_nodes``) runs a sweep of four
one-CPU trials with ``gapwatch sweep --address``, two on each node, every trial held at
step ``HOLD_AT`` (past its first checkpoint) through ``orchestrator.sweep.trainable.HOLD_ENV``.
Once both trials on the second node are held there, the test preempts that node as a
cloud does with notice: ``ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION
--deadline-remaining-seconds NOTICE_S`` (Ray records the drain and places nothing new
there, but ends nothing at the deadline: ending the machine is the cloud's part), then,
the notice out, SIGTERM to the node's raylet, as Ray's own preemption test ends a drained
node (``Cluster.end_second_node`` says why not to all its processes). Ray
flags the trials lost with it as preempted, which Tune alone would not count against
``max_failures`` (``orchestrator.sweep.attempts``). Then:

- ``max_failures`` 2 (the default): the two trials are started again on the head from
  their newest checkpoint (step 3), each run ends with steps 1..N stored once, the moved
  runs record 2 attempts and the others 1, and the driver's retry line for each says its
  node was preempted, with the drain's reason, and counts it as retry 1 of at most 2;
- ``max_failures: 0``: the two trials fail, each with one line saying its node was
  preempted and what to raise, and are not started again (Tune would have, uncounted).

The notice is the one wait on the clock (it is what a preemption with notice is, and
short); the rest waits on events: the trials held, the drain accepted, the node's
processes gone. 60-110 s a case on 2 shared, loaded cores: marked ``long`` with the
node-loss tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from gapwatch.orchestrator.sweep.trainable import HOLD_ENV
from gapwatch.store import open_store
from gapwatch.store.rows import RunRow

from .procs import (
    ONE_CLUSTER_AT_A_TIME,
    Cluster,
    finish_sweep,
    held_on_second_node,
    start_sweep,
    two_nodes,
)

pytestmark = [pytest.mark.slow, pytest.mark.long, ONE_CLUSTER_AT_A_TIME]

HOLD_AT = 5
"""The step every trial's first attempt waits after until the node has ended: past the
first checkpoint (``checkpoint_every: 3``), so steps 4 and 5 are stored, then lost with
the node and run again."""
NOTICE_S = 2
"""The drain's deadline, in seconds from the drain."""
REASON = "spot instance reclaimed"


def _cfg(name: str, steps: int, **more: Any) -> dict[str, Any]:
    return {
        "name": name, "env": "mul", "seeds": [0], "steps": steps,
        "tasks_per_step": 2, "group_size": 2, "checkpoint_every": 3,
        "compression": [{"codec": "quant", "bits": [2, 3, 4]}], "correction": ["none"],
        "stopping": False, "resources": {"cpus": 1}, **more,
    }  # fmt: skip


def _held(runs: list[RunRow]) -> bool:
    """Both trials on the second node hold a checkpoint and wait at ``HOLD_AT``."""
    return all((r.checkpoint_step or 0) >= 3 and r.last_step == HOLD_AT for r in runs)


def _preempt(cl: Cluster, url: str, moved: list[RunRow]) -> None:
    """Drain the second node for preemption with ``NOTICE_S`` of notice, then end it
    once the notice is out; its trials stay held (running, their first
    attempt) throughout the notice."""
    cl.drain_second_node(REASON, NOTICE_S)
    time.sleep(NOTICE_S)
    assert cl.nodes[1].poll() is None, "Ray ended the drained node itself"
    st = open_store(url, read_only=True)
    now = {r.trial_id: r for r in st.runs()}
    for r in moved:
        assert (now[r.trial_id].status, now[r.trial_id].attempts) == ("running", 1), now[r.trial_id]
    cl.end_second_node()


def _run(tmp: Path, cfg: dict[str, Any]) -> tuple[str, str, set[str], str]:
    """The sweep on two nodes, the second preempted with its trials held; its store's URL,
    the driver's output (its whitespace runs made single spaces), the moved trials' keys
    and the head's node id."""
    go = tmp / "go"
    with two_nodes(tmp) as cl:
        proc, url = start_sweep(cl.address, tmp, cfg)
        try:
            moved = held_on_second_node(proc, url, cl, _held)
            head = cl.node_id(0)
            _preempt(cl, url, moved)
            go.touch()
            out = " ".join(finish_sweep(proc).split())  # the console wraps long lines
            # how the head saw the drain and the node's end, for a failing case's message
            out += "\nGCS: " + cl.gcs_says("drain", "Drain", "preempt", "dead", "heartbeat")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return url, out, {r.trial_id for r in moved}, head


def _steps(url: str) -> dict[str, tuple[RunRow, list[int]]]:
    st = open_store(url)
    runs = st.runs()
    assert len(runs) == 4, [r.trial_id for r in runs]
    return {r.trial_id: (r, [h["step"] for h in st.history(r.id)]) for r in runs}


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials wait after ``HOLD_AT`` until the file ``go`` exists (set before the nodes
    start: their Ray workers inherit it)."""
    monkeypatch.setenv(HOLD_ENV, f"{HOLD_AT}:{tmp_path / 'go'}")


@pytest.mark.usefixtures("held")
def test_a_preempted_node_s_trials_go_on_from_their_checkpoints_one_attempt_each(
    tmp_path: Path,
) -> None:
    steps = 12
    url, out, keys, head = _run(tmp_path, _cfg("preempted", steps))
    assert "went on at step" not in out, out[-6000:]
    for key, (r, got) in _steps(url).items():
        assert r.status == "completed", (key, r.status, r.error)
        assert got == list(range(1, steps + 1)), (key, got)
        assert r.attempts == (2 if key in keys else 1), (key, r.attempts)
        if key in keys:
            # one failure as Tune counts it, and from the checkpoint: its first step was 4
            said = (
                f"retry {key}: its node was preempted ({REASON}); starting it again from "
                "its checkpoint after step 3 on a node still up (retry 1 of at most 2)"
            )
            assert said in out, out[-6000:]
            assert r.config["placement"]["node_id"] == head, r.config["placement"]
    assert out.count("; starting it again from ") == 2, out[-6000:]


@pytest.mark.usefixtures("held")
def test_with_max_failures_0_a_preempted_node_s_trials_fail_in_one_line(tmp_path: Path) -> None:
    steps = 8
    url, out, keys, _ = _run(tmp_path, _cfg("preempted-0", steps, max_failures=0))
    for key, (r, got) in _steps(url).items():
        if key in keys:
            assert (r.status, r.attempts) == ("failed", 1), (key, r.status, r.attempts)
            assert got == list(range(1, HOLD_AT + 1)), (key, got)
            said = (
                f"{key} failed: its node was preempted ({REASON}), and max_failures (0) "
                "allows no more retries"
            )
            assert out.count(said) == 1, out[-6000:]
        else:
            assert (r.status, r.attempts) == ("completed", 1), (key, r.status, r.attempts)
            assert got == list(range(1, steps + 1)), (key, got)
    assert "starting it again" not in out, out[-6000:]
