"""Monitor and Recorder on the driver, without Ray: pickling, control history, decisions."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from correction import names
from orchestrator.config import parse_sweep_config
from orchestrator.tune_parts import (
    METRICS_KEY,
    STEP_KEY,
    TRIAL_KEY,
    Monitor,
    ProgressTable,
    Recorder,
    SweepState,
)
from store import open_store

CFG = {
    "name": "mon",
    "environment": "mul",
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
} | {"score_collapse": {"k": 1, "grace": 1, "floor": None, "control_margin": 0.3}}


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
    from orchestrator.config import expand

    return [s.to_dict() for s in expand(parse_sweep_config(CFG))]


def _result(key: str, step: int, score: float) -> dict[str, Any]:
    return {TRIAL_KEY: key, STEP_KEY: step, METRICS_KEY: {names.SCORE_MEAN: score}}


def test_monitor_pickle_round_trip(tmp_path: Path) -> None:
    specs = _specs()
    state = SweepState.of(specs)
    rec = Recorder(f"sqlite:///{tmp_path}/p.db", 1, state)
    mon = Monitor(RULES, state, rec)
    mon("tid0", _result("s0-control", 1, 0.5))
    _ = mon.ruleset  # built, holds no unpicklable state either way
    table = ProgressTable(state, "t", 6)
    back = pickle.loads(pickle.dumps([mon, rec, table]))
    mon2, rec2, _table2 = back
    assert mon2.history == mon.history and mon2.rule_settings == RULES
    # The shared state stays shared after the round trip (one pickle, one object graph)
    assert mon2.state is rec2.state and mon2.recorder is rec2
    # and the copy still works: it decides on new results
    assert mon2("tid0", _result("s0-control", 2, 0.5)) is False
    assert [h["step"] for h in mon2.history["s0-control"]] == [1, 2]


def test_monitor_reads_control_history_from_store(url: str) -> None:
    """The control ran before (another driver): its stored history feeds the margin test."""
    st = open_store(url)
    sweep_id = st.ensure_sweep("mon", "")
    specs = _specs()
    state = SweepState.of(specs)
    rec = Recorder(url, sweep_id, state)
    ctrl_run = rec._run_id("s0-control")
    assert ctrl_run is not None
    st.write_steps(ctrl_run, [(s, {names.SCORE_MEAN: 0.6}, {}) for s in range(1, 7)])

    mon = Monitor(RULES, state, rec)
    treat = "s0-quant_bits2-none"
    assert mon("t1", _result(treat, 1, 0.55)) is False  # grace
    assert mon("t1", _result(treat, 2, 0.5)) is False  # 0.1 below the control: fine
    assert mon("t1", _result(treat, 3, 0.1)) is True  # 0.5 below: stop
    assert state.rows[treat].stop_rule == "score_collapse" and state.rows[treat].stop_step == 3
    rec.flush()
    treat_run = rec.run_ids[treat]
    ds = st.decisions(run_id=treat_run)
    assert [(d.step, d.rule, d.action) for d in ds] == [(3, "score_collapse", "stop")]
    # The evidence names the control's figure it compared with
    assert any("control" in k for k in ds[0].evidence), ds[0].evidence


def test_monitor_without_stopping_never_stops(tmp_path: Path) -> None:
    state = SweepState.of(_specs())
    mon = Monitor(RULES, state, None, stopping=False)
    for step in range(1, 6):
        assert mon("t", _result("s0-quant_bits2-none", step, -1.0)) is False
    assert state.rows["s0-quant_bits2-none"].stop_rule is None


def test_restarted_trial_history_starts_over(tmp_path: Path) -> None:
    state = SweepState.of(_specs())
    mon = Monitor(RULES, state, None)
    for step in (1, 2, 3):
        mon("t", _result("s0-control", step, 0.5))
    mon("t", _result("s0-control", 1, 0.4))
    assert [h["step"] for h in mon.history["s0-control"]] == [1]


def test_last_result_sent_twice_keeps_history() -> None:
    """Tune re-sends a finished trial's last result; a control's history must stay whole."""
    state = SweepState.of(_specs())
    mon = Monitor(RULES, state, None)
    for step in (1, 2, 3):
        mon("t", _result("s0-control", step, 0.5))
    assert mon("t", _result("s0-control", 3, 0.5)) is False
    assert [h["step"] for h in mon.history["s0-control"]] == [1, 2, 3]
