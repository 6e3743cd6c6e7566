"""Resume after the driver is SIGKILLed mid-sweep: nothing stored twice, nothing missing,
and a trial with a checkpoint goes on from it as if never stopped.

``gapwatch sweep`` runs as a subprocess; once one trial has finished and another has
saved a checkpoint, the driver process (only it) gets SIGKILL. ``--resume`` must re-run
exactly the unfinished trials and leave every run with steps 1..N once each, while the
trial that finished before the kill is not re-run; the checkpointed trial keeps its steps
up to the checkpoint and its metrics equal those of an uninterrupted run of its config.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gapwatch.correction import names as N
from gapwatch.store import StoreError, open_store

BIN = Path(sys.executable).parent
STEPS = 6
CFG = {
    "checkpoint_every": 2,
    "name": "resumable",
    "env": "mul",
    "seeds": [0],
    "steps": STEPS,
    "tasks_per_step": 2,
    "group_size": 2,
    "compression": [{"codec": "quant", "bits": 2}],
    "correction": ["none", "tis"],
    "stopping": False,
}


def _sweep(cfg: Path, url: str, cwd: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(BIN / "gapwatch"), "sweep", str(cfg), "--db", url, *extra],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "RAY_ADDRESS": ""},
    )


def _kill_group(p: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.long
def test_resume_after_sigkill_has_no_duplicate_or_missing_step(tmp_path: Path) -> None:
    cfg = tmp_path / "resumable.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    url = f"sqlite:///{tmp_path}/resume.db"
    first = _sweep(cfg, url, tmp_path)
    try:
        st = None
        deadline = time.monotonic() + 240
        # Wait until one trial is done and another has stored steps but is not done
        while True:
            assert first.poll() is None, f"sweep ended before the kill: {first.stdout.read()}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no trial finished within 240 s"
            if (tmp_path / "resume.db").exists():
                try:
                    st = st or open_store(url, read_only=True)
                    runs = st.runs()
                except StoreError:  # being created, or migrated, this moment
                    time.sleep(0.3)
                    continue
                done = [r for r in runs if r.status == "completed"]
                partial = [r for r in runs if r.status == "running" and r.checkpoint_step]
                if done and partial:
                    break
            time.sleep(0.3)
        os.kill(first.pid, signal.SIGKILL)  # the driver only, mid-sweep
        first.wait(timeout=30)
    finally:
        time.sleep(1)
        _kill_group(first)  # what the driver left behind (its local Ray)

    st = open_store(url)
    before = {r.trial_id: r for r in st.runs()}
    finished_before = {k for k, r in before.items() if r.status == "completed"}
    assert finished_before and len(finished_before) < 3
    assert before[next(iter(finished_before))].ended is not None
    # Between the last look and the kill another trial may have saved a checkpoint too:
    # every checkpointed trial must go on from its own checkpoint
    taken_up = [r for r in before.values() if r.status == "running" and r.checkpoint_step]
    assert taken_up
    kept = {}
    for r in taken_up:
        at = int(r.checkpoint_step or 0)
        kept[r.trial_id] = [h for h in st.history(r.id) if h["step"] <= at]
        assert [h["step"] for h in kept[r.trial_id]] == list(range(1, at + 1)), r.trial_id

    second = _sweep(cfg, url, tmp_path, "--resume")
    try:
        out, _ = second.communicate(timeout=300)
    finally:
        _kill_group(second)
    assert second.returncode == 0, out[-3000:]

    after = {r.trial_id: r for r in st.runs()}
    assert set(after) == {"s0-control", "s0-quant_bits2-none", "s0-quant_bits2-tis_C2"}
    for key, r in after.items():
        assert r.status == "completed", (key, r.status, r.error)
        hist = st.history(r.id)
        steps = [h["step"] for h in hist]
        assert steps == list(range(1, STEPS + 1)), (key, steps)
        # No step lost its figures (the store keeps one value per (run, name, step) by its
        # primary key; slices such as post_tool are absent on steps without such tokens)
        for h in hist:
            assert {N.SCORE_MEAN, N.PROBS_DIFF_MEAN, N.CLIP_RATIO} <= set(h), (key, h["step"])
    # Finished trials were not re-run: their end time is untouched
    for key in finished_before:
        assert after[key].ended == before[key].ended, key
    # The checkpointed trial went on from its checkpoint: its steps up to it were kept as
    # they were, and every step equals an uninterrupted run of the same config
    from gapwatch.workers import RunConfig
    from gapwatch.workers.loop import GRPORun

    timing = ("perf/step_time_s", "perf/tokens_per_s")
    for r in taken_up:
        hist = st.history(r.id)
        assert hist[: len(kept[r.trial_id])] == kept[r.trial_id], r.trial_id
        stored = dict(after[r.trial_id].config)
        assert stored.pop("placement")["pid"] > 0  # where it ran, beside the run's settings
        whole = list(GRPORun(RunConfig.from_dict(stored)).steps())
        for h, res in zip(hist, whole, strict=True):
            want = {k: v for k, v in res.metrics.items() if k not in timing}
            got = {k: v for k, v in h.items() if k not in (*timing, "step")}
            assert got == pytest.approx(want, rel=1e-6, abs=1e-9), (r.trial_id, h["step"])
    sweep = [s for s in st.sweeps() if s.name == "resumable"][0]
    assert sweep.status == "completed"
