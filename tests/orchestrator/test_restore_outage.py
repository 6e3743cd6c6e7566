"""A trial taken up from its checkpoint while the store is down: its rules wait for it.

A treatment's score falls at step ``FALLS_AT`` (below its control's by more than the
margin); ``score_collapse`` must see the fall last ``K`` steps. After step ``LOST_AFTER``
(two falling steps stored) its process is lost and Tune takes it up from its checkpoint
after that step, while a private PostgreSQL server is stopped. Fed as Tune's driver feeds
them (Monitor first, then the Recorder, as ``test_recorder_outage``), the attempt's steps
during the outage are held, not judged (no decision from rules that know nothing of the
steps before); once the server is back and the backlog written, the rules are rebuilt
from the stored steps and judge the held ones, so the stop comes at the step it would
have come at without the outage or the restart (its restore grace past), not ``K`` steps
after the restart as rules started from nothing would have it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gapwatch.correction import names
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.sweep.config import parse_sweep_config
from gapwatch.orchestrator.sweep.monitor import Monitor
from gapwatch.orchestrator.sweep.placement import PLACEMENT_KEY
from gapwatch.orchestrator.sweep.recorder import Recorder
from gapwatch.orchestrator.sweep.trainable import METRICS_KEY, STEP_KEY, TRIAL_KEY
from gapwatch.store import open_store

from .pg_server import PrivatePostgres

CFG = {
    "name": "restore-outage", "env": "mul", "seeds": [0], "steps": 20,
    "compression": [{"codec": "quant", "bits": 2}], "correction": ["none"],
}  # fmt: skip
K = 5
RULES: dict[str, Any] = {n: {"enabled": False} for n in rules.names() if n != "score_collapse"}
RULES["score_collapse"] = {"k": K, "grace": 1, "drop": None, "control_margin": 1.2}
FALLS_AT = 8
LOST_AFTER = 9
"""The step of the checkpoint the lost trial is taken up from."""
GRACE = 2
"""The Monitor's restore grace (its default): decisions about the steps just after a
restore are judged, acted on after."""
STOP_AT = LOST_AFTER + GRACE + 1
"""Where the stop comes with the rules' whole state: the first step past the grace (the
fall has then lasted FALLS_AT..STOP_AT, K steps)."""


class _Trial:
    """What the Recorder reads of a Tune trial; ``after``: its checkpoint's step."""

    def __init__(self, key: str, after: int | None = None) -> None:
        self.config = {"spec": {"trial_key": key}}
        self.latest_checkpoint_result = (
            None if after is None else type("R", (), {"metrics": {STEP_KEY: after}})()
        )


def _result(key: str, step: int, score: float) -> dict[str, Any]:
    figs = {names.SCORE_MEAN: score, names.SCORE_STD: 0.25}
    return {TRIAL_KEY: key, STEP_KEY: step, METRICS_KEY: figs}


def test_a_trial_restored_while_postgres_is_down_gets_its_rules_state_once_it_is_back(
    private_pg: PrivatePostgres, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert STOP_AT - FALLS_AT + 1 == K  # the whole fall, steps before the restart included
    url = private_pg.url
    specs = [s.to_dict() for s in parse_sweep_config(CFG).trials]
    control, treat = (s["trial_key"] for s in specs)
    sweep_id = open_store(url).ensure_sweep("restore-outage", "")
    lines: list[str] = []
    rec = Recorder(url, sweep_id, specs, say=lines.append, spill_dir=tmp_path,
                   backoff_s=0.1, flush_seconds=0.1)  # fmt: skip
    for s in specs:
        rec.run_id(s["trial_key"])  # as the sweep does before Tune starts
    mon = Monitor(rules.build(RULES), specs, rec, restore_grace=GRACE)

    def step(n: int) -> bool:
        """Both trials report step ``n``; whether the treatment is to stop."""
        stop = False
        for key in (control, treat):
            res = _result(key, n, 0.0 if key == treat and n >= FALLS_AT else 0.6)
            stop = mon(key, res)
            rec.on_trial_result(0, [], _Trial(key), res)
        rec.on_step_end(0, [])
        return stop

    for s in specs:
        rec.on_trial_start(0, [], _Trial(s["trial_key"]))
    assert not any(step(n) for n in range(1, LOST_AFTER + 1))
    assert rec.writer.sync(30)  # steps 1..LOST_AFTER stored

    private_pg.stop()
    # the treatment's process is lost; Tune takes it up from its checkpoint
    assert mon(treat, {TRIAL_KEY: treat, PLACEMENT_KEY: {"node_id": "n1", "pid": 1}}) is False
    rec.on_trial_start(0, [], _Trial(treat, after=LOST_AFTER))
    deadline = time.monotonic() + 30
    while rec.writer.reachable():  # the writer has tried the restart and found no store
        assert time.monotonic() < deadline, "the writer never noticed the store gone"
        time.sleep(0.05)
    # the steps reported during the outage are held (within the grace anyway), not judged
    for n in range(LOST_AFTER + 1, STOP_AT):
        assert step(n) is False
    f = mon.followed[treat]
    held = [r["step"] for r in f.held]
    assert f.rebuild_from == LOST_AFTER + 1 and held == list(range(LOST_AFTER + 1, STOP_AT))
    assert f.watcher.last_step is None  # nothing judged yet
    said = capsys.readouterr().out
    assert f"{treat}: taken up at step {LOST_AFTER + 1} while the store cannot be reached" in said

    private_pg.start()
    assert rec.writer.sync(60)  # the backlog written: the store answers again
    assert rec.writer.reachable()
    # the next step rebuilds the rules from the stored steps, judges the held ones, then it
    assert step(STOP_AT) is True
    first = mon.first_stop(treat)
    assert first is not None and (first.rule, first.step) == ("score_collapse", STOP_AT)
    said = capsys.readouterr().out
    assert f"{treat}: the store is back; its rules rebuilt from the stored steps, then " in said
    assert f"judged its {STOP_AT - LOST_AFTER - 1} held steps" in said
    rec.on_trial_complete(0, [], _Trial(treat))
    rec.on_trial_complete(0, [], _Trial(control))
    rec.on_experiment_end([])
    st = open_store(url)
    runs = {r.trial_id: r for r in st.runs(sweep_id=sweep_id)}
    t = runs[treat]
    assert (t.status, t.stop_rule, t.stop_step, t.attempts) == (
        "stopped",
        "score_collapse",
        STOP_AT,
        2,
    )
    assert [h["step"] for h in st.history(t.id)] == list(range(1, STOP_AT + 1))
    assert lines[0].startswith("store unreachable: ") and lines[-1].startswith("store back after ")
