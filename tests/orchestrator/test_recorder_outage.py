"""The Recorder through store outages, on real databases: a private PostgreSQL server
stopped and started again, and a SQLite file held by another process's exclusive
transaction. Trials' results keep coming (fed as Tune's driver feeds them), the Monitor
keeps deciding, nothing waits on the store; afterwards every step is stored exactly once,
each written once, and the Recorder said one line when the store went and one when it
was back (and where it spilled, past its bound)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from gapwatch.correction import names
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.sweep.config import parse_sweep_config
from gapwatch.orchestrator.sweep.monitor import Monitor
from gapwatch.orchestrator.sweep.recorder import Recorder
from gapwatch.orchestrator.sweep.trainable import DISTS_KEY, METRICS_KEY, STEP_KEY, TRIAL_KEY
from gapwatch.orchestrator.sweep.writer import ThreadWriter
from gapwatch.store import open_store

from .pg_server import PrivatePostgres

CFG = {
    "name": "outage",
    "env": "mul",
    "seeds": [0],
    "steps": 40,
    "compression": [{"codec": "quant", "bits": 2}],
    "correction": ["none", "tis"],
}
RULES = {
    n: {"enabled": False}
    for n in ("constant_advantage", "ess_collapse", "gap_vs_control", "length_runaway",
              "post_tool_tail_growth")
} | {"score_collapse": {"k": 1, "grace": 1, "control_margin": 1.2}}  # fmt: skip
COLLAPSE_AT = 25
"""The first treatment's score falls here: inside the outage, so its stop is decided
while nothing can be written."""
NAN = "test/not_finite"
FIGS = {names.SCORE_STD: 0.25, NAN: float("nan")}
"""Every step's figures besides the score (a NaN among them, read by no rule: it must come
back as one)."""


def _specs() -> list[dict[str, Any]]:
    return [s.to_dict() for s in parse_sweep_config(CFG).trials]


class _Trial:
    """What the Recorder reads of a Tune trial (the real Tune path: test_sweep.py)."""

    def __init__(self, key: str) -> None:
        self.config = {"spec": {"trial_key": key}}
        self.latest_checkpoint_result = None


def _result(key: str, step: int, score: float) -> dict[str, Any]:
    dist = {"scheme": "log", "keys": [1, 2], "counts": [step, 1], "upper": [0.1, 0.2]}
    return {
        TRIAL_KEY: key, STEP_KEY: step, METRICS_KEY: {names.SCORE_MEAN: score, **FIGS},
        DISTS_KEY: f'{{"dist/abs_log_ratio/post_tool": {str(dist).replace(chr(39), chr(34))}}}',
    }  # fmt: skip


def _drive(
    rec: Recorder, *, steps: int, every_s: float, outage: tuple[int, int],
    go: Callable[[], None], back: Callable[[], None],
) -> tuple[Monitor, float]:  # fmt: skip
    """Feed every trial ``steps`` results, ``every_s`` apart, as Tune's driver does
    (Monitor first, then the Recorder); ``go()`` before step ``outage[0]``, ``back()``
    before step ``outage[1]``. Returns the Monitor and the longest Recorder call (s)."""
    specs = _specs()
    keys = [s["trial_key"] for s in specs]
    mon = Monitor(rules.build(RULES), specs, rec)
    for k in keys:
        rec.on_trial_start(0, [], _Trial(k))
    live, slowest = set(keys), 0.0
    for step in range(1, steps + 1):
        if step == outage[0]:
            go()
        if step == outage[1]:
            back()
        for k in sorted(live):
            score = 0.6 if k != keys[1] or step < COLLAPSE_AT else 0.0
            res = _result(k, step, score)
            stop = mon(k, res)
            t0 = time.perf_counter()
            rec.on_trial_result(0, [], _Trial(k), res)
            slowest = max(slowest, time.perf_counter() - t0)
            if stop or step == steps:
                live.discard(k)
                rec.on_trial_complete(0, [], _Trial(k))
        rec.on_step_end(0, [])
        time.sleep(every_s)
    rec.on_experiment_end([])
    return mon, slowest


def _check_store(url: str, sweep_id: int, sent: dict[str, int]) -> None:
    """Every trial's steps 1..last once, with every figure, its stop and its status."""
    st = open_store(url)
    try:
        runs = {r.trial_id: r for r in st.runs(sweep_id=sweep_id)}
        with st.engine.connect() as c:
            q = text("SELECT run_id, count(*), count(DISTINCT step), min(step), max(step) "
                     "FROM metrics GROUP BY run_id")  # fmt: skip
            per_step = {r[0]: tuple(r[1:]) for r in c.execute(q)}
            dists = dict(
                c.execute(text("SELECT run_id, count(*) FROM distributions GROUP BY run_id")).all()
            )
        for key, last in sent.items():
            rid = runs[key].id
            rows, distinct, lo, hi = per_step[rid]
            assert (distinct, lo, hi) == (last, 1, last), (key, per_step[rid])
            assert rows == last * (1 + len(FIGS)), key  # every figure of every step, once
            assert dists[rid] == last, key
        nan = st.history(runs[next(iter(sent))].id, until=1)[0][NAN]
        assert nan != nan  # the NaN came back as NaN
        stopped = [k for k, r in runs.items() if r.status == "stopped"]
        assert len(stopped) == 1 and runs[stopped[0]].stop_step == COLLAPSE_AT
        (d,) = [d for d in st.decisions(run_id=runs[stopped[0]].id) if d.action == "stop"]
        assert (d.rule, d.step) == ("score_collapse", COLLAPSE_AT)
        assert {r.status for k, r in runs.items() if k != stopped[0]} == {"completed"}
    finally:
        st.close()


def _sent(mon: Monitor) -> dict[str, int]:
    return {k: f.watcher.last_step or 0 for k, f in mon.followed.items()}


def test_postgres_stopped_and_started_loses_nothing(
    private_pg: PrivatePostgres, tmp_path: Path
) -> None:
    url = private_pg.url
    sweep_id = open_store(url).ensure_sweep("outage", "")
    lines: list[str] = []
    rec = Recorder(url, sweep_id, _specs(), say=lines.append, spill_dir=tmp_path, bound=40,
                   backoff_s=0.1, flush_seconds=0.1)  # fmt: skip
    for s in _specs():
        rec.run_id(s["trial_key"])  # as the sweep does before Tune starts
    writer = rec.writer
    assert isinstance(writer, ThreadWriter)
    mon, slowest = _drive(rec, steps=40, every_s=0.1, outage=(10, 35),
                          go=private_pg.stop, back=private_pg.start)  # fmt: skip
    sent = _sent(mon)
    total = sum(sent.values())
    # each result committed exactly once: retried batches were never written before
    assert writer.counts.results == total
    assert slowest < 1.0, f"a result waited {slowest:.2f} s on the Recorder"
    _check_store(url, sweep_id, sent)
    assert len(lines) == 3, lines
    # the server's own words: a new connection is refused, or a pooled one is cut by the
    # shutdown (which of the two depends on when the writer's next attempt falls)
    said = ("Connection refused", "terminating connection due to administrator command")
    assert lines[0].startswith("store unreachable: ") and any(w in lines[0] for w in said), lines
    assert lines[0].endswith("; buffering results, retrying")
    assert lines[1].startswith("store still unreachable: 40 writes held in memory")
    assert str(tmp_path) in lines[1]
    late = writer.counts.late
    assert lines[2].startswith("store back after ") and f": {late} results written late" in lines[2]
    assert writer.counts.spilled > 0 and f"{writer.counts.spilled} of them through" in lines[2]
    assert not list(tmp_path.glob("*.jsonl"))  # replayed, then removed


HOLD = r"""
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
c.execute("ROLLBACK")
"""


def test_sqlite_locked_by_another_process_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    sweep_id = open_store(url).ensure_sweep("outage", "")
    lines: list[str] = []
    rec = Recorder(url, sweep_id, _specs(), say=lines.append, spill_dir=tmp_path,
                   lock_wait_s=0.1, backoff_s=0.1, flush_seconds=0.1)  # fmt: skip
    for s in _specs():
        rec.run_id(s["trial_key"])
    holder: list[subprocess.Popen[str]] = []

    def lock() -> None:
        p = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert p.stdout is not None and p.stdout.readline().strip() == "locked"
        holder.append(p)

    def unlock() -> None:
        p = holder.pop()
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=30)

    writer = rec.writer
    assert isinstance(writer, ThreadWriter)
    mon, slowest = _drive(rec, steps=40, every_s=0.1, outage=(10, 35), go=lock, back=unlock)
    sent = _sent(mon)
    assert writer.counts.results == sum(sent.values())
    assert slowest < 1.0, f"a result waited {slowest:.2f} s on the Recorder"
    _check_store(url, sweep_id, sent)
    assert len(lines) == 2, lines
    assert lines[0] == "store unreachable: database is locked; buffering results, retrying"
    assert lines[1].startswith("store back after ")
    assert lines[1].endswith(f": {writer.counts.late} results written late")
    assert writer.counts.late > 0


def test_a_spill_left_at_the_end_is_written_by_the_next_driver(
    private_pg: PrivatePostgres, tmp_path: Path
) -> None:
    """The store is still down when the sweep ends: what is unwritten stays in the spill
    file (said in one line); the next Recorder of that sweep writes it first."""
    url = private_pg.url
    sweep_id = open_store(url).ensure_sweep("outage", "")
    lines: list[str] = []
    kw: dict[str, Any] = {"spill_dir": tmp_path, "backoff_s": 0.1, "flush_seconds": 0.1}
    rec = Recorder(url, sweep_id, _specs(), say=lines.append, end_wait_s=1.0, **kw)
    for s in _specs():
        rec.run_id(s["trial_key"])
    mon, _ = _drive(rec, steps=40, every_s=0.0, outage=(30, 41),
                    go=private_pg.stop, back=lambda: None)  # fmt: skip
    assert lines[0].startswith("store unreachable: ")
    assert lines[-1].startswith("store still unreachable at the end: ")
    assert str(rec.spill_path) in lines[-1] and rec.spill_path.is_file()
    said = len(lines)
    t0 = time.monotonic()
    rec.flush()  # as the sweep does after Tune ends: the spill waits for a --resume
    assert time.monotonic() - t0 < 0.5 and len(lines) == said
    private_pg.start()
    again: list[str] = []
    rec2 = Recorder(url, sweep_id, _specs(), say=again.append, **kw)
    rec2.flush()
    assert again[0].startswith("store: ") and "are written first" in again[0]
    _check_store(url, sweep_id, _sent(mon))
    assert not rec.spill_path.exists()


SWEEP_STEPS = 24


def steady(config: dict[str, Any]) -> None:
    """A trial without a model: the same healthy figures every 0.25 s (the store, not the
    training, is what this test is about)."""
    import time as _t

    from gapwatch.orchestrator.sweep.trainable import report_steps

    class _Res:
        def __init__(self, step: int) -> None:
            self.step = step
            self.metrics = {names.SCORE_MEAN: 0.5, names.SCORE_STD: 0.25, NAN: float("nan")}
            self.distributions: dict[str, Any] = {}

    def steps() -> Iterator[_Res]:
        for s in range(1, SWEEP_STEPS + 1):
            _t.sleep(0.25)
            yield _Res(s)

    report_steps(config["spec"]["trial_key"], steps())


@pytest.mark.slow
def test_a_real_sweep_rides_out_a_postgres_restart(
    private_pg: PrivatePostgres, tmp_path: Path, capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A Ray Tune sweep whose PostgreSQL store is stopped for 3 s while its trials report:
    they keep training, and the store ends with every step once."""
    import threading

    import ray.cloudpickle

    from gapwatch.orchestrator.sweep.driver import execute_sweep

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.chdir(tmp_path)  # the spill folder, should one be needed, lands here
    url = private_pg.url
    cfg = dict(CFG, steps=SWEEP_STEPS, rules={n: {"enabled": False} for n in rules.names()})
    sweep = parse_sweep_config(cfg)
    done = threading.Event()

    def outage() -> None:
        """Once steps are being stored, stop the server for 3 s."""
        st = open_store(url)
        while not done.is_set():
            if any((r.last_step or 0) >= 4 for r in st.runs()):
                break
            time.sleep(0.2)
        st.close()
        if not done.is_set():
            private_pg.stop()
            time.sleep(3)
            private_pg.start()

    t = threading.Thread(target=outage, daemon=True)
    t.start()
    try:
        out = execute_sweep(sweep, db_url=url, address=None, resume=False, live=False,
                            storage=tmp_path / "ray", train_fn=steady)  # fmt: skip
    finally:
        done.set()
        t.join(timeout=30)
    shown = capfd.readouterr().out
    assert out.status == "completed"
    lines = [ln for ln in shown.splitlines() if ln.startswith("store ")]
    assert len(lines) == 2, shown[-3000:]
    assert lines[0].startswith("store unreachable: ") and lines[0].endswith("retrying")
    assert lines[1].startswith("store back after ") and "results written late" in lines[1]
    st = open_store(url)
    for r in st.runs(sweep_id=out.sweep_id):
        assert r.status == "completed", r
        with st.engine.connect() as c:
            q = text("SELECT step, count(*) FROM metrics WHERE run_id = :r GROUP BY step")
            per = dict(c.execute(q, {"r": r.id}).all())
        assert sorted(per) == list(range(1, SWEEP_STEPS + 1)), (r.trial_id, sorted(per))
        assert set(per.values()) == {3}, r.trial_id  # each figure once


def test_a_status_line_longer_than_the_console_stays_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """PostgreSQL's 'the database system is shutting down' made the outage line run past
    the console's 160 columns, and it was wrapped in two (found by the restart test)."""
    from gapwatch.orchestrator.sweep.recorder import _say

    why = 'connection failed: connection to server at "127.0.0.1", port 5 failed: ' + "x" * 200
    _say(f"store unreachable: {why}; buffering results, retrying")
    (line,) = capsys.readouterr().out.splitlines()
    assert line.endswith("; buffering results, retrying")
