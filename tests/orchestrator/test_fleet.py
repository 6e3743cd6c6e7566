"""``gapwatch watch`` over a fleet: fields from a layout or a manifest, the control of each
seed, templated stop actions (retried once, stored with the decision), bounded open files,
and a fleet of real writer processes started by a shell loop, watched from one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gapwatch.orchestrator.watch import fleet_layout as L
from gapwatch.orchestrator.watch.fleet import (
    ACTION_RULE,
    FleetOptions,
    ParkedFollower,
    _end_pid,
    watch_fleet,
)
from gapwatch.orchestrator.watch.replay import ruleset_for
from gapwatch.store import open_store

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "examples" / "logs"
GAPWATCH = Path(sys.executable).with_name("gapwatch")

# --- layout, control, manifest, templates ---------------------------------------------


def test_layout_reads_fields_and_finds_logs() -> None:
    lay = L.Layout("runs/{correction}-s{seed}/metrics.jsonl")
    assert lay.fields == ["correction", "seed"]
    assert lay.glob == "runs/*-s*/metrics.jsonl"
    assert lay.match("runs/tis-s3/metrics.jsonl") == {"correction": "tis", "seed": "3"}
    # a relative layout matches the end of a longer path; a seed is digits
    assert lay.match("/data/team/runs/seq_tis-s12/metrics.jsonl") == {
        "correction": "seq_tis",
        "seed": "12",
    }
    assert lay.match("runs/tis-sX/metrics.jsonl") is None
    assert lay.match("runs/tis-s1/other.jsonl") is None
    assert lay.match("myruns/tis-s1/metrics.jsonl") is None  # whole path parts only
    job = L.Layout("{job}/{codec}_{correction}_{seed}.log")
    assert job.match("j77/topk_tis_0.log") == {"job": "j77", "codec": "topk", "correction": "tis", "seed": "0"}  # fmt: skip


@pytest.mark.parametrize(
    ("template", "needle"),
    [("runs/metrics.jsonl", "names no field"), ("runs/{seed:03d}/m.jsonl", "is not a field")],
)
def test_bad_layouts_say_how(template: str, needle: str) -> None:
    with pytest.raises(L.LayoutError, match=needle):
        L.Layout(template)


def test_the_control_of_a_seed() -> None:
    default = None
    assert L.is_control({"seed": "0"}, default)  # nothing says compressed or corrected
    assert L.is_control({"codec": "dense", "correction": "none"}, default)
    assert not L.is_control({"correction": "tis"}, default)
    assert not L.is_control({"codec": "topk", "correction": "none"}, default)
    when = L.parse_control_when("correction=none")
    assert when == {"correction": "none"}
    assert L.is_control({"correction": "none", "codec": "topk"}, when)
    assert not L.is_control({"correction": "tis"}, when)
    assert L.is_control({"correction": "tis", "control": True}, when)  # a manifest says so
    assert not L.is_control({"control": "false"}, default)
    with pytest.raises(L.LayoutError, match="field=value"):
        L.parse_control_when("none")


def test_pairs_and_identity() -> None:
    tre = L.identity_of("fleet", {"seed": "1", "correction": "tis"}, False, "x")
    ctl = L.identity_of("fleet", {"seed": "1", "correction": "none"}, True, "y")
    other = L.identity_of("fleet", {"seed": "2", "correction": "tis"}, False, "z")
    assert tre.pair_key == ctl.pair_key == "fleet/s1" != other.pair_key
    assert ctl.store_fields()["role"] == "control" and ctl.compression_label == "none"
    assert tre.store_fields() == {"role": "treatment", "pair_key": "fleet/s1", "seed": 1,
                                  "compression": "unknown", "correction": "tis"}  # fmt: skip
    with pytest.raises(L.LayoutError, match="seed 'abc' is not an integer"):
        L.identity_of("fleet", {"seed": "abc"}, False, "runs/abc")


def test_manifest(tmp_path: Path) -> None:
    m = tmp_path / "fleet.yaml"
    m.write_text(
        "runs/a/metrics.jsonl: {seed: 0, codec: topk, correction: tis, job: 101}\n"
        "runs/b/metrics.jsonl: {seed: 0, control: true, job: 102}\n"
        "/abs/c.jsonl:\n"
    )
    got = L.load_manifest(m)
    assert got[tmp_path / "runs/a/metrics.jsonl"]["job"] == 101
    assert L.is_control(got[tmp_path / "runs/b/metrics.jsonl"], None)
    assert got[Path("/abs/c.jsonl")] == {}
    m.write_text("- a\n- b\n")
    with pytest.raises(L.LayoutError, match="one entry per log"):
        L.load_manifest(m)
    m.write_text("a.jsonl: 3\n")
    with pytest.raises(L.LayoutError, match="give a mapping"):
        L.load_manifest(m)


def test_templates() -> None:
    fields = {"seed": "0", "job": "4711", "dir": "runs/tis-s0"}
    assert L.render("scancel {job}", fields) == "scancel 4711"
    assert L.render("{dir}/train.pid", fields) == "runs/tis-s0/train.pid"
    with pytest.raises(L.LayoutError, match=r"names \{name\}, which this run lacks"):
        L.render("kubectl delete job {name}", fields)


# --- the follower's bounded files, the stop of one process ------------------------------


def test_a_parked_follower_keeps_its_place(tmp_path: Path) -> None:
    log = tmp_path / "m.jsonl"
    log.write_text('{"step": 1, "x": 1}\n{"step": 2, "x"')
    f = ParkedFollower(log)
    assert [s.step for s in f.poll()] == [1] and f.is_open
    f.park()
    assert not f.is_open and f.poll() == [] and not f.is_open  # not grown: not reopened
    with log.open("a") as fh:
        fh.write(': 2}\n{"step": 3, "x": 3}\n')
    assert [s.step for s in f.poll()] == [2, 3] and f.is_open


def test_a_trainer_that_outlives_sigterm_is_killed_and_the_line_says_why() -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "1"  # ignoring it now
        said = _end_pid(p.pid, 0.5)
        assert said.startswith(f"process {p.pid} did not end within 0.5 s of SIGTERM (state S"), (
            said
        )
        assert said.endswith("it ignores SIGTERM); sent SIGKILL"), said
        assert p.wait(timeout=10) == -signal.SIGKILL
    finally:
        p.kill()
        p.wait()


def test_a_pid_sharing_its_group_is_ended_alone(tmp_path: Path) -> None:
    shell = subprocess.Popen(
        ["sh", "-c", "sleep 30 & echo $! > a.pid; sleep 30 & echo $! > b.pid; wait"],
        cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    try:
        while not (tmp_path / "b.pid").exists() or not (tmp_path / "b.pid").read_text():
            time.sleep(0.02)
        a, b = (int((tmp_path / f"{n}.pid").read_text()) for n in "ab")
        assert "ended by SIGTERM" in _end_pid(a, 3)
        os.kill(b, 0)  # its sibling lives on
        assert shell.poll() is None
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


# --- a fleet in process: pairing, a failing action retried and stored -------------------


def _copy_history(src: Path, dst: Path, steps: int | None = None) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    lines = src.read_text().splitlines(keepends=True)
    dst.write_text("".join(lines[:steps]))


def test_a_fleet_pairs_by_seed_and_stores_each_action(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for seed in (0, 1):
        _copy_history(LOGS / "seed_dense.verl.jsonl", runs / f"none-s{seed}/metrics.jsonl")
        _copy_history(LOGS / "seed_compressed.verl.jsonl", runs / f"tis-s{seed}/metrics.jsonl")
    _copy_history(LOGS / "seed_dense.verl.jsonl", runs / "scratch/metrics.jsonl", 3)
    lines: list[str] = []
    opts = FleetOptions(
        source=str(runs / "*" / "metrics.jsonl"), layout="runs/{correction}-s{seed}/metrics.jsonl",
        sweep="team", ruleset=ruleset_for(None, None), idle=0.5, poll=0.05, rescan=0.2,
        on_stop="echo stopping {correction} s{seed} at {step}; test {seed} = 0",
        say=lines.append,
    )  # fmt: skip
    db = f"sqlite:///{tmp_path}/f.db"
    assert watch_fleet(opts, db) == 4, "\n".join(lines)  # seed 1's action fails twice
    st = open_store(db)
    (sweep,) = st.sweeps()
    assert sweep.name == "team"
    got = {r.trial_id: r for r in st.runs()}
    assert set(got) == {"none-s0/metrics.jsonl", "tis-s0/metrics.jsonl",
                        "none-s1/metrics.jsonl", "tis-s1/metrics.jsonl"}  # fmt: skip
    for seed in (0, 1):
        ctl, tre = got[f"none-s{seed}/metrics.jsonl"], got[f"tis-s{seed}/metrics.jsonl"]
        assert (ctl.role, ctl.status, ctl.pair_key) == ("control", "completed", f"team/s{seed}")
        assert (tre.role, tre.status, tre.pair_key) == ("treatment", "stopped", f"team/s{seed}")
        assert tre.correction == "tis"
        ds = st.decisions(run_id=tre.id)
        assert ("gap_vs_control", "warn") in {(d.rule, d.action) for d in ds}  # saw its control
        (act,) = [d for d in ds if d.rule == f"{ACTION_RULE}/on_stop"]
        ev = act.evidence
        assert ev["command"] == f"echo stopping tis s{seed} at {tre.stop_step}; test {seed} = 0"
        assert f"stopping tis s{seed}" in ev["output"]
        if seed == 0:
            assert (act.action, ev["exit_code"], ev["attempts"]) == ("continue", 0, 1)
        else:
            assert (act.action, ev["exit_code"], ev["attempts"]) == ("warn", 1, 2)
    assert any("tis-s1/metrics.jsonl: on_stop" in x and "failed twice (exit 1)" in x for x in lines)
    assert any("skipped" in x and "does not fit --layout" in x for x in lines)
    assert any("fleet done: 4 runs (2 completed, 2 stopped)" in x for x in lines)


def test_a_run_ends_with_its_trainer(tmp_path: Path) -> None:
    """With --pid-file a run whose trainer has exited is finished at once (not after
    idle), and one whose trainer lives but has written no step yet is waited for."""
    runs = tmp_path / "runs"
    _copy_history(LOGS / "seed_dense.verl.jsonl", runs / "none-s0/metrics.jsonl")
    ended = subprocess.Popen(["true"])  # a trainer that has exited (and been reaped)
    ended.wait()
    (runs / "none-s0/train.pid").write_text(str(ended.pid))
    loading = subprocess.Popen(["sleep", "2"])  # a trainer loading its model
    _copy_history(LOGS / "seed_dense.verl.jsonl", runs / "none-s1/metrics.jsonl", 0)
    (runs / "none-s1/train.pid").write_text(str(loading.pid))
    lines: list[str] = []
    opts = FleetOptions(
        source=str(runs / "*" / "metrics.jsonl"), layout="runs/{correction}-s{seed}/metrics.jsonl",
        ruleset=ruleset_for(None, None), idle=0.5, poll=0.05, rescan=0.2,
        pid_file="{dir}/train.pid", say=lines.append,
    )  # fmt: skip
    reaper = threading.Thread(target=loading.wait)  # its parent reaps it, as a shell would
    reaper.start()
    assert watch_fleet(opts, f"sqlite:///{tmp_path}/e.db") == 0, "\n".join(lines)
    reaper.join()
    said = "\n".join(lines)
    assert "none-s0/metrics.jsonl: its trainer (pid" in said and "completed after 44 steps" in said
    assert "none-s1/metrics.jsonl: its trainer (pid" in said and "no growth" not in said


HANGING_WRITER = r"""
import os, sys, time
history, log, pid_file, steps, linger = sys.argv[1:6]
with open(pid_file, "w") as f:
    f.write(str(os.getpid()))
with open(history) as src, open(log, "a") as out:
    for line in list(src)[: int(steps)]:
        out.write(line)
        out.flush()
time.sleep(float(linger))  # alive and silent: hung (a linger of 0 exits: finished)
"""


def _gone(p: subprocess.Popen[bytes], within: float) -> bool:
    try:
        p.wait(timeout=within)
    except subprocess.TimeoutExpired:
        return False
    return True


@pytest.mark.parametrize("end_hung", [True, False])
def test_a_live_trainer_whose_log_goes_silent_is_hung_not_finished(
    tmp_path: Path, end_hung: bool
) -> None:
    """As ``watch --pid`` has it: a fleet's run whose trainer (--pid-file) lives but whose
    log has been silent for --idle s fails with one line naming its last step, and
    --end-hung ends that trainer; a run whose trainer has exited is finished as before."""
    runs = tmp_path / "runs"
    procs = {}
    for seed, linger in ((0, "60"), (1, "0")):  # seed 0 hangs after step 3, seed 1 exits
        d = runs / f"none-s{seed}"
        d.mkdir(parents=True)
        procs[seed] = subprocess.Popen(
            [sys.executable, "-c", HANGING_WRITER, str(LOGS / "seed_dense.verl.jsonl"),
             str(d / "metrics.jsonl"), str(d / "train.pid"), "3", linger],
            start_new_session=True,
        )  # fmt: skip
    for seed in procs:
        while not (runs / f"none-s{seed}/metrics.jsonl").exists():
            time.sleep(0.02)
    lines: list[str] = []
    opts = FleetOptions(
        source=str(runs / "*" / "metrics.jsonl"), layout="runs/{correction}-s{seed}/metrics.jsonl",
        ruleset=ruleset_for(None, None), idle=1.0, poll=0.05, rescan=0.2, grace=5,
        pid_file="{dir}/train.pid", end_hung=end_hung, say=lines.append,
    )  # fmt: skip
    db = f"sqlite:///{tmp_path}/h.db"
    try:
        assert watch_fleet(opts, db) == 5, "\n".join(lines)  # EXIT_HUNG
        hung_pid = procs[0].pid
        if end_hung:
            assert _gone(procs[0], 5), "the hung trainer outlived --end-hung"
        else:
            assert procs[0].poll() is None, "without --end-hung the trainer is left alone"
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    said = [x for x in lines if "trainer hung" in x]
    assert len(said) == 1 and said[0].startswith("none-s0/metrics.jsonl: run "), lines
    assert "failed: trainer hung: no log line for 1 s after step 3" in said[0]
    if end_hung:
        assert f"; ended it (process group {hung_pid} ended by SIGTERM" in said[0]
    else:
        assert f"; pid {hung_pid} left running (--end-hung ends it)" in said[0]
    got = {r.trial_id: r for r in open_store(db).runs()}
    hung, done = got["none-s0/metrics.jsonl"], got["none-s1/metrics.jsonl"]
    assert (hung.status, hung.last_step) == ("failed", 3) and hung.error is not None
    assert hung.error.startswith("trainer hung: no log line for 1 s after step 3; ")
    assert (done.status, done.last_step) == ("completed", 3)
    assert any("none-s1/metrics.jsonl: its trainer (pid" in x for x in lines), lines
    assert any("fleet done: 2 runs (1 completed, 1 failed)" in x for x in lines), lines


def test_fleet_bad_input_is_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(GAPWATCH), "watch", *args, "--db", f"sqlite:///{tmp_path}/x.db"],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    for args, needle in [
        ((str(tmp_path / "*.jsonl"), "--wait", "0.3"), "no log matched"),
        ((str(tmp_path), "--layout", "x.jsonl"), "names no field"),
        ((str(tmp_path / "*.jsonl"), "--pid", "1"), "--pid name one run"),
        ((str(tmp_path), "--pid-file", "{dir}/p"), "--pid-file and --control-when are for a fleet"),
        ((str(tmp_path / "*.jsonl"), "--end-hung"), "--end-hung ends a hung trainer: give the"),
    ]:
        res = run(*args)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and needle in lines[0], res.stderr


# --- real writer processes started by a shell loop ---------------------------------------

WRITER = r"""
import os, signal, sys, time
# SIGTERM ends it at once whatever the shell or the harness above it left inherited
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
history, log, pid_file, pause, linger = sys.argv[1:6]
with open(pid_file, "w") as f:
    f.write(str(os.getpid()))
with open(history) as src, open(log, "a") as out:
    for line in src:  # verl's file logger: {"step": n, "data": {...}} per line, unbuffered
        out.write(line)
        out.flush()
        time.sleep(float(pause))
time.sleep(float(linger))  # a trainer that lingers: only a stop ends it
"""

LOOP = r"""
for seed in 0 1 2; do
  for corr in none tis icepop seqtis; do
    d=runs/$corr-s$seed; mkdir -p $d
    case $corr in none|seqtis) h=dense; linger=0;; *) h=compressed; linger=60;; esac
    "$PY" writer.py "$LOGS/seed_$h.verl.jsonl" $d/metrics.jsonl $d/train.pid 0.1 $linger &
  done
done
wait
"""


def test_a_fleet_of_real_writers_started_by_a_shell_loop(tmp_path: Path) -> None:
    (tmp_path / "writer.py").write_text(WRITER)
    env = {**os.environ, "PY": sys.executable, "LOGS": str(LOGS)}
    shell = subprocess.Popen(["sh", "-c", LOOP], cwd=tmp_path, env=env, start_new_session=True)
    db = f"sqlite:///{tmp_path}/fleet.db"
    try:
        res = subprocess.run(
            [str(GAPWATCH), "watch", "runs/*/metrics.jsonl", "--db", db, "--sweep", "loop",
             "--layout", "runs/{correction}-s{seed}/metrics.jsonl",
             "--pid-file", "{dir}/train.pid", "--grace", "10",  # a bound, not a wait: a
             # writer ends at once on SIGTERM; 3 s was once too short under load here
             "--on-stop", "echo {rule} {step} > {dir}/stopped.txt",
             "--idle", "2", "--rescan", "0.5", "--max-open", "4"],
            cwd=tmp_path, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert res.returncode == 3, res.stdout + res.stderr
        shell.wait(timeout=10)  # every writer has ended: nothing left running
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    st = open_store(db)
    got = {r.trial_id: r for r in st.runs()}
    assert len(got) == 12, res.stdout
    for seed in (0, 1, 2):
        ctl = got[f"none-s{seed}/metrics.jsonl"]
        assert (ctl.role, ctl.status, ctl.last_step) == ("control", "completed", 44)
        healthy = got[f"seqtis-s{seed}/metrics.jsonl"]
        assert (healthy.role, healthy.status) == ("treatment", "completed"), res.stdout
        for corr in ("tis", "icepop"):
            run = got[f"{corr}-s{seed}/metrics.jsonl"]
            assert (run.role, run.status, run.pair_key) == ("treatment", "stopped", ctl.pair_key)
            assert run.stop_step is not None and run.stop_step < 44
            acts = {
                d.evidence["kind"]: d
                for d in st.decisions(run_id=run.id)
                if d.rule.startswith(ACTION_RULE)
            }
            assert acts["pid_file"].action == "continue", acts["pid_file"].evidence
            assert "ended by SIGTERM" in acts["pid_file"].evidence["output"]
            stopped = (tmp_path / f"runs/{corr}-s{seed}/stopped.txt").read_text().split()
            assert stopped == [str(run.stop_rule), str(run.stop_step)]
    assert "fleet done: 12 runs (6 completed, 6 stopped)" in res.stdout
    assert "which it lacks" not in res.stdout  # {rule} and {step} come with the stop


TRL_WRITER = r"""
import json, os, sys, time
history, out_dir, pause, linger = sys.argv[1:5]
with open(os.path.join(out_dir, "train.pid"), "w") as f:
    f.write(str(os.getpid()))
rows = []
for line in open(history):  # the seed's run in TRL's names, saved as TRL saves its state
    d = json.loads(line)
    m = d["data"]
    rows.append({"step": d["step"], "reward": m["critic/score/mean"],
                 "completions/clipped_ratio": m["response_length/clip_ratio"],
                 "completions/mean_length": m["response_length/mean"],
                 "frac_reward_zero_std": m["critic/advantages/zero_group_frac"]})
    tmp = os.path.join(out_dir, "trainer_state.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"global_step": d["step"], "log_history": rows}, f)
    os.replace(tmp, os.path.join(out_dir, "trainer_state.json"))
    time.sleep(float(pause))
time.sleep(float(linger))
"""

TRL_LOOP = r"""
for seed in 0 1; do
  for corr in none tis; do
    d=runs/$corr-s$seed; mkdir -p $d
    case $corr in none) h=dense; linger=0;; *) h=compressed; linger=60;; esac
    "$PY" trl_writer.py "$LOGS/seed_$h.verl.jsonl" $d 0.1 $linger &
  done
done
wait
"""


def test_a_fleet_of_trl_state_files_in_a_folder(tmp_path: Path) -> None:
    (tmp_path / "trl_writer.py").write_text(TRL_WRITER)
    env = {**os.environ, "PY": sys.executable, "LOGS": str(LOGS)}
    shell = subprocess.Popen(["sh", "-c", TRL_LOOP], cwd=tmp_path, env=env, start_new_session=True)
    db = f"sqlite:///{tmp_path}/trl.db"
    try:
        res = subprocess.run(
            [str(GAPWATCH), "watch", "runs", "--pattern", "*/trainer_state.json", "--db", db,
             "--layout", "runs/{correction}-s{seed}/trainer_state.json",
             "--pid-file", "{dir}/train.pid", "--grace", "3", "--idle", "2", "--rescan", "0.5"],
            cwd=tmp_path, capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert res.returncode == 3, res.stdout + res.stderr
        shell.wait(timeout=10)  # every writer has ended
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    st = open_store(db)
    got = {r.trial_id: r for r in st.runs()}
    assert set(got) == {f"{c}-s{s}/trainer_state.json" for c in ("none", "tis") for s in (0, 1)}
    for seed in (0, 1):
        ctl, tre = got[f"none-s{seed}/trainer_state.json"], got[f"tis-s{seed}/trainer_state.json"]
        assert (ctl.status, ctl.last_step) == ("completed", 44), res.stdout
        assert (tre.status, tre.pair_key) == ("stopped", ctl.pair_key), res.stdout
    assert "trl names, mapped" in res.stdout


def test_a_fleet_from_a_manifest(tmp_path: Path) -> None:
    _copy_history(LOGS / "seed_compressed.verl.jsonl", tmp_path / "a/m.jsonl")
    _copy_history(LOGS / "seed_dense.verl.jsonl", tmp_path / "b/m.jsonl")
    (tmp_path / "fleet.yaml").write_text(
        "a/m.jsonl: {seed: 3, codec: topk, correction: tis, job: j1}\n"
        "b/m.jsonl: {seed: 3, control: true}\n"
        "c/never.jsonl: {seed: 4}\n"  # not there (yet): not a run
    )
    lines: list[str] = []
    opts = FleetOptions(
        manifest=tmp_path / "fleet.yaml", ruleset=ruleset_for(None, None), idle=0.5,
        poll=0.05, rescan=0.2, on_stop="echo cancel {job} {{literal}}", say=lines.append,
    )  # fmt: skip
    db = f"sqlite:///{tmp_path}/m.db"
    assert watch_fleet(opts, db) == 3, "\n".join(lines)
    st = open_store(db)
    got = {r.trial_id: r for r in st.runs()}
    assert set(got) == {"a/m.jsonl", "b/m.jsonl"}
    a, b = got["a/m.jsonl"], got["b/m.jsonl"]
    assert (a.role, a.status, a.compression, a.correction) == (
        "treatment",
        "stopped",
        "topk",
        "tis",
    )
    assert (b.role, b.status, a.pair_key, b.pair_key) == (
        "control",
        "completed",
        "fleet/s3",
        "fleet/s3",
    )
    (act,) = [d for d in st.decisions(run_id=a.id) if d.rule.startswith(ACTION_RULE)]
    assert act.evidence["output"] == "cancel j1 {literal}"
    assert any("b/m.jsonl: 'echo cancel {job} {{literal}}' names job" in x for x in lines)


# --- real trainers: the built-in worker (verl's file logger) and the TRL example ---------

TRAINERS_LOOP = r"""
# the built-in worker, per seed a dense control and three compressed treatments
for seed in 0 1; do
  for arm in none-none topk-none topk-tis topk-icepop; do
    d=runs/gapwatch/$arm-s$seed; mkdir -p $d
    case $arm in
      none-none) set -- "$EXAMPLES/run-dense.yaml" --set steps=$CONTROL_STEPS;;
      *) set -- "$EXAMPLES/run-compressed.yaml" --set steps=$TREATMENT_STEPS \
           --set compression_kwargs.keep=$KEEP --set correction=${arm#topk-};;
    esac
    "$GAPWATCH" run "$@" --set seed=$seed --set tasks_per_step=$TASKS --set num_threads=1 \
      --no-store --log $d/metrics.jsonl > $d/train.out 2>&1 &
    echo $! > $d/train.pid
  done
done
# the TRL example (GRPOTrainer, its GapwatchCallback writing the log), per seed a pair
for seed in 2 3; do
  for codec in none topk; do
    d=runs/trl/$codec-none-s$seed; mkdir -p $d
    case $codec in
      none) set -- --steps $TRL_CONTROL_STEPS;;
      *) set -- --steps $TREATMENT_STEPS --codec topk --keep 0.05;;
    esac
    "$PY" "$EXAMPLES/trl_grpo.py" "$@" --seed $seed --out $d/trl --log $d/metrics.jsonl \
      --no-store > $d/train.out 2>&1 &
    echo $! > $d/train.pid
  done
done
wait
"""
TRAINER_SETTINGS = {
    "CONTROL_STEPS": "12",
    "TRL_CONTROL_STEPS": "6",
    "TREATMENT_STEPS": "30",
    "TASKS": "8",
    "KEEP": "0.01",
}
"""Cheap but real: 8 tasks x 4 per step; the built-in treatments keep 1% of each hidden
state (harsher than the quick preset's 5%, so they collapse within a few steps); a
treatment that no rule stopped would run all 30 steps and fail the test."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.long
def test_a_fleet_of_real_trainers_started_by_a_shell_loop(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    env = {**os.environ, **TRAINER_SETTINGS, "PY": sys.executable, "GAPWATCH": str(GAPWATCH),
           "EXAMPLES": str(ROOT / "examples"), "OMP_NUM_THREADS": "1"}  # fmt: skip
    t0 = time.monotonic()
    shell = subprocess.Popen(
        ["sh", "-c", TRAINERS_LOOP], cwd=tmp_path, env=env, start_new_session=True
    )
    db = f"sqlite:///{tmp_path}/fleet.db"
    try:
        res = subprocess.run(
            [str(GAPWATCH), "watch", "--db", db, "--sweep", "trainers",
             "--layout", "runs/{trainer}/{codec}-{correction}-s{seed}/metrics.jsonl",
             "--pid-file", "{dir}/train.pid", "--grace", "10",
             "--on-stop", "echo stop {trainer}/{codec}-{correction}-s{seed}: {rule} at {step}",
             "--idle", "45", "--rescan", "1"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420, check=False,
        )  # fmt: skip
        # --idle 45: with --idle 20, a trainer of the twelve on a loaded two-core machine (make
        # test-long runs the Ray-cluster tests beside this one) went 20 s without a line and
        # was called hung. The fleet ends --idle s after its last run, so no more than that.
        # Hung trainers have tests of their own (test_a_live_trainer_whose_log_goes_silent_...)
        shown = res.stdout + res.stderr
        assert res.returncode == 3, shown
        shell.wait(timeout=30)  # every trainer has ended: nothing left running
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    print(f"fleet of 12 trainers: {time.monotonic() - t0:.0f} s\n{res.stdout}")
    runs = sorted((tmp_path / "runs").glob("*/*-s*"))
    pids = [int((d / "train.pid").read_text()) for d in runs]
    assert len(runs) == 12 and not any(_alive(p) for p in pids)
    st = open_store(db)
    got = {r.trial_id: r for r in st.runs()}
    assert len(got) == 12, shown
    treatment_steps = int(TRAINER_SETTINGS["TREATMENT_STEPS"])
    pairs = {"gapwatch": (0, 1), "trl": (2, 3)}
    for trainer, seeds in pairs.items():
        last = int(
            TRAINER_SETTINGS["CONTROL_STEPS" if trainer == "gapwatch" else "TRL_CONTROL_STEPS"]
        )
        for seed in seeds:
            ctl = got[f"{trainer}/none-none-s{seed}/metrics.jsonl"]
            assert (ctl.role, ctl.status, ctl.last_step) == ("control", "completed", last), shown
            arms = ("none", "tis", "icepop") if trainer == "gapwatch" else ("none",)
            for corr in arms:
                name = f"{trainer}/topk-{corr}-s{seed}/metrics.jsonl"
                run = got[name]
                assert (run.role, run.status, run.pair_key) == ("treatment", "stopped", ctl.pair_key), name + shown  # fmt: skip
                assert run.stop_step is not None and run.stop_step < treatment_steps
                logged = [json.loads(x)["step"] for x in (tmp_path / "runs" / name).read_text().splitlines()]  # fmt: skip
                assert max(logged) < treatment_steps, f"{name} ran to its end: not stopped"
                acts = {d.evidence["kind"]: d for d in st.decisions(run_id=run.id)
                        if d.rule.startswith(ACTION_RULE)}  # fmt: skip
                pid_act, cmd_act = acts["pid_file"], acts["on_stop"]
                assert pid_act.action == "continue" and pid_act.evidence["exit_code"] == 0
                assert "ended by SIGTERM" in pid_act.evidence["output"], pid_act.evidence
                assert (cmd_act.action, cmd_act.evidence["exit_code"]) == ("continue", 0)
                assert cmd_act.evidence["output"] == (
                    f"stop {trainer}/topk-{corr}-s{seed}: {run.stop_rule} at {run.stop_step}"
                )
    assert "fleet done: 12 runs (4 completed, 8 stopped)" in res.stdout
