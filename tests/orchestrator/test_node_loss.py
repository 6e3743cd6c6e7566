"""A node lost mid-sweep: its trials go on from their checkpoints on the node still up.

A real two-node Ray cluster on this machine (``ray start --head`` and a second ``ray
start --address``, two CPUs each, as in ``test_gpu_scheduling``) runs a sweep of four
one-CPU trials with ``gapwatch sweep --address``: two on each node. Every trial is held
at a known step (past its first checkpoint, with steps still to run) until the test has
killed the second node: the test waits on that event, not on time, so a fast machine or
a loaded one cannot finish a trial before the kill. Once both trials on the second node
are held there, its raylet and its Ray workers get SIGKILL (nothing else: a command
trainer they started must go by itself), and the trials are let go. Then:

- built-in trials: the lost node's trials are started again by Tune on the head, from
  their newest checkpoint, and the sweep completes with every run's steps 1..N stored
  exactly once (the steps stored past the checkpoint before the kill are run and stored
  again, once); the moved runs record 2 attempts, the others 1; the driver said which
  trials it started again;
- command trials: the lost node's trainers are gone within seconds (their parent-death
  signal), and their trials, started again from step 1, also end with steps 1..N once.

The hold: built-in trials through ``orchestrator.sweep.trainable.HOLD_ENV`` (set in the
environment the nodes start with, so their Ray workers inherit it), command trials in the
test's own trainer. The head's GCS is told to notice a dead node in about 3 s
(``RAY_health_check_*``; Ray's defaults take up to 30 s), so each case fits in about a
minute.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gapwatch.orchestrator.sweep.trainable import HOLD_ENV
from gapwatch.store import open_store
from gapwatch.store.rows import RunRow

from .procs import (
    BIN,
    ONE_CLUSTER_AT_A_TIME,
    Cluster,
    cmdline,
    descendants,
    finish_sweep,
    held_on_second_node,
    two_nodes,
)

# two minutes of real clusters: out of `make test`'s budget, run by `make test-long` (which
# .ci/run runs after it); bench/node_loss_bench.py measures the same
pytestmark = [pytest.mark.slow, pytest.mark.long, ONE_CLUSTER_AT_A_TIME]

HOLD_AT = 5
"""The step every trial's first attempt waits after until the node is killed: past the
built-in trials' first checkpoint (``checkpoint_every: 3``), so steps 4 and 5 are stored,
then lost with the node and run again."""

# A trainer stand-in for command trials: a step every 0.25 s up to N, named by a marker;
# after step HOLD_AT it waits for the file GO (the test's kill is done)
TRAINER = f"""
import json, os, sys, time
log, n, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(log, "a") as f:
    for s in range(1, n + 1):
        f.write(json.dumps({{"step": s, "critic/score/mean": 0.5}}) + "\\n")
        f.flush()
        while s == {HOLD_AT} and not os.path.exists(go):
            time.sleep(0.05)
        time.sleep(0.25)
"""


def _driver(cl: Cluster, tmp: Path, cfg: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
    path = tmp / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    url = f"sqlite:///{tmp}/{cfg['name']}.db"
    proc = subprocess.Popen(
        [str(BIN / "gapwatch"), "sweep", str(path), "--db", url, "--address", cl.address],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
        start_new_session=True, env={**os.environ, "RAY_ADDRESS": ""},
    )  # fmt: skip
    return proc, url


def _head_node_id(runs: list[RunRow], cl: Cluster) -> str | None:
    """The head's Ray node id, told by a running trial's worker pid (not below the
    second node's ``ray start``)."""
    below = set(descendants(cl.nodes[1].pid))
    for r in runs:
        where = r.config.get("placement")
        running = isinstance(where, dict) and r.status == "running"
        if running and where["pid"] not in below and cmdline(int(where["pid"])):  # type: ignore[index]
            return str(where["node_id"])  # type: ignore[index]
    return None


def _kill(cl: Cluster, keep: str | None = None) -> None:
    """SIGKILL the second node (sparing ``keep``) and wait until what was killed is gone:
    from then on a held trial there can do nothing more, whatever it is told."""
    killed = cl.kill_second_node(keep=keep)
    assert killed, "nothing to kill on the second node"
    deadline = time.monotonic() + 30
    while any(cmdline(p) for p in killed):
        assert time.monotonic() < deadline, "a killed Ray process still there after 30 s"
        time.sleep(0.05)


def _each_step_once(url: str, steps: int) -> list[RunRow]:
    st = open_store(url)
    runs = st.runs()
    assert len(runs) == 4
    for r in runs:
        assert r.status == "completed", (r.trial_id, r.status, r.error)
        got = [h["step"] for h in st.history(r.id)]
        assert got == list(range(1, steps + 1)), (r.trial_id, got)
    return runs


def test_a_lost_node_s_trials_go_on_from_their_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = 24
    cfg = {
        "name": "lost-node", "env": "mul", "seeds": [0], "steps": steps,
        "tasks_per_step": 2, "group_size": 2, "checkpoint_every": 3,
        "compression": [{"codec": "quant", "bits": [2, 3, 4]}], "correction": ["none"],
        "stopping": False, "resources": {"cpus": 1},
        # Tune's storage: one folder both nodes reach, apart from their temp folders
        "storage_path": str(tmp_path / "shared"),
    }  # fmt: skip
    go = tmp_path / "go"
    monkeypatch.setenv(HOLD_ENV, f"{HOLD_AT}:{go}")  # before the nodes start: their workers'
    with two_nodes(tmp_path) as cl:
        proc, url = _driver(cl, tmp_path, cfg)
        try:
            # both trials there hold a checkpoint (step 3) and steps after it (4, 5), and
            # wait at step 5 until the kill is done
            moved = held_on_second_node(
                proc, url, cl,
                lambda rs: all((r.checkpoint_step or 0) >= 3 and (r.last_step or 0) >= HOLD_AT
                               for r in rs),
            )  # fmt: skip
            assert all(r.last_step == HOLD_AT for r in moved), [r.last_step for r in moved]
            st = open_store(url, read_only=True)
            head = _head_node_id(st.runs(), cl)
            _kill(cl)
            go.touch()
            out = finish_sweep(proc)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    runs = _each_step_once(url, steps)
    assert "went on at step" not in out, out[-3000:]
    keys = {r.trial_id for r in moved}
    for r in runs:
        assert r.attempts == (2 if r.trial_id in keys else 1), (r.trial_id, r.attempts)
        if r.trial_id in keys:
            # it went on from its checkpoint (the step its attempt reported first says so)
            said = f"retry {r.trial_id}: its process was lost; starting it again from its "
            assert said + "checkpoint after step 3 " in out, out[-3000:]
            if head is not None:  # ended on the node still up
                assert r.config["placement"]["node_id"] == head, r.config["placement"]
        # every checkpoint, the moved trials' included, lies in the shared storage
        assert r.checkpoint_path and Path(r.checkpoint_path).is_relative_to(tmp_path / "shared")


def test_a_lost_node_s_command_trainers_are_gone_and_their_trials_rerun(tmp_path: Path) -> None:
    steps = 40
    marker = f"lost-node-trainer-{os.getpid()}"
    (tmp_path / "trainer.py").write_text(TRAINER)
    go = tmp_path / "go"
    cfg = {
        "name": "lost-node-cmd", "seeds": [0], "steps": steps,
        "compression": [{"codec": "fake", "level": [1, 2, 3]}], "correction": ["none"],
        "stopping": False, "resources": {"cpus": 1},
        "worker": {"command": ["{python}", "{workdir}/trainer.py", "{trial_dir}/m.jsonl",
                               str(steps), str(go), marker],
                   "log": "{trial_dir}/m.jsonl", "grace": 2},
    }  # fmt: skip
    with two_nodes(tmp_path) as cl:
        proc, url = _driver(cl, tmp_path, cfg)
        try:
            # both trainers there wrote step 5 and wait until the kill is done
            held_on_second_node(proc, url, cl, lambda rs: all(r.last_step == HOLD_AT for r in rs))
            below = descendants(cl.nodes[1].pid)
            trainers = [p for p in below if marker in cmdline(p)]
            assert len(trainers) == 2, [cmdline(p) for p in below]
            _kill(cl, keep=marker)  # the trainers are left to go by themselves
            t0 = time.monotonic()
            while any(cmdline(p) for p in trainers) and time.monotonic() - t0 < 10:
                time.sleep(0.1)
            assert not any(cmdline(p) for p in trainers), "a trainer outlived its lost node"
            go.touch()
            out = finish_sweep(proc)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    runs = _each_step_once(url, steps)
    assert sorted(r.attempts or 0 for r in runs) == [1, 1, 2, 2], [
        (r.trial_id, r.attempts) for r in runs
    ]
    assert out.count("its process was lost; starting it again from step 1") == 2, out[-3000:]
