"""Sweeps of a command trainer on a real local Ray: the TRL example end to end (pairs per
seed, a stopped treatment whose process group is gone), a trainer that fails at once, a
trainer that hangs, and a killed driver that leaves no trainer running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gapwatch.orchestrator.sweep.command import set_aside
from gapwatch.orchestrator.sweep.config import load_sweep_config, parse_sweep_config
from gapwatch.orchestrator.sweep.driver import execute_sweep
from gapwatch.store import open_store

ROOT = Path(__file__).resolve().parents[2]
GAPWATCH = Path(sys.executable).with_name("gapwatch")

# A trainer stand-in: writes a step every 0.2 s to the log it is given; --fail exits at once
TRAINER = """
import json, sys, time
log, marker = sys.argv[1], sys.argv[2]
if "--fail" in sys.argv:
    print("loading the model...", file=sys.stderr)
    print("CUDA error: out of memory", file=sys.stderr)
    sys.exit(3)
hang = int(sys.argv[sys.argv.index("--hang") + 1]) if "--hang" in sys.argv else None
with open(log, "a") as f:
    for s in range(1, 1000):
        if s == hang:  # alive, silent: a hung trainer
            time.sleep(10_000)
        f.write(json.dumps({"step": s, "critic/score/mean": 0.5}) + "\\n")
        f.flush()
        time.sleep(0.2)
"""


def _procs(marker: str) -> list[str]:
    """Command lines of live processes that carry ``marker``."""
    out = subprocess.run(["ps", "-eww", "-o", "stat=,args="], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if marker in ln and not ln.lstrip().startswith("Z")
            and "ps -eww" not in ln]  # fmt: skip


def _stand_in(tmp_path: Path, marker: str, *extra: str) -> dict[str, object]:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    return {
        "name": f"cmd-{marker}",
        "seeds": [0],
        "steps": 5,
        "compression": [{"codec": "fake", "level": 1}],
        "correction": ["none"],
        "stopping": False,
        "worker": {
            "command": ["{python}", str(script), "{trial_dir}/m.jsonl", marker, *extra],
            "log": "{trial_dir}/m.jsonl",
            "grace": 2,
        },
    }


def _example_sweep(tmp_path: Path, name: str, overrides: list[str]) -> tuple[Any, dict[str, Any]]:
    """Run ``examples/<name>`` with ``overrides`` on a real local Ray into a fresh SQLite
    store; the store and its runs by trial key (the sweep must complete)."""
    sweep = load_sweep_config(ROOT / "examples" / name, overrides)
    url = f"sqlite:///{tmp_path}/sweep.db"
    out = execute_sweep(
        sweep, db_url=url, address=None, resume=False, storage=tmp_path / "ray", live=False
    )
    assert out.status == "completed"
    st = open_store(url)
    return st, {r.trial_id: r for r in st.runs(sweep_id=out.sweep_id)}


def test_a_log_left_by_an_earlier_attempt_is_set_aside(tmp_path: Path) -> None:
    """A restarted command trial starts its trainer from step 1: the log an earlier
    attempt left at the same path is renamed first, never appended to."""
    log = tmp_path / "m.jsonl"
    assert set_aside(log) is None  # a first attempt: nothing there
    log.write_text('{"step": 1}\n')
    assert set_aside(log) == tmp_path / "m.jsonl.attempt-1" and not log.exists()
    log.write_text('{"step": 1}\n{"step": 2}\n')
    assert set_aside(log) == tmp_path / "m.jsonl.attempt-2"
    assert (tmp_path / "m.jsonl.attempt-2").read_text().count("step") == 2


@pytest.mark.slow
def test_the_trl_example_sweep_stops_the_treatment_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    pytest.importorskip("trl")
    st, runs = _example_sweep(tmp_path, "sweep-trl.yaml", ["seeds=[0]", "steps=8"])
    ctrl, treat = runs["s0-control"], runs["s0-topk_keep0.05-none"]
    assert ctrl.pair_key == treat.pair_key and (ctrl.role, treat.role) == ("control", "treatment")
    assert ctrl.status == "completed" and [h["step"] for h in st.history(ctrl.id)] == list(
        range(1, 9)
    )
    # the compressed policy writes garbage: every completion runs to the length budget, its
    # two groups a step score alike. Two groups alike from the first step are no sign by
    # themselves (issue 37: chance, at two groups a step); the score below the control's by
    # many standard errors, once five steps give the two runs' noise, is (step 6 or so)
    assert treat.status == "stopped" and treat.stop_step is not None and treat.stop_step < 8
    assert max(h["step"] for h in st.history(treat.id)) == treat.stop_step
    time.sleep(1)
    assert _procs("examples/trl_grpo.py") == [], "a TRL trainer outlived its trial"


@pytest.mark.slow
def test_a_trainer_that_fails_at_once_fails_its_trial_with_its_stderr(tmp_path: Path) -> None:
    cfg = _stand_in(tmp_path, "failing-marker", "--fail")
    url = f"sqlite:///{tmp_path}/f.db"
    out = execute_sweep(
        parse_sweep_config(cfg), db_url=url, address=None, resume=False,
        storage=tmp_path / "ray", live=False,
    )  # fmt: skip
    st = open_store(url)
    runs = st.runs(sweep_id=out.sweep_id)
    assert {r.status for r in runs} == {"failed"}
    err = runs[0].error or ""
    assert "trainer exited with code 3" in err and "CUDA error: out of memory" in err
    assert "\n" not in err


@pytest.mark.slow
def test_a_killed_driver_leaves_no_trainer_running(tmp_path: Path) -> None:
    marker = f"orphan-marker-{os.getpid()}"
    cfg = _stand_in(tmp_path, marker)
    cfg["steps"] = 500
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    driver = subprocess.Popen(
        [str(GAPWATCH), "sweep", str(path), "--db", f"sqlite:///{tmp_path}/k.db"],
        cwd=tmp_path, stdout=(tmp_path / "driver.log").open("w"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        t0 = time.monotonic()
        while len(_procs(marker)) < 2 and time.monotonic() - t0 < 120:
            time.sleep(0.5)
        shown = (tmp_path / "driver.log").read_text()[-2000:]
        assert len(_procs(marker)) == 2, f"both trainers should be running: {shown}"
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and Ray's processes it started
        driver.wait()
    t0 = time.monotonic()
    while _procs(marker) and time.monotonic() - t0 < 30:
        time.sleep(0.5)
    assert _procs(marker) == [], "a trainer outlived the killed driver"


@pytest.mark.slow
def test_a_hung_trainer_is_ended_and_its_trial_fails_naming_its_last_step(
    tmp_path: Path,
) -> None:
    """Each trainer writes 3 steps, then sleeps on without exiting (and without a line):
    after ``idle`` s its group is ended and its trial failed in one line, not retried,
    its 3 steps kept."""
    marker = f"hung-marker-{os.getpid()}"
    cfg = _stand_in(tmp_path, marker, "--hang", "4")
    cfg["worker"]["idle"] = 3  # type: ignore[index]
    url = f"sqlite:///{tmp_path}/h.db"
    t0 = time.monotonic()
    out = execute_sweep(
        parse_sweep_config(cfg), db_url=url, address=None, resume=False,
        storage=tmp_path / "ray", live=False,
    )  # fmt: skip
    assert time.monotonic() - t0 < 120
    assert out.status == "failed"
    runs = open_store(url).runs(sweep_id=out.sweep_id)
    assert len(runs) == 2
    for r in runs:
        assert r.status == "failed", (r.trial_id, r.status, r.error)
        err = r.error or ""
        line = "trainer hung: no log line for 3 s after step 3; ended its process group"
        assert line in err and "\n" not in err, err
        assert [h["step"] for h in open_store(url).history(r.id)] == [1, 2, 3]
        assert r.attempts == 1, "a trial's own error is not retried"
    assert _procs(marker) == [], "a hung trainer outlived its trial"


@pytest.mark.slow
def test_the_trl_gap_sweep_stores_the_sliced_tails_and_sketches_of_each_trl_trial(
    tmp_path: Path,
) -> None:
    pytest.importorskip("trl")
    from gapwatch.correction import names as N

    overrides = ["seeds=[0]", "steps=3", "correction=[tis]"]
    st, runs = _example_sweep(tmp_path, "sweep-trl-gap.yaml", overrides)
    ctrl, treat = runs["s0-control"], runs["s0-topk_keep0.05-tis"]
    assert ctrl.status == "completed"
    for run in (ctrl, treat):
        hist = st.history(run.id)
        assert hist and all(N.tail("post_tool", "p95") in h for h in hist), run.trial_id
        steps = st.distribution_steps(run.id, N.dist("post_tool"))
        assert steps == [h["step"] for h in hist], run.trial_id  # a sketch with every step
    c1, t1 = st.history(ctrl.id)[0], st.history(treat.id)[0]
    key = N.tail("post_tool", "p95")
    assert t1[key] > 10 * c1[key]  # the compressed trainer's post-tool tail, from step 1
    assert t1[N.IS_MAX] <= 2.0  # tis's weights (C = 2) reached TRL's loss
