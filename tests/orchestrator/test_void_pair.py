"""A dense control that trips a stop rule voids its pair, aloud: the Monitor warns on the
control and stops each treatment with ``void_pair`` (here, and from the store in a resumed
sweep); the live lines, the summary, the store and the UI's sweep model say so.

The control is made to trip ``non_finite`` (its score NaN from step 2: a wrapper trainable
that lives here, not in the package), the one rule whose trigger does not depend on a
threshold's calibration.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from gapwatch.correction import names
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.sweep.config import parse_sweep_config
from gapwatch.orchestrator.sweep.driver import execute_sweep, print_summary
from gapwatch.orchestrator.sweep.monitor import VOID_RULE, Monitor
from gapwatch.orchestrator.sweep.recorder import Recorder
from gapwatch.orchestrator.sweep.trainable import METRICS_KEY, STEP_KEY, TRIAL_KEY, report_steps
from gapwatch.store import open_store

CFG: dict[str, Any] = {
    "name": "void",
    "env": "mul",
    "seeds": [0],
    "steps": 3,
    "tasks_per_step": 2,
    "group_size": 2,
    "compression": [{"codec": "quant", "bits": 2}],
    "correction": ["none", "tis"],
    # only non_finite: no other rule may stop a treatment before its control's stop
    "rules": {n: {"enabled": False} for n in rules.names() if n != "non_finite"},
    # one trial at a time on any machine, the control first (the sweep's order): its stop
    # is recorded before a treatment starts, so each treatment is voided at its first step.
    # Run side by side, a treatment could report its last step before the driver had read
    # the control's step 2 (CI saw one stopped at step 3 of 3).
    "resources": {"cpus": float(os.cpu_count() or 1)},
    "num_threads": 1,  # torch in the trial on one thread all the same
}
CONTROL = "s0-control"
TREATS = ("s0-quant_bits2-none", "s0-quant_bits2-tis_C2")


def _specs() -> list[dict[str, Any]]:
    return [s.to_dict() for s in parse_sweep_config(CFG).trials]


def _result(key: str, step: int, score: float) -> dict[str, Any]:
    return {TRIAL_KEY: key, STEP_KEY: step, METRICS_KEY: {names.SCORE_MEAN: score}}


def test_a_stopped_control_voids_its_pair_here_and_after_a_resume(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/v.db"
    st = open_store(url)
    sweep_id = st.ensure_sweep("void", "")
    rec = Recorder(url, sweep_id, _specs())
    mon = Monitor(rules.build({}), _specs(), rec)
    assert mon("c", _result(CONTROL, 1, 0.2)) is False
    assert mon("t", _result(TREATS[0], 1, 0.1)) is False  # before the control's stop
    assert mon("c", _result(CONTROL, 2, math.nan)) is True  # non_finite
    assert mon("t", _result(TREATS[0], 2, 0.1)) is True  # void from here on
    assert mon("t", _result(TREATS[0], 2, 0.1)) is True  # Tune's resend: one decision
    rec.flush()
    runs = {r.trial_id: r for r in st.runs(sweep_id=sweep_id)}
    ctrl = [(d.rule, d.action, d.step) for d in st.decisions(run_id=runs[CONTROL].id)]
    assert ctrl == [("non_finite", "stop", 2), (VOID_RULE, "warn", 2)]
    reason = st.decisions(run_id=runs[CONTROL].id)[1].evidence["reason"]
    assert reason == (
        "the dense control of seed 0 stopped at step 2 by non_finite: its treatments have "
        "no healthy reference"
    )
    (treat,) = st.decisions(run_id=runs[TREATS[0]].id)
    assert (treat.rule, treat.action, treat.step) == (VOID_RULE, "stop", 2)
    assert treat.evidence["reason"] == reason and treat.evidence["control_rule"] == "non_finite"

    # another driver (a resumed sweep): the control's stop is read from the store once
    mon2 = Monitor(rules.build({}), _specs(), Recorder(url, sweep_id, _specs()))
    assert mon2("t", _result(TREATS[1], 1, 0.3)) is True
    assert mon2.voided[CONTROL].rule == "non_finite"


def test_a_report_only_sweep_voids_nothing(tmp_path: Path) -> None:
    mon = Monitor(rules.build({}), _specs(), None, stopping=False)
    assert mon("c", _result(CONTROL, 1, math.nan)) is False
    assert mon("t", _result(TREATS[0], 1, 0.1)) is False


def nan_control(config: dict[str, Any]) -> None:
    """The built-in trainable, the control's score NaN from step 2."""
    from gapwatch.workers import RunConfig, train

    spec = config["spec"]

    def steps() -> Any:
        for res in train(RunConfig.from_dict(dict(spec["run"]))):
            if spec["trial_key"] == CONTROL and res.step >= 2:
                res.metrics[names.SCORE_MEAN] = math.nan
            yield res

    report_steps(spec["trial_key"], steps())


@pytest.mark.slow
def test_a_real_sweep_says_the_void_pair_aloud(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    url = f"sqlite:///{tmp_path}/sweep.db"
    sweep = parse_sweep_config(CFG)
    out = execute_sweep(sweep, db_url=url, address=None, resume=False,
                        storage=tmp_path / "ray", train_fn=nan_control)  # fmt: skip
    st = open_store(url)
    runs = {r.trial_id: r for r in st.runs(sweep_id=out.sweep_id)}
    assert (runs[CONTROL].status, runs[CONTROL].stop_rule) == ("stopped", "non_finite")
    for t in TREATS:  # every treatment ends void at its first step, none runs its 3 steps
        assert (runs[t].status, runs[t].stop_rule, runs[t].stop_step) == ("stopped", VOID_RULE, 1), runs[t]  # fmt: skip
    print_summary(sweep, out)
    shown = capsys.readouterr().out
    reason = "the dense control of seed 0 stopped at step 2 by non_finite"
    assert f"void  {reason}: its treatments have no healthy reference" in shown  # live line
    assert f"void: {reason}: its treatments have no healthy reference (2 treatment(s)" in shown
    assert "void (control stopped)" in shown and "pair void" in shown

    # the UI's sweep page: the warning, and the void runs out of the leaderboard
    from gapwatch.ui import sweep_model

    m = sweep_model.model(url, out.sweep_id)
    assert m is not None and m.void == [f"{reason}: its treatments have no healthy reference"]
    assert m.void_runs == 3 and m.ranked.empty
