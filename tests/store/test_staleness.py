"""When a ``running`` run is shown ``stale`` (``store.staleness``): the store keeps when
each run last showed life and its pace between steps, on SQLite and PostgreSQL, and the
rule reads them with the process the run records."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from gapwatch.store import RunRow, Store, open_store
from gapwatch.store import staleness as S


def _run(st: Store) -> int:
    sid = st.ensure_sweep("s", "")
    rid = st.ensure_run(sid, "t", role="control", pair_key="p", seed=0, compression="none",
                        correction="none", config={})  # fmt: skip
    return int(rid)


def test_the_store_keeps_when_a_run_last_stepped_and_its_pace(store_url: str) -> None:
    st = open_store(store_url)
    rid = _run(st)
    assert (st.run(rid).active_at, st.run(rid).step_interval_s) == (None, None)
    st.begin_attempt(rid)  # its trainer starts: a sign of life, no step yet
    started = st.run(rid).active_at
    assert started is not None and st.run(rid).step_interval_s is None
    time.sleep(0.3)
    st.write_steps(rid, [(1, {"x": 1.0}, {})])  # the wait for a first step is not a pace
    first = st.run(rid)
    assert first.active_at is not None and first.active_at > started
    assert first.step_interval_s is None
    time.sleep(0.4)
    st.write_steps(rid, [(2, {"x": 2.0}, {})])
    two = st.run(rid)
    assert two.step_interval_s is not None and 0.35 < two.step_interval_s < 2.0
    st.write_steps(rid, [(2, {"y": 1.0}, {})])  # more figures of step 2: not a new step
    st.write_steps(rid, [(1, {"x": 1.5}, {})])  # an old step sent again
    assert st.run(rid) == two
    time.sleep(0.4)
    st.write_batch({rid: [(3, {"x": 3.0}, {}), (4, {"x": 4.0}, {})]})  # two steps at once
    four = st.run(rid)
    assert four.step_interval_s is not None and four.step_interval_s < two.step_interval_s
    st.delete_run_data(rid)  # the run starts again from step 1: its pace is learnt anew
    assert st.run(rid).step_interval_s is None


def test_the_pace_follows_a_slower_run_and_shrugs_off_one_pause() -> None:
    pace = None
    for _ in range(20):
        pace = S.next_interval(pace, 10.0)
    assert pace == pytest.approx(10.0)
    paused = S.next_interval(pace, 3600.0)  # one evaluation of an hour
    assert paused == pytest.approx(10.0 + S.INTERVAL_WEIGHT * (S.INTERVAL_CAP - 1) * 10.0)
    for _ in range(5):
        paused = S.next_interval(paused, 10.0)
    assert paused < 13.0  # and it fades
    slow = pace
    for _ in range(15):  # the run really slows down 10x
        slow = S.next_interval(slow, 100.0)
    assert slow > 90.0


def _row(**kw: object) -> RunRow:
    now = datetime.now(UTC)
    base = dict(
        id=1, sweep_id=1, trial_id="t", role="control", pair_key="p", seed=0,
        compression="none", correction="none", config={}, status="running", stop_rule=None,
        stop_step=None, error=None, started=now - timedelta(days=1), ended=None, last_step=5,
        active_at=now, step_interval_s=60.0,
    )  # fmt: skip
    return RunRow(**{**base, **kw})  # type: ignore[arg-type]


def test_the_rule() -> None:
    now = datetime.now(UTC)
    here = {"host": socket.gethostname(), "pid": os.getpid(), "started_at": time.time()}
    ended = subprocess.Popen(["true"])
    ended.wait()
    gone = {**here, "pid": ended.pid}
    quiet = now - timedelta(hours=3)  # past 10 x 60 s and the 30 min floor
    # silent long enough, no process known: stale; only a running run ever is
    assert S.is_stale(_row(active_at=quiet), now)
    assert S.shown_status(_row(active_at=quiet), now) == "stale"
    for status in ("completed", "stopped", "failed"):
        assert S.shown_status(_row(active_at=quiet, status=status), now) == status
    # within its allowance: max(10 x its pace, the floor)
    assert not S.is_stale(_row(active_at=now - timedelta(minutes=20)), now)  # < floor
    assert S.is_stale(_row(active_at=now - timedelta(minutes=40)), now)
    slow = _row(active_at=now - timedelta(minutes=40), step_interval_s=600.0)  # 10-min steps
    assert not S.is_stale(slow, now)
    assert S.is_stale(dataclasses.replace(slow, active_at=now - timedelta(minutes=101)), now)
    # before any step: its start stands in, and the floor alone applies
    assert S.is_stale(_row(active_at=None, step_interval_s=None, last_step=None), now)
    assert not S.is_stale(_row(active_at=None, started=now - timedelta(minutes=5)), now)
    # a live process on this machine vouches for it; a dead one, or a pid used again, not
    assert not S.is_stale(_row(active_at=quiet, config={"placement": here}), now)
    assert S.is_stale(_row(active_at=quiet, config={"placement": gone}), now)
    reused = {**here, "started_at": time.time() - 10 * 365 * 86400}  # ours started later
    assert S.process_alive(reused) is False
    # another host's process cannot be checked here: silence alone decides
    elsewhere = {**here, "host": "not-" + socket.gethostname()}
    assert S.process_alive(elsewhere) is None
    assert S.is_stale(_row(active_at=quiet, config={"placement": elsewhere}), now)
