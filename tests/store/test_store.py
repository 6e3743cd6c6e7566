"""The store's write and read API, on SQLite and PostgreSQL alike (see conftest)."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import random
import re
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st_
from sqlalchemy import text

from gapwatch import store
from gapwatch.correction import names
from gapwatch.store import Point, Store, StoreError, open_store

SCORE, GAP = names.SCORE_MEAN, names.PROBS_DIFF_MEAN
Step = tuple[int, dict[str, float], dict[str, Any]]


def _count(st: Store, table: str) -> int:
    with st.engine.connect() as conn:
        return int(conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())


def test_public_api_is_pinned() -> None:
    assert sorted(store.__all__) == [
        "DecisionRow",
        "DistRow",
        "Point",
        "RunRow",
        "Store",
        "StoreError",
        "SweepRow",
        "open_store",
    ]


def test_sweeps_and_runs_get_or_create(st: Store) -> None:
    sid = st.ensure_sweep("sweep-a", "seeds: [0]")
    assert st.ensure_sweep("sweep-a", "ignored") == sid
    kw = dict(pair_key="s0", seed=0, compression="none", correction="none", config={"steps": 5})
    c = st.ensure_run(sid, "ctl", role="control", **kw)  # type: ignore[arg-type]
    t = st.ensure_run(sid, "trt", role="treatment", **kw)  # type: ignore[arg-type]
    assert st.ensure_run(sid, "ctl", role="control", **kw) == c  # type: ignore[arg-type]
    st.set_run_status(t, "stopped", stop_rule="constant_advantage", stop_step=7)
    st.set_sweep_status(sid, "completed")

    (sw,) = st.sweeps()
    assert (sw.name, sw.status, sw.config_text) == ("sweep-a", "completed", "seeds: [0]")
    assert sw.run_counts == {"running": 1, "stopped": 1}
    assert sw.created.tzinfo is not None
    runs = st.runs(sid)
    assert [r.id for r in runs] == [c, t]
    r = st.run(t)
    assert (r.status, r.stop_rule, r.stop_step, r.role) == (
        "stopped",
        "constant_advantage",
        7,
        "treatment",
    )
    assert r.config == {"steps": 5} and r.ended is not None and r.last_step is None
    assert st.runs(sweep_id=sid + 100) == []


def test_bad_names_and_unknown_ids_are_one_clear_line(
    st: Store, make_run: Callable[..., int]
) -> None:
    rid = make_run()
    with pytest.raises(StoreError, match="unknown run status 'done'; valid: running"):
        st.set_run_status(rid, "done")
    with pytest.raises(StoreError, match="unknown role 'dense'"):
        st.ensure_run(
            1, "x", role="dense", pair_key="p", seed=0, compression="n", correction="n", config={}
        )
    with pytest.raises(StoreError, match="no run with id 999"):
        st.run(999)
    with pytest.raises(StoreError, match="no run with id 999"):
        st.write_steps(999, [(1, {SCORE: 1.0}, {})])
    with pytest.raises(StoreError, match="no sweep with id 999"):
        st.set_sweep_status(999, "failed")
    with pytest.raises(StoreError, match="unknown action 'halt'"):
        st.write_decision(rid, 1, "r", "halt", {})


def test_resumed_step_overwrites_never_duplicates(st: Store, make_run: Callable[..., int]) -> None:
    rid = make_run()
    first: list[Step] = [(s, {SCORE: float(s), GAP: 0.1}, {}) for s in range(1, 6)]
    assert st.write_steps(rid, first) == 10
    # a resume re-sends steps 4..6 with other values
    st.write_steps(rid, [(s, {SCORE: 100.0 + s, GAP: 0.2}, {}) for s in range(4, 7)])
    hist = st.history(rid)
    assert [h["step"] for h in hist] == [1, 2, 3, 4, 5, 6]
    assert [h[SCORE] for h in hist] == [1.0, 2.0, 3.0, 104.0, 105.0, 106.0]
    assert _count(st, "metrics") == 12
    # one step twice in one batch: merged, the later value wins
    st.write_steps(rid, [(7, {SCORE: 1.0}, {}), (7, {SCORE: 2.0, GAP: 0.3}, {})])
    assert st.history(rid)[-1] == {"step": 7, SCORE: 2.0, GAP: 0.3}
    assert st.run(rid).last_step == 7
    st.write_steps(rid, [(2, {SCORE: -1.0}, {})])  # an old step never moves last_step back
    assert st.run(rid).last_step == 7


def test_non_finite_values_round_trip_flagged(st: Store, make_run: Callable[..., int]) -> None:
    rid = make_run()
    st.write_steps(
        rid,
        [
            (1, {"a": math.nan, "b": math.inf, "c": -math.inf, "d": 0.5}, {}),
            (2, {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}, {}),
            (3, {"a": float("nan"), "b": 1e308 * 10, "c": 7, "d": True}, {}),
        ],
    )
    assert _count(st, "metrics") == 12  # nothing vanished
    pts = {(p.name, p.step): p for p in st.series([rid], ["a", "b", "c", "d"])}
    assert pts[("a", 1)] == Point(rid, "a", 1, None, "nan")
    assert pts[("b", 1)] == Point(rid, "b", 1, None, "inf")
    assert pts[("c", 1)] == Point(rid, "c", 1, None, "-inf")
    assert pts[("b", 3)].flag == "inf" and pts[("c", 3)] == Point(rid, "c", 3, 7.0, None)
    assert pts[("d", 3)].value == 1.0
    assert st.latest([rid], ["a", "b", "c"]) == {rid: {"a": None, "b": None, "c": 7.0}}
    h1 = st.history(rid)[0]
    assert math.isnan(h1["a"]) and h1["b"] == math.inf and h1["c"] == -math.inf
    assert st.non_finite(rid) == {"a": {"nan": 2}, "b": {"inf": 2}, "c": {"-inf": 1}}
    # overwriting a flagged value with a finite one clears the flag
    st.write_steps(rid, [(1, {"a": 2.5}, {})])
    assert st.series([rid], ["a"])[0] == Point(rid, "a", 1, 2.5, None)
    assert st.non_finite(rid)["a"] == {"nan": 1}
    assert st.non_finite(make_run("t1")) == {}


@pytest.mark.parametrize(
    ("bad", "shown"), [("abc", "'abc' (str)"), (None, "None (NoneType)"), ([1.0], "[1.0] (list)")]
)
def test_non_number_is_refused_naming_the_metric_and_writes_nothing(
    st: Store, make_run: Callable[..., int], bad: object, shown: str
) -> None:
    rid = make_run()
    with pytest.raises(
        StoreError, match=rf"metric .x/y. at step 2 of run {rid} is {re.escape(shown)}"
    ):
        st.write_steps(rid, [(1, {SCORE: 1.0}, {}), (2, {"x/y": bad}, {})])  # type: ignore[dict-item]
    assert _count(st, "metrics") == 0


def test_bad_steps_are_refused(st: Store, make_run: Callable[..., int]) -> None:
    rid = make_run()
    with pytest.raises(StoreError, match="step -1 is negative"):
        st.write_steps(rid, [(-1, {SCORE: 1.0}, {})])
    with pytest.raises(StoreError, match="step '3' .* is not an integer"):
        st.write_steps(rid, [("3", {SCORE: 1.0}, {})])  # type: ignore[list-item]
    with pytest.raises(StoreError, match="each step must be"):
        st.write_steps(rid, [(1, {SCORE: 1.0})])  # type: ignore[list-item]
    assert st.write_steps(rid, []) == 0


def _reference_downsample(
    vals: list[tuple[int, float | None, str | None]], max_points: int
) -> set[int]:
    """The steps the series query keeps, in plain Python (rows in step order, no ties)."""
    if len(vals) <= max_points:
        return {s for s, _, _ in vals}
    nb = (max_points - 2) // 2
    s0, s1 = vals[0][0], vals[-1][0]
    keep = {s0, s1}
    buckets: dict[int, list[tuple[int, float | None, str | None]]] = {}
    for row in vals:
        buckets.setdefault((row[0] - s0) * nb // (s1 - s0 + 1), []).append(row)
    inf = math.inf
    for rows in buckets.values():
        lo = min(rows, key=lambda r: -inf if r[2] == "-inf" else inf if r[1] is None else r[1])
        hi = max(
            rows, key=lambda r: inf if r[2] in ("nan", "inf") else -inf if r[1] is None else r[1]
        )
        keep |= {lo[0], hi[0]}
    return keep


def test_series_downsampled_in_sql_keeps_spikes_first_and_last(
    st: Store, make_run: Callable[..., int]
) -> None:
    r1, r2 = make_run("a"), make_run("b")
    rng = random.Random(1)
    steps: list[Step] = []
    for s in range(1, 1001):
        v = rng.gauss(0.0, 1.0)
        v = 100.0 if s == 537 else -100.0 if s == 222 else math.nan if s == 800 else v
        steps.append((s, {SCORE: v, GAP: rng.random()}, {}))
    st.write_steps(r1, steps)
    st.write_steps(r2, [(s, {SCORE: float(s)}, {}) for s in range(1, 31)])  # short series

    pts = st.series([r1, r2], [SCORE, GAP, "no/such/metric"], max_points=50)
    by: dict[tuple[int, str], list[Point]] = {}
    for p in pts:
        by.setdefault((p.run_id, p.name), []).append(p)
    assert set(by) == {(r1, SCORE), (r1, GAP), (r2, SCORE)}
    score = by[(r1, SCORE)]
    kept = {p.step for p in score}
    assert len(score) <= 50 and len(by[(r1, GAP)]) <= 50
    assert {1, 1000, 537, 222, 800} <= kept  # first, last, spike, dip, NaN
    assert [p.step for p in score] == sorted(kept)
    assert len(by[(r2, SCORE)]) == 30  # under max_points: every point
    ref = _reference_downsample(
        [
            (
                s,
                m[SCORE] if not math.isnan(m[SCORE]) else None,
                "nan" if math.isnan(m[SCORE]) else None,
            )
            for s, m, _ in steps
        ],
        50,
    )
    assert kept == ref
    # ties everywhere (a constant series) and infinite spikes: still bounded, still kept
    flat: list[Step] = [
        (s, {"flat": 1.0, "spiky": -math.inf if s == 300 else math.inf if s == 700 else 0.0}, {})
        for s in range(1, 1001)
    ]
    st.write_steps(r2, flat)
    got = st.series([r2], ["flat", "spiky"], max_points=20)
    flat_pts = [p for p in got if p.name == "flat"]
    spiky = {p.step: p.flag for p in got if p.name == "spiky"}
    assert 2 <= len(flat_pts) <= 20 and {1, 1000} <= {p.step for p in flat_pts}
    assert len(spiky) <= 20 and spiky[300] == "-inf" and spiky[700] == "inf"
    with pytest.raises(StoreError, match="max_points must be at least 4"):
        st.series([r1], [SCORE], max_points=3)
    assert st.series([], [SCORE]) == [] and st.series([r1], []) == []


def test_latest_history_and_metric_names(st: Store, make_run: Callable[..., int]) -> None:
    r1, r2 = make_run("a"), make_run("b")
    st.write_steps(r1, [(1, {SCORE: 0.1, GAP: 0.5}, {}), (2, {SCORE: 0.2}, {})])
    st.write_steps(r2, [(1, {GAP: 0.9}, {})])
    assert st.latest([r1, r2, 12345], [SCORE, GAP, "nope"]) == {
        r1: {SCORE: 0.2, GAP: 0.5},
        r2: {GAP: 0.9},
        12345: {},
    }
    assert st.history(r1) == [{"step": 1, SCORE: 0.1, GAP: 0.5}, {"step": 2, SCORE: 0.2}]
    assert st.metric_names(r1) == sorted([SCORE, GAP]) and st.metric_names(r2) == [GAP]
    assert st.history(12345) == []


def _payload(n: int) -> dict[str, object]:
    return {
        "scheme": "logbucket:alpha=0.01,min=1e-06",
        "keys": [1, 5],
        "counts": [n, 1],
        "upper": [0.01, 0.05],
    }


def test_distributions_at_chosen_steps(st: Store, make_run: Callable[..., int]) -> None:
    rid = make_run()
    d = names.dist("post_tool")
    st.write_steps(rid, [(s, {SCORE: 1.0}, {d: _payload(s)}) for s in (1, 5, 9)])
    st.write_steps(rid, [(5, {}, {d: _payload(50)})])  # re-sent step overwrites
    assert st.distribution_steps(rid, d) == [1, 5, 9]
    rows = st.distributions(rid, d, steps=[5, 9, 7])
    assert [(r.step, r.payload["counts"]) for r in rows] == [(5, [50, 1]), (9, [9, 1])]
    assert len(st.distributions(rid, d)) == 3 and st.distributions(rid, d, steps=[]) == []
    with pytest.raises(StoreError, match="not a sketch payload"):
        st.write_steps(rid, [(2, {}, {d: {"counts": [1]}})])
    with pytest.raises(StoreError, match="differ in length"):
        st.write_steps(rid, [(2, {}, {d: {**_payload(1), "upper": [0.1]}})])


def test_decisions_idempotent_and_filtered(st: Store, make_run: Callable[..., int]) -> None:
    a = make_run("a", sweep="s1")
    b = make_run("b", sweep="s2")
    st.write_decision(a, 3, "score_collapse", "warn", {"score": -0.1})
    st.write_decision(a, 3, "score_collapse", "stop", {"score": -0.2})  # same key: overwrite
    st.write_decision(a, 1, "gap_vs_control", "warn", {"ratio": 100.0})
    st.write_decision(b, 2, "constant_advantage", "stop", {"k": 3})
    ds = st.decisions(run_id=a)
    assert [(d.step, d.rule, d.action) for d in ds] == [
        (1, "gap_vs_control", "warn"),
        (3, "score_collapse", "stop"),
    ]
    assert ds[1].evidence == {"score": -0.2}
    s2 = st.runs()[1].sweep_id
    assert [d.run_id for d in st.decisions(sweep_id=s2)] == [b]
    assert len(st.decisions()) == 3


def test_delete_run_data_clears_one_run_and_keeps_its_row(
    st: Store, make_run: Callable[..., int]
) -> None:
    a = make_run("a")
    b = make_run("b")
    d = names.dist("text")
    for rid in (a, b):
        st.write_steps(rid, [(s, {SCORE: 1.0}, {d: _payload(s)}) for s in (1, 2, 3)])
        st.write_decision(rid, 3, "score_collapse", "stop", {"score": -0.2})
    st.set_run_status(a, "stopped", stop_rule="score_collapse", stop_step=3)
    st.delete_run_data(a)
    row = st.run(a)
    assert (row.last_step, row.stop_rule, row.stop_step) == (None, None, None)
    assert st.history(a) == [] and st.distribution_steps(a, d) == []
    assert st.decisions(run_id=a) == []
    # the other run is untouched; a restarted run then writes from step 1 again
    assert [h["step"] for h in st.history(b)] == [1, 2, 3] and len(st.decisions(run_id=b)) == 1
    st.write_steps(a, [(1, {SCORE: 0.5}, {})])
    assert st.history(a) == [{"step": 1, SCORE: 0.5}] and st.run(a).last_step == 1
    with pytest.raises(StoreError, match="no run with id"):
        st.delete_run_data(10_000)


def test_attempts_count_each_start_and_survive_a_restart(
    st: Store, make_run: Callable[..., int]
) -> None:
    rid = make_run("a")
    assert st.run(rid).attempts is None  # not started yet
    assert st.begin_attempt(rid) == 1
    st.write_steps(rid, [(s, {SCORE: 1.0}, {}) for s in (1, 2, 3)])
    # started again (its node was lost) from its checkpoint after step 2
    st.delete_run_data(rid, after=2)
    assert st.begin_attempt(rid) == 2
    row = st.run(rid)
    assert (row.attempts, row.last_step) == (2, 2)
    assert [r.attempts for r in st.runs() if r.id == rid] == [2]
    with pytest.raises(StoreError, match="no run with id"):
        st.begin_attempt(10_000)


def test_update_run_config_sets_keys_and_keeps_the_rest(
    st: Store, make_run: Callable[..., int]
) -> None:
    rid = make_run("a")
    before = st.run(rid).config
    where = {"node_id": "n1", "gpu_ids": ["0"], "cuda_visible_devices": "0"}
    st.update_run_config(rid, {"placement": where})
    assert st.run(rid).config == {**before, "placement": where}
    # a restarted trial reports again: the new placement replaces the old
    st.update_run_config(rid, {"placement": {**where, "gpu_ids": ["1"]}})
    assert st.run(rid).config["placement"]["gpu_ids"] == ["1"]
    with pytest.raises(StoreError, match="no run with id"):
        st.update_run_config(10_000, {"placement": where})


def test_export_run_jsonl_and_csv(st: Store, make_run: Callable[..., int], tmp_path: Path) -> None:
    rid = make_run()
    st.write_steps(rid, [(1, {SCORE: 0.5, GAP: math.nan}, {}), (2, {SCORE: -0.1}, {})])
    assert st.export_run(rid, tmp_path / "r.jsonl") == 2
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert lines[0]["step"] == 1 and lines[0][SCORE] == 0.5 and math.isnan(lines[0][GAP])
    assert lines[1] == {"step": 2, SCORE: -0.1}
    assert st.export_run(rid, tmp_path / "r.csv") == 2
    rows = (tmp_path / "r.csv").read_text().splitlines()
    assert rows[0] == "step,name,value" and f"2,{SCORE},-0.1" in rows and f"1,{GAP},nan" in rows
    # what `gapwatch replay` reads back is the run's history, in both formats
    from gapwatch.orchestrator.watch.logs import read_log

    for name in ("r.jsonl", "r.csv"):
        back = read_log(tmp_path / name).rows
        assert [sorted(r) for r in back] == [sorted(r) for r in st.history(rid)]
        assert back[1] == {"step": 2, SCORE: -0.1} and math.isnan(back[0][GAP])
    with pytest.raises(StoreError, match="name the file .jsonl or .csv"):
        st.export_run(rid, tmp_path / "r.txt")
    with pytest.raises(StoreError, match="no run with id 77"):
        st.export_run(77, tmp_path / "x.jsonl")


def test_read_only_open_creates_nothing(store_url: str, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no gapwatch store at"):
        open_store(store_url, read_only=True)
    if store_url.startswith("sqlite"):
        assert not (tmp_path / "store.db").exists()
    with open_store(store_url) as w:
        w.ensure_sweep("s", "")
    with open_store(store_url, read_only=True) as ro:
        assert [s.name for s in ro.sweeps()] == ["s"]
        with pytest.raises(StoreError, match="opened read-only"):
            ro.ensure_sweep("t", "")


def _writer(url: str, run_id: int, worker: int, n_calls: int, n_names: int, start: object) -> None:
    st = open_store(url)
    start.wait(30)  # type: ignore[attr-defined]  # both processes begin writing together
    for i in range(n_calls):
        step = worker * 1000 + i  # both workers also share one run, disjoint steps
        st.write_steps(run_id, [(step, {f"m/{k}": float(i) for k in range(n_names)}, {})])
        st.write_steps(run_id + 1 + worker, [(i, {f"own/{k}": 1.0 for k in range(n_names)}, {})])
    st.close()


def test_two_processes_writing_at_once_lose_no_row(store_url: str) -> None:
    with open_store(store_url) as st:
        sid = st.ensure_sweep("conc", "")
        kw = dict(role="control", pair_key="p", seed=0, compression="n", correction="n", config={})
        shared = st.ensure_run(sid, "shared", **kw)  # type: ignore[arg-type]
        own = [st.ensure_run(sid, f"own{w}", **kw) for w in (0, 1)]  # type: ignore[arg-type]
        assert own == [shared + 1, shared + 2]
    n_calls, n_names = 100, 25
    ctx = mp.get_context("fork")
    start = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_writer, args=(store_url, shared, w, n_calls, n_names, start))
        for w in (0, 1)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    with open_store(store_url) as st:
        assert _count(st, "metrics") == 2 * n_calls * n_names * 2
        assert len(st.history(shared)) == 2 * n_calls
        assert [len(st.history(r)) for r in own] == [n_calls, n_calls]
        assert st.run(shared).last_step == 1000 + n_calls - 1
        assert len(st.metric_names(shared)) == n_names


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st_.lists(
        st_.one_of(
            st_.floats(-1e6, 1e6, allow_nan=False),
            st_.sampled_from([math.nan, math.inf, -math.inf, 0.0]),
        ),
        min_size=1,
        max_size=400,
    ),
    max_points=st_.integers(4, 60),
)
def test_downsampling_invariants(
    st: Store, make_run: Callable[..., int], values: list[float], max_points: int
) -> None:
    """Bounded, first and last kept, global extremes kept, every point a stored row."""
    rid = make_run(trial=f"h{len(values)}-{max_points}-{random.random()}")
    st.write_steps(rid, [(i + 1, {"h": v}, {}) for i, v in enumerate(values)])
    pts = st.series([rid], ["h"], max_points=max_points)
    assert len(pts) == len(values) if len(values) <= max_points else len(pts) <= max_points
    steps = [p.step for p in pts]
    assert steps == sorted(set(steps)) and steps[0] == 1 and steps[-1] == len(values)
    for p in pts:  # every point is the stored row, value or flag
        v = values[p.step - 1]
        if math.isfinite(v):
            assert (p.value, p.flag) == (v, None)
        else:
            assert p.value is None and p.flag == (
                "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"
            )
    finite = [v for v in values if math.isfinite(v)]
    kept = {p.value for p in pts if p.value is not None}
    if finite and not any(math.isinf(v) or math.isnan(v) for v in values):
        assert min(finite) in kept and max(finite) in kept
    if any(math.isnan(v) or v == math.inf for v in values):
        assert any(p.flag in ("nan", "inf") for p in pts)
    if any(v == -math.inf for v in values):
        assert any(p.flag == "-inf" for p in pts)


def test_read_only_store_is_safe_across_threads(store_url: str) -> None:
    with open_store(store_url) as w:
        sid = w.ensure_sweep("s", "")
        rid = w.ensure_run(
            sid,
            "t",
            role="control",
            pair_key="p",
            seed=0,
            compression="n",
            correction="n",
            config={},
        )
        w.write_steps(rid, [(s, {SCORE: float(s)}, {}) for s in range(1, 101)])
    errors: list[BaseException] = []
    with open_store(store_url, read_only=True) as ro:

        def reader() -> None:
            try:
                for _ in range(20):
                    assert len(ro.series([rid], [SCORE], max_points=10)) <= 10
                    assert ro.latest([rid], [SCORE]) == {rid: {SCORE: 100.0}}
            except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []


def test_sqlite_writer_waits_out_a_held_lock_then_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gapwatch.store import engine as eng

    monkeypatch.setattr(eng, "BUSY_TIMEOUT_MS", 100)  # 0.1 s per attempt, 5 attempts
    path = tmp_path / "locked.db"
    with open_store(f"sqlite:///{path}") as st:
        sid = st.ensure_sweep("s", "")
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock for 0.3 s
        timer = threading.Timer(0.3, other.execute, args=("COMMIT",))
        timer.start()
        st.set_sweep_status(sid, "completed")  # waits (busy timeout + retries), then writes
        timer.join()
        assert st.sweeps()[0].status == "completed"
        other.execute("BEGIN IMMEDIATE")  # now held for good
        with pytest.raises(StoreError, match="stayed locked by another writer"):
            st.set_sweep_status(sid, "failed")
        other.execute("COMMIT")
        other.close()
        assert st.sweeps()[0].status == "completed"


def test_bad_metric_names_are_refused(st: Store, make_run: Callable[..., int]) -> None:
    rid = make_run()
    with pytest.raises(StoreError, match="metric name 3 is not a non-empty string"):
        st.write_steps(rid, [(1, {3: 1.0, "a": 2.0}, {})])  # type: ignore[dict-item]
    with pytest.raises(StoreError, match="metric name '' is not a non-empty string"):
        st.write_steps(rid, [(1, {"": 1.0}, {})])
    assert st.history(rid) == []
