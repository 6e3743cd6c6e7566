"""``gapwatch runs``: a run left ``running`` by a process killed outright is shown
``stale`` once it has been silent past its allowance, a run whose process lives is not,
and the store keeps what it holds (the listing only shows)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, update

from gapwatch.store import open_store
from gapwatch.store.schema import Run
from gapwatch.store.staleness import this_process
from tests.workers.local_runs import start_run

GAPWATCH = Path(sys.executable).with_name("gapwatch")


def _statuses(db: str) -> tuple[dict[int, str], str]:
    """``gapwatch runs``: each run's shown status by id, and the whole output."""
    env = {**os.environ, "COLUMNS": "300"}
    res = subprocess.run([str(GAPWATCH), "runs", "--db", db], capture_output=True, text=True,
                         timeout=60, env=env, check=False)  # fmt: skip
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    out: dict[int, str] = {}
    for line in res.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 12 and cells[0].isdigit():  # the runs table: status is column 8
            out[int(cells[0])] = cells[7]
    return out, res.stdout


@pytest.mark.slow
def test_a_killed_run_is_shown_stale_once_silent_past_its_allowance(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/t.db"
    proc = start_run(tmp_path, db)
    proc.send_signal(signal.SIGKILL)  # nothing can record how it ended
    proc.communicate(timeout=30)
    st = open_store(db)
    (killed,) = st.runs()
    # a second run whose process (this one) lives, silent as long
    sid = st.ensure_sweep("watched", "")
    alive = st.ensure_run(sid, "alive", role="control", pair_key="p", seed=0, compression="none",
                          correction="none", config={"placement": this_process()})  # fmt: skip
    st.write_steps(alive, [(1, {"x": 1.0}, {})])
    shown, _ = _statuses(db)
    assert shown == {killed.id: "running", alive: "running"}  # silent for seconds only

    engine = create_engine(db)  # the night passes: both silent for two hours
    with engine.begin() as conn:
        conn.execute(update(Run).values(active_at=datetime.now(UTC) - timedelta(hours=2)))
    engine.dispose()
    shown, out = _statuses(db)
    assert shown == {killed.id: "stale", alive: "running"}, out
    assert "stale 1" in out and "1 run(s) stale: stored as running but silent" in out
    assert [r.status for r in open_store(db).runs()] == ["running", "running"]  # unchanged
