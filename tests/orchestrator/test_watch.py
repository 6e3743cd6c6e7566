"""``gapwatch watch``: a log followed while a real process writes it; the follower's
tolerance (half-written lines, rotation, truncation, pauses, TRL's trainer_state.json);
the stop carried out on the writer's process group; bad input as one line each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gapwatch.correction import names as N
from gapwatch.orchestrator.watch.follow import LogFollower
from gapwatch.orchestrator.watch.logs import LogError
from gapwatch.store import open_store

GAPWATCH = Path(sys.executable).with_name("gapwatch")
WRITER = r"""
import json, sys, time
path, steps, collapse, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
with open(path, "a") as f:
    for s in range(1, steps + 1):
        score = 0.4 if s < collapse else -0.1
        f.write(json.dumps({"step": s, "elapsed_seconds": 0.1,
                            "data": {"critic/score/mean": score, "response_length/clip_ratio": 0.0,
                                     "training/rollout_probs_diff_mean": 0.3}}) + "\n")
        f.flush()
        time.sleep(pause)
time.sleep(60)  # a trainer that lingers: only a stop ends it
"""


def _writer(log: Path, steps: int, collapse: int, pause: float = 0.05) -> subprocess.Popen[bytes]:
    """A real trainer stand-in in its own process group, writing verl's file-logger lines."""
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(log), str(steps), str(collapse), str(pause)],
        start_new_session=True,
    )


def _watch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GAPWATCH), "watch", *args], capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip


def _gone(p: subprocess.Popen[bytes], within: float = 10.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        if p.poll() is not None:
            return True
        time.sleep(0.05)
    return False


# --- the follower --------------------------------------------------------------------


def _append(path: Path, text: str) -> None:
    with path.open("a") as fh:
        fh.write(text)


def test_half_written_lines_wait_for_their_newline(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    f = LogFollower(log, "auto")
    assert not f.exists() and f.poll() == []
    _append(log, '{"step": 1, "x": 1.0}\n{"step": 2, "x"')
    assert [s.step for s in f.poll()] == [1]
    _append(log, ": 2.0}\n")
    assert [(s.step, s.metrics) for s in f.poll()] == [(2, {"x": 2.0})]
    assert f.poll() == []  # a pause is not an error
    _append(log, '{"step": 3, "x": 3.0}')  # the trainer died mid-line: close tries it once
    assert [s.step for s in f.close()] == [3]


def test_a_last_line_that_never_parses_is_reported_not_fatal(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text('{"step": 1, "x": 1.0}\n{"step": 2, "x": ')
    f = LogFollower(log)
    assert [s.step for s in f.poll()] == [1]
    assert f.close() == [] and f.half_line == '{"step": 2, "x": '


def test_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text('{"step": 1, "x": 1.0}\n')
    f = LogFollower(log)
    assert [s.step for s in f.poll()] == [1]
    _append(log, '{"step": 2, "x": 2.0}\n')
    os.rename(log, tmp_path / "run.jsonl.1")  # rotated: the old file is read to its end
    log.write_text('{"step": 3, "x": 3.0}\n')
    assert [s.step for s in f.poll()] == [2, 3]
    log.write_text('{"step": 1}\n')  # truncated in place (shorter than what was read)
    assert f.poll() == []
    _append(log, '{"step": 4, "x": 4.0}\n')
    assert [s.step for s in f.poll()] == [4]
    assert f.report.skipped == 1 and "step 1 after step 3" in (f.report.first_skip or "")


def test_csv_steps_complete_on_the_next_step_or_a_quiet_file(tmp_path: Path) -> None:
    log = tmp_path / "run.csv"
    log.write_text("step,name,value\n1,a,1\n1,b,2\n2,a,3\n")
    f = LogFollower(log, settle_s=0.05)
    assert [(s.step, s.metrics) for s in f.poll()] == [(1, {"a": 1.0, "b": 2.0})]
    time.sleep(0.1)
    assert [(s.step, s.metrics) for s in f.poll()] == [(2, {"a": 3.0})]


def test_trl_trainer_state_rewritten_at_each_save(tmp_path: Path) -> None:
    state = tmp_path / "trainer_state.json"
    f = LogFollower(state)  # told by its name
    hist: list[dict[str, Any]] = [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.4}]
    state.write_text(json.dumps({"global_step": 2, "log_history": hist}))
    assert [s.step for s in f.poll()] == [1, 2]
    state.write_text('{"global_step": 3, "log_hist')  # caught mid-rewrite: read next time
    assert f.poll() == []
    hist += [{"step": 3, "reward": -0.1}, {"step": 3, "train_runtime": 9.0}]
    time.sleep(0.01)
    state.write_text(json.dumps({"global_step": 3, "log_history": hist}))
    got = f.poll()
    assert [(s.step, s.addition) for s in got] == [(3, False), (3, True)]
    bad = tmp_path / "other" / "trainer_state.json"
    bad.parent.mkdir()
    bad.write_text('{"global_step": 1}')
    with pytest.raises(LogError, match="no log_history"):
        LogFollower(bad).poll()


# --- gapwatch watch on a live writer ---------------------------------------------------


@pytest.mark.slow
def test_watch_follows_a_live_writer_and_ends_its_process_group(tmp_path: Path) -> None:
    log, db = tmp_path / "metrics.jsonl", f"sqlite:///{tmp_path}/w.db"
    ctl = tmp_path / "control.jsonl"
    ctl.write_text("".join(
        json.dumps({"step": s, "data": {N.SCORE_MEAN: 0.4, N.PROBS_DIFF_MEAN: 0.002}}) + "\n"
        for s in range(1, 31)
    ))  # fmt: skip
    # the score falls at step 15 below a control that holds the run's level: two steps
    # below it by many standard errors of the two step means (score_collapse's control
    # test, issue 37), step 16; judged against its own first steps alone, the fall must
    # last a whole window: step 21
    writer = _writer(log, steps=30, collapse=15)
    try:
        res = _watch(str(log), "--db", db, "--pid", str(writer.pid), "--grace", "3",
                     "--control", str(ctl), "--name", "live")  # fmt: skip
        assert res.returncode == 3, res.stdout + res.stderr
        assert "stop: score_collapse at step 16" in res.stdout
        assert "ended by SIGTERM" in res.stdout
        assert _gone(writer, 5), "the trainer's process group outlived the stop"
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
    st = open_store(db)
    runs = {r.trial_id: r for r in st.runs()}
    run, control = runs["live"], runs["control-control"]
    assert (run.status, run.stop_rule, run.stop_step) == ("stopped", "score_collapse", 16)
    assert [h["step"] for h in st.history(run.id)] == list(range(1, 17))
    assert run.pair_key == control.pair_key and control.role == "control"
    decisions = {(d.rule, d.action, d.step) for d in st.decisions(run_id=run.id)}
    assert ("score_collapse", "stop", 16) in decisions
    assert ("gap_vs_control", "warn", 1) in decisions  # the control log fed the rules


@pytest.mark.slow
def test_a_finished_trainer_completes_the_run_and_unfed_rules_are_named(tmp_path: Path) -> None:
    log, db = tmp_path / "trl.jsonl", f"sqlite:///{tmp_path}/w.db"
    log.write_text("".join(
        json.dumps({"step": s, "reward": 0.5, "frac_reward_zero_std": 0.1, "kl": 0.01}) + "\n"
        for s in range(1, 6)
    ))  # fmt: skip
    res = _watch(str(log), "--db", db, "--idle", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "trl names, mapped: reward -> critic/score/mean" in res.stdout
    assert "rule post_tool_tail_growth cannot decide on this log: log lacks" in res.stdout
    assert "no new line for 1 s" in res.stdout and "completed: 5 steps" in res.stdout
    st = open_store(db)
    (run,) = st.runs()
    hist = st.history(run.id)
    assert hist[0]["reward"] == hist[0][N.SCORE_MEAN] == 0.5  # both names kept


@pytest.mark.slow
def test_rules_are_judged_fed_from_the_first_training_row_not_a_timings_row(
    tmp_path: Path,
) -> None:
    # TRL's W&B runs log profiling timings at step 0, before any training figure
    log, db = tmp_path / "trl.jsonl", f"sqlite:///{tmp_path}/w.db"
    rows = [{"step": 0, "profiling/Time taken: GRPOTrainer._prepare_inputs": 0.2}]
    rows += [{"step": s, "reward": 0.5, "frac_reward_zero_std": 0.1} for s in range(1, 6)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _watch(str(log), "--db", db, "--idle", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "rule post_tool_tail_growth cannot decide on this log" in res.stdout
    assert "rule score_collapse cannot decide" not in res.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--wait", "0.5"], "did not appear within 0.5 s"),
        (["--pid", "999999"], "--pid 999999: no such process"),
        (["--format", "xml"], "unknown log format 'xml'; valid: auto, "),
        (["--end-hung"], "--end-hung ends a hung trainer's process group: give its --pid"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    res = _watch(str(tmp_path / "never.jsonl"), "--db", f"sqlite:///{tmp_path}/w.db", *args)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.stderr


def test_a_malformed_line_is_one_line_and_keeps_the_steps_before_it(tmp_path: Path) -> None:
    log, db = tmp_path / "m.jsonl", f"sqlite:///{tmp_path}/w.db"
    log.write_text('{"step": 1, "critic/score/mean": 0.5}\n{"step": 2, oops}\n')
    res = _watch(str(log), "--db", db, "--idle", "1")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().startswith("error: ") and "line 2: not valid JSON" in res.stderr
    st = open_store(db)
    (run,) = st.runs()
    assert run.status == "failed" and "not valid JSON" in (run.error or "")
    assert [h["step"] for h in st.history(run.id)] == [1]


def test_an_exited_pid_ends_the_watch(tmp_path: Path) -> None:
    log = tmp_path / "x.jsonl"
    log.write_text('{"step": 1, "critic/score/mean": 0.5}\n')
    # a trainer that ends when told (its stdin closes), once the watch is following it
    trainer = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)  # fmt: skip
    watch = subprocess.Popen(
        [str(GAPWATCH), "watch", str(log), "--db", f"sqlite:///{tmp_path}/w.db", "--pid",
         str(trainer.pid)], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watch.stdout is not None
    first = watch.stdout.readline()
    assert first.startswith("following"), first
    assert trainer.stdin is not None
    trainer.stdin.close()
    trainer.wait()
    rest = watch.stdout.read()
    assert watch.wait(timeout=60) == 0
    assert f"the trainer (pid {trainer.pid}) has ended" in rest


@pytest.mark.parametrize("end_hung", [True, False])
def test_a_live_pid_whose_log_goes_silent_is_hung_not_finished(
    tmp_path: Path, end_hung: bool
) -> None:
    """The writer logs 4 steps, then sleeps on, alive: after --idle s the run fails with
    one line naming step 4; --end-hung ends the writer's process group, else it is left."""
    log, db = tmp_path / "hung.jsonl", f"sqlite:///{tmp_path}/w.db"
    writer = _writer(log, steps=4, collapse=99)
    try:
        res = _watch(str(log), "--db", db, "--pid", str(writer.pid), "--idle", "2",
                     "--grace", "2", *(["--end-hung"] if end_hung else []))  # fmt: skip
        assert res.returncode == 5, res.stdout + res.stderr
        assert "Traceback" not in res.stderr
        said = [ln for ln in res.stdout.splitlines() if "trainer hung" in ln]
        assert len(said) == 1, res.stdout
        assert "trainer hung: no log line for 2 s after step 4" in said[0]
        if end_hung:
            assert "; ended it (process group" in said[0]
            assert _gone(writer, 5), "the hung trainer's process group outlived --end-hung"
        else:
            assert f"pid {writer.pid} left running" in said[0]
            assert writer.poll() is None, "without --end-hung the trainer is left alone"
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
        writer.wait()
    st = open_store(db)
    (run,) = st.runs()
    assert run.status == "failed", run
    assert (run.error or "").startswith("trainer hung: no log line for 2 s after step 4")
    assert "\n" not in (run.error or "")
    assert [h["step"] for h in st.history(run.id)] == [1, 2, 3, 4]
