"""Monitor and Recorder on the driver, without a Ray cluster: pickling, control history,
decisions, and how a run's end is read back from the store."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gapwatch.correction import names
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.sweep.config import parse_sweep_config
from gapwatch.orchestrator.sweep.monitor import Monitor
from gapwatch.orchestrator.sweep.progress import ProgressTable, TrialLine
from gapwatch.orchestrator.sweep.recorder import Recorder
from gapwatch.orchestrator.sweep.trainable import METRICS_KEY, STEP_KEY, TRIAL_KEY
from gapwatch.store import open_store

CFG = {
    "name": "mon",
    "env": "mul",
    "seeds": [0],
    "steps": 6,
    "compression": [{"codec": "quant", "bits": 2}],
    "correction": ["none"],
}
# Only score_collapse, deciding from step 2 on a single crossing step, so a test history
# of a few steps exercises it
RULES = {
    n: {"enabled": False}
    for n in (
        "constant_advantage",
        "ess_collapse",
        "gap_vs_control",
        "length_runaway",
        "post_tool_tail_growth",
    )
} | {"score_collapse": {"k": 1, "grace": 1, "control_margin": 1.2}}
TREAT = "s0-quant_bits2-none"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL: a SQLite file, or a new schema in the machine's PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/m.db"
        return
    user = request.getfixturevalue("pg_user")  # skips (or fails in CI) without a server
    schema = f"sweep_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(host="127.0.0.1", user=user, dbname="test", autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"postgresql+psycopg://{user}@127.0.0.1:5432/test?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(host="127.0.0.1", user=user, dbname="test", autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _specs() -> list[dict[str, Any]]:
    return [s.to_dict() for s in parse_sweep_config(CFG).trials]


def _result(key: str, step: int, score: float) -> dict[str, Any]:
    # the batch's reward std: the unit score_collapse measures a gap to the control in
    return {
        TRIAL_KEY: key,
        STEP_KEY: step,
        METRICS_KEY: {names.SCORE_MEAN: score, names.SCORE_STD: 0.25},
    }


def _monitor(rec: Recorder | None, **kw: Any) -> Monitor:
    return Monitor(rules.build(RULES), _specs(), rec, **kw)


class _Trial:
    """What the Recorder reads of a Tune trial: its config's spec (a seam; the real Tune
    path is tests/orchestrator/test_sweep.py)."""

    def __init__(self, key: str) -> None:
        self.config = {"spec": {"trial_key": key}}


def test_monitor_pickle_round_trip(tmp_path: Path) -> None:
    specs = _specs()
    rec = Recorder(f"sqlite:///{tmp_path}/p.db", 1, specs)
    mon = _monitor(rec)
    mon("tid0", _result("s0-control", 1, 0.5))
    table = ProgressTable([TrialLine.of(s) for s in specs], rec, "t", 6)
    back = pickle.loads(pickle.dumps([mon, rec, table]))
    mon2, rec2, table2 = back
    assert mon2.ruleset == mon.ruleset and mon2.followed["s0-control"].watcher.last_step == 1
    # One pickle, one object graph: the Monitor and the table still talk to the Recorder
    assert mon2.recorder is rec2 and table2.recorder is rec2
    # and the copy still works: it decides on new results
    assert mon2("tid0", _result("s0-control", 2, 0.5)) is False
    assert mon2.followed["s0-control"].watcher.last_step == 2


def test_monitor_reads_control_history_from_store(url: str) -> None:
    """The control ran before (another driver): its stored history feeds the margin test,
    and the run's end is read back from the stored stop decision."""
    st = open_store(url)
    sweep_id = st.ensure_sweep("mon", "")
    rec = Recorder(url, sweep_id, _specs())
    ctrl_run = rec.run_id("s0-control")
    assert ctrl_run is not None
    st.write_steps(
        ctrl_run, [(s, {names.SCORE_MEAN: 0.6, names.SCORE_STD: 0.25}, {}) for s in range(1, 7)]
    )

    mon = _monitor(rec)
    assert mon("t1", _result(TREAT, 1, 0.55)) is False  # grace
    assert mon("t1", _result(TREAT, 2, 0.5)) is False  # 0.4 std below the control: fine
    assert mon("t1", _result(TREAT, 3, 0.1)) is True  # 2 std below: stop
    stop = mon.first_stop(TREAT)
    assert stop is not None and (stop.rule, stop.step) == ("score_collapse", 3)
    rec.on_trial_complete(0, [], _Trial(TREAT))
    out = rec.outcome(TREAT)
    assert (out.status, out.stop_rule, out.stop_step) == ("stopped", "score_collapse", 3)
    rec.flush()  # the writer thread writes in the background: wait for it
    treat_run = rec.run_ids[TREAT]
    assert st.run(treat_run).status == "stopped" and st.run(treat_run).stop_step == 3
    ds = st.decisions(run_id=treat_run)
    assert [(d.step, d.rule, d.action) for d in ds] == [(3, "score_collapse", "stop")]
    # The evidence names the control's figure it compared with
    assert ds[0].evidence["control_score"] == 0.6, ds[0].evidence


def test_a_live_control_feeds_its_treatments_and_nothing_is_kept_whole(tmp_path: Path) -> None:
    """Control and treatment report in this driver in lock step (as a sweep runs them)."""
    url = f"sqlite:///{tmp_path}/live.db"
    st = open_store(url)
    rec = Recorder(url, st.ensure_sweep("mon", ""), _specs(), flush_every=1000)
    mon = _monitor(rec)
    stopped_at = None
    for step in range(1, 400):
        assert mon("c", _result("s0-control", step, 0.6)) is False
        if mon("t", _result(TREAT, step, 0.6 if step < 300 else 0.2)):
            stopped_at = step
            break
    assert stopped_at == 300
    # bounded: the treatment's view of the control holds no step it has passed
    view = mon.followed[TREAT].watcher._control
    assert len(view._at) <= 1


def test_monitor_without_stopping_never_stops(tmp_path: Path) -> None:
    mon = _monitor(None, stopping=False)
    for step in range(1, 6):
        assert mon("t", _result(TREAT, step, -1.0)) is False
    assert mon.first_stop(TREAT) is None


def test_restarted_trial_history_starts_over(tmp_path: Path) -> None:
    mon = _monitor(None)
    for step in (1, 2, 3):
        mon("t", _result("s0-control", step, 0.5))
    first = mon.followed["s0-control"].watcher
    mon("t", _result("s0-control", 1, 0.4))
    again = mon.followed["s0-control"].watcher
    assert again is not first and again.last_step == 1


def test_last_result_sent_twice_keeps_history() -> None:
    """Tune re-sends a finished trial's last result; nothing is judged twice."""
    mon = _monitor(None)
    for step in (1, 2, 3):
        mon("t", _result("s0-control", step, 0.5))
    w = mon.followed["s0-control"].watcher
    assert mon("t", _result("s0-control", 3, 0.5)) is False
    assert mon.followed["s0-control"].watcher is w and w.last_step == 3


def test_a_retried_trial_is_judged_from_its_stored_steps(tmp_path: Path) -> None:
    """Tune starts a trial again after its node was lost: the new attempt opens with its
    placement report and goes on after its checkpoint (step 4). Its rules are rebuilt from
    the stored steps 1..4, and the next ``restore_grace`` steps are judged, not acted on
    (a collapse that holds past them is acted on then); a log that merely starts past
    step 1, with nothing stored, is judged at once."""
    from gapwatch.orchestrator.sweep.placement import PLACEMENT_KEY

    url = f"sqlite:///{tmp_path}/retry.db"
    st = open_store(url)
    rec = Recorder(url, st.ensure_sweep("mon", ""), _specs())
    ctrl, treat = rec.run_id("s0-control"), rec.run_id(TREAT)
    assert ctrl is not None and treat is not None
    row = {names.SCORE_MEAN: 0.6, names.SCORE_STD: 0.25}
    st.write_steps(ctrl, [(s, row, {}) for s in range(1, 9)])
    mon = _monitor(rec, restore_grace=2)
    for step in range(1, 5):  # the first attempt, stored as the Recorder stores it
        assert mon("t", _result(TREAT, step, 0.6)) is False
    st.write_steps(treat, [(s, row, {}) for s in range(1, 5)])
    first = mon.followed[TREAT].watcher
    assert mon("t", {TRIAL_KEY: TREAT, PLACEMENT_KEY: {"node_id": "n2", "pid": 1}}) is False
    assert TREAT not in mon.followed  # the earlier attempt is forgotten
    assert mon("t", _result(TREAT, 5, 0.1)) is False  # within the grace after a restart
    again = mon.followed[TREAT]
    assert again.watcher is not first and again.quiet_until == 4 + 2
    assert mon("t", _result(TREAT, 6, 0.1)) is False
    assert mon("t", _result(TREAT, 7, 0.1)) is True
    stop = mon.first_stop(TREAT)
    assert stop is not None and (stop.rule, stop.step) == ("score_collapse", 7)
    rec.flush()
    stored = [(d.step, d.rule, d.action) for d in st.decisions(run_id=treat)]
    assert stored == [(7, "score_collapse", "stop")]
    # nothing stored before its first step: no restart, no grace
    other = Recorder(url, st.ensure_sweep("other", ""), _specs())
    other_ctrl = other.run_id("s0-control")
    assert other_ctrl is not None and other.run_id(TREAT) is not None
    st.write_steps(other_ctrl, [(s, row, {}) for s in range(1, 9)])
    fresh = _monitor(other, restore_grace=2)
    assert fresh("t", _result(TREAT, 5, 0.1)) is True
    assert fresh.followed[TREAT].quiet_until == 0
