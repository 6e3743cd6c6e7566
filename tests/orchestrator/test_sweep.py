"""A real local Ray Tune sweep of the tiny model into a temporary SQLite store.

One seed: the dense control, a 2-bit treatment without correction and one with tis. The
stop is forced with a rule threshold that trips on the real run's figures: only
``ess_collapse`` is on, with floor 0.95 from step 2 and no baseline condition (the
treatments' measured post-tool ESS is 0.2-0.8, the bf16 dense control's 0.999+). The
tis treatment is made to crash after step 1 (by a wrapper trainable that lives here, not
in the package) and must be recorded failed while the rest finish.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gapwatch.orchestrator.sweep.config import parse_sweep_config
from gapwatch.orchestrator.sweep.driver import execute_sweep
from gapwatch.orchestrator.sweep.trainable import Step, report_steps
from gapwatch.store import open_store

CRASHING = "s0-quant_bits2-tis_C2"


def _crash_after(steps: Iterator[Step], at: int, key: str) -> Iterator[Step]:
    for res in steps:
        yield res
        if res.step == at:
            raise RuntimeError(f"injected fault in trial {key} after step {at}")


def faulty_trainable(config: dict[str, Any]) -> None:
    """The built-in trainable, with trial ``CRASHING`` raising after its first step."""
    from gapwatch.workers import RunConfig, train

    spec = config["spec"]
    steps = train(RunConfig.from_dict(dict(spec["run"])))
    if spec["trial_key"] == CRASHING:
        steps = _crash_after(steps, 1, CRASHING)
    report_steps(spec["trial_key"], steps)


OFF = {"enabled": False}
CFG = {
    "name": "ci",
    "env": "mul",
    "seeds": [0],
    "steps": 4,
    "tasks_per_step": 4,
    "group_size": 4,
    "compression": [{"codec": "quant", "bits": 2}],
    "correction": ["none", "tis"],
    "rules": {
        "constant_advantage": OFF,
        "gap_vs_control": OFF,
        "length_runaway": OFF,
        "post_tool_tail_growth": OFF,
        "score_collapse": OFF,
        "ess_collapse": {"floor": 0.95, "k": 1, "grace": 1, "baseline_steps": None},
    },
}


@pytest.mark.slow
def test_real_sweep_records_pairs_stops_treatment_and_survives_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray.cloudpickle

    # Ray workers get this test's trainable by value (this module is not importable there)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    url = f"sqlite:///{tmp_path}/sweep.db"
    out = execute_sweep(
        parse_sweep_config(CFG),
        db_url=url,
        address=None,
        resume=False,
        storage=tmp_path / "ray",
        train_fn=faulty_trainable,
    )
    assert out.status == "completed"

    st = open_store(url)
    runs = {r.trial_id: r for r in st.runs(sweep_id=out.sweep_id)}
    assert set(runs) == {"s0-control", "s0-quant_bits2-none", CRASHING}
    ctrl, treat, crashed = runs["s0-control"], runs["s0-quant_bits2-none"], runs[CRASHING]
    # Pairing is recorded
    assert ctrl.role == "control" and treat.role == "treatment"
    assert ctrl.pair_key == treat.pair_key == crashed.pair_key
    assert treat.compression == "quant(bits=2)" and treat.correction == "none"

    # The control runs to its last step, every step stored once, no stop decision
    assert ctrl.status == "completed" and ctrl.stop_rule is None
    assert [h["step"] for h in st.history(ctrl.id)] == [1, 2, 3, 4]
    assert not [d for d in st.decisions(run_id=ctrl.id) if d.action == "stop"]

    # The collapsing treatment is stopped at step 2 with its evidence stored
    assert treat.status == "stopped"
    assert (treat.stop_rule, treat.stop_step) == ("ess_collapse", 2)
    stops = [d for d in st.decisions(run_id=treat.id) if d.action == "stop"]
    assert [(d.step, d.rule) for d in stops] == [(2, "ess_collapse")]
    assert stops[0].evidence, "a stop carries the numbers that crossed"
    assert [h["step"] for h in st.history(treat.id)] == [1, 2]

    # The crashed trial is failed with its one-line error; the others went on
    assert crashed.status == "failed"
    assert crashed.error is not None and "injected fault" in crashed.error
    assert "\n" not in crashed.error
    assert [h["step"] for h in st.history(crashed.id)] == [1]

    # Distributions came through whole (the JSON key is not flattened by Tune)
    dist_names = [n for n in ("dist/abs_log_ratio/text", "dist/abs_log_ratio/post_tool")]
    assert any(st.distribution_steps(treat.id, n) for n in dist_names)

    assert out.trial_steps_used == 4 + 2 + 1
    assert out.trial_steps_budget == 3 * 4

    # Off a terminal the progress is plain lines as trials start and end, not one table
    # at the end (captured stdout is not a terminal, like CI's log or ``| tee``)
    shown = capsys.readouterr().out
    assert "start s0-control (control, none, none)" in shown
    assert "end   s0-control: completed at step 4/4" in shown
    assert "end   s0-quant_bits2-none: stopped: ess_collapse @ 2 at step 2/4" in shown
    assert f"end   {CRASHING}: failed: " in shown and "injected fault" in shown
