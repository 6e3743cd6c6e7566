"""GapwatchCallback inside a real ``trl.GRPOTrainer`` on CPU (the tiny built-in model, the
example's tool-use prompts): every logged step lands in the store with both names, and a
rule set to trip at a known step ends training at that step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gapwatch.correction import names as N
from gapwatch.store import open_store

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


# --- a signal that ends the trainer's process: the run is not left 'running' -------------


def _begin(tmp_path: Path):  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    from gapwatch.integrations.trl import GapwatchCallback

    cb = GapwatchCallback(name="sig", db=f"sqlite:///{tmp_path}/s.db", rules={})
    args = SimpleNamespace(seed=0, output_dir=str(tmp_path))
    control = SimpleNamespace(should_training_stop=False)
    cb.on_train_begin(args, None, control)
    for step in (1, 2):
        cb.on_log(args, SimpleNamespace(global_step=step), control, logs={"reward": 0.5})
    return cb, args, control


def test_sigint_stops_the_run_then_python_raises_keyboardinterrupt(tmp_path: Path) -> None:
    import os
    import signal

    from gapwatch.orchestrator.signals import INTERRUPTED

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    cb, _, _ = _begin(tmp_path)
    assert cb.run is not None
    with pytest.raises(KeyboardInterrupt):  # the handler before (Python's) still runs
        os.kill(os.getpid(), signal.SIGINT)
    run = open_store(f"sqlite:///{tmp_path}/s.db").run(cb.run.run_id)
    assert (run.status, run.stop_rule, run.stop_step) == ("stopped", INTERRUPTED, 2)
    assert run.error == "interrupted (Ctrl-C, SIGINT) after step 2"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def test_sigterm_during_a_store_write_is_recorded_after_it_then_chained(
    tmp_path: Path,
) -> None:
    """A trainer's own SIGTERM handler still runs after the run is marked; a SIGTERM that
    comes while the callback writes a step waits for the write (no lock held twice)."""
    import os
    import signal
    from types import SimpleNamespace

    seen: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        cb, args, control = _begin(tmp_path)
        assert cb.run is not None
        st = cb.run.store
        write = st.write_batch

        def write_then_signal(*a, **kw):  # type: ignore[no-untyped-def]
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the step is being written
            assert not seen, "the signal was relayed inside the write"
            return write(*a, **kw)

        st.write_batch = write_then_signal  # type: ignore[method-assign]
        cb.on_log(args, SimpleNamespace(global_step=3), control, logs={"reward": 0.5})
        assert seen == [signal.SIGTERM]  # relayed once the write was done
        run = open_store(f"sqlite:///{tmp_path}/s.db").run(cb.run.run_id)
        assert (run.status, run.error, run.last_step) == ("failed", "ended by SIGTERM", 3)
        cb.on_train_end(args, None, control)  # the trainer winds down: the mark stays
        assert open_store(f"sqlite:///{tmp_path}/s.db").run(cb.run.run_id).status == "failed"
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.slow
def test_a_grpo_run_sent_sigterm_is_failed_not_left_running(tmp_path: Path) -> None:
    """A real GRPOTrainer: SIGTERM (default disposition) marks the run, then ends the
    process as SIGTERM does."""
    import signal
    import time

    db = f"sqlite:///{tmp_path}/t.db"
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--out", str(tmp_path / "out"), "--steps", "400",
         "--db", db, "--name", "grpo"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the run has stored a step
            time.sleep(0.3)
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            runs = open_store(db).runs() if (tmp_path / "t.db").exists() else []
            if runs and runs[0].last_step:
                break
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM, err[-2000:]
    (run,) = open_store(db).runs()
    assert (run.status, run.error) == ("failed", "ended by SIGTERM"), run
    assert run.last_step is not None and run.last_step < 400
    assert f"gapwatch: run {run.id} failed: ended by SIGTERM" in err
