"""GapwatchCallback inside a real ``trl.GRPOTrainer`` on CPU (the tiny built-in model, the
example's tool-use prompts): every logged step lands in the store with both names, and a
rule set to trip at a known step ends training at that step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from correction import names as N
from store import open_store

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trl_grpo.py"

pytest.importorskip("trl")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "--out", str(tmp_path / "out"), *args],
        capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.slow
def test_a_rule_set_to_trip_at_step_2_ends_grpo_training_at_step_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/t.db"
    # a floor no reward reaches: score_collapse crosses at every step; k=2 stops at step 2
    rules = "{score_collapse: {floor: 2.0, k: 2, grace: 0}}"
    res = _run(tmp_path, "--steps", "6", "--db", db, "--rules", rules, "--name", "grpo")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "trained 2 steps (stopped by score_collapse at step 2)" in res.stdout, res.stdout
    st = open_store(db)
    (run,) = st.runs()
    assert (run.trial_id, run.status, run.stop_rule, run.stop_step) == (
        "grpo", "stopped", "score_collapse", 2,
    )  # fmt: skip
    hist = st.history(run.id)
    assert [h["step"] for h in hist] == [1, 2]  # every logged step, the trainer's own steps
    for h in hist:  # TRL's names kept, gapwatch's added beside them
        assert h["reward"] == h[N.SCORE_MEAN]
        assert h["frac_reward_zero_std"] == h[N.ZERO_ADV_FRAC]
        assert h["completions/clipped_ratio"] == h[N.CLIP_RATIO]
    stops = [d for d in st.decisions(run_id=run.id) if d.action == "stop"]
    assert [(d.rule, d.step) for d in stops] == [("score_collapse", 2)]
    assert stops[0].evidence["floor"] == 2.0


@pytest.mark.slow
def test_log_only_mode_writes_the_jsonl_a_sweep_follows(tmp_path: Path) -> None:
    log = tmp_path / "m.jsonl"
    res = _run(tmp_path, "--steps", "2", "--log", str(log), "--no-store")
    assert res.returncode == 0, res.stderr[-2000:]
    lines = log.read_text().splitlines()
    assert len(lines) >= 2 and '"step": 1' in lines[0] and '"reward"' in lines[0]
    assert not (tmp_path / "gapwatch.db").exists()


def test_the_callback_refuses_what_records_nothing() -> None:
    from gapwatch.integrations.trl import GapwatchCallback

    with pytest.raises(ValueError, match="give log_path"):
        GapwatchCallback(store=False)
    with pytest.raises(ValueError, match="role 'judge'"):
        GapwatchCallback(role="judge")
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        GapwatchCallback(rules={"nope": {}})
