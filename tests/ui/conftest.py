"""Small synthetic sweeps in real SQLite stores, written through the store's ingest API.

``filled``: two seeds; per seed a dense control and compressed treatments. Seed 1's ``q2 + none``
treatment collapses and is stopped at step 6 by ``score_collapse`` (with a
``gap_vs_control`` warning at step 1); seed 2's ``q2 + icepop`` fails at step 3; seed 2's
``q2 + tis`` has NaN and inf values. Every run stores the figures the compare page draws
and |log-ratio| distributions (every ratio family) at every second step.

``thresholds``: a correction-threshold sweep (``fill_thresholds``): three seeds, three
corrections whose thresholds vary, runs stopped by different rules at nearby steps.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gapwatch.correction import names
from gapwatch.store import open_store

PG_HOST, PG_PORT = "127.0.0.1", 5432
STEPS = 12
BUDGET = 64


@dataclass(frozen=True)
class Filled:
    url: str
    sweep_id: int
    ids: dict[str, int]
    """Run ids by a short name: c1, t1_none, t1_tis, c2, t2_tis, t2_icepop."""


def _payload(scale: float) -> dict[str, Any]:
    keys = list(range(-40, 40, 4))
    upper = [scale * math.exp(0.1 * k) for k in keys]
    counts = [1 + (k + 40) // 4 for k in keys]
    return {"scheme": "logbucket:test", "keys": keys, "counts": counts, "upper": upper}


def _metrics(
    step: int, gap: float, score: float, length: float, tail_growth: float
) -> dict[str, float]:
    m = {
        names.SCORE_MEAN: score,
        names.PROBS_DIFF_MEAN: gap,
        names.PROBS_DIFF_MAX: min(1.0, gap * 3),
        names.ABS_LOG_RATIO_MEAN: gap * 4,
        names.RESPONSE_LENGTH_MEAN: length,
        names.RESPONSE_BUDGET: float(BUDGET),
        names.CLIP_RATIO: min(1.0, length / BUDGET),
        names.ZERO_ADV_FRAC: 0.1,
        names.tail("text", "p95"): 0.5 * gap * 10,
        names.tail("post_tool", "p95"): gap * 10 * (1 + tail_growth * step),
        names.ess("text"): 0.9,
        names.ess("post_tool"): max(0.05, 0.9 - tail_growth * step * 0.1),
    }
    for r, scale in (("ref_drift", 0.01 * step), ("ppo", gap)):  # the drift families
        m[names.tail("text", "p95", r)] = 0.5 * scale
        m[names.tail("post_tool", "p95", r)] = scale * (1 + tail_growth * step)
        m[names.ess("text", r)] = 0.95
        m[names.ess("post_tool", r)] = max(0.05, 0.95 - tail_growth * step * 0.1)
    for i, b in enumerate(names.TURN_BUCKETS):  # later turns diverge more
        m[names.by_turn(names.PROBS_DIFF_MEAN, b)] = gap * (1 + 0.5 * i)
    return m


def fill(url: str) -> Filled:
    st = open_store(url)
    sid = st.ensure_sweep("ui-test", "name: ui-test\n")
    ids: dict[str, int] = {}
    specs = [
        ("c1", 1, "control", "none", "none"),
        ("t1_none", 1, "treatment", "q2", "none"),
        ("t1_tis", 1, "treatment", "q2", "tis"),
        ("c2", 2, "control", "none", "none"),
        ("t2_tis", 2, "treatment", "q2", "tis"),
        ("t2_icepop", 2, "treatment", "q2", "icepop"),
    ]
    for key, seed, role, codec, corr in specs:
        ids[key] = st.ensure_run(
            sid, key, role=role, pair_key=f"seed{seed}", seed=seed, compression=codec,
            correction=corr, config={"steps": STEPS, "seed": seed, "lr": 1e-4},
        )  # fmt: skip
    for key, rid in ids.items():
        last = {"t1_none": 6, "t2_icepop": 3}.get(key, STEPS)
        dense = key.startswith("c")
        rows = []
        for step in range(1, last + 1):
            gap = 0.006 if dense else 0.3
            score = 0.3 + 0.02 * step
            length = 20.0
            growth = 0.0
            if key == "t1_none":
                score = 0.5 - 0.15 * step
                length = min(BUDGET, 20.0 + 10 * step)
                growth = 0.5
            m = _metrics(step, gap, score, length, growth)
            if key == "t2_tis" and step in (4, 5):
                m[names.PROBS_DIFF_MEAN] = float("nan")
                m[names.ABS_LOG_RATIO_MEAN] = float("inf")
            dists = {}
            if step % 2 == 1 or step == last:
                dists = {
                    names.dist(s, r): _payload(
                        gap * (1 + growth * step) * (2 if s == "post_tool" else 1)
                    )
                    for s in names.SLICES
                    for r in names.RATIOS
                }
            rows.append((step, m, dists))
        st.write_steps(rid, rows)
    st.write_decision(
        ids["t1_none"], 1, "gap_vs_control", "warn", {"ratio": 50.0, "control_gap": 0.006}
    )
    st.write_decision(
        ids["t1_none"], 6, "score_collapse", "stop", {"score": -0.4, "below_zero_for": 3}
    )
    st.set_run_status(ids["t1_none"], "stopped", stop_rule="score_collapse", stop_step=6)
    st.set_run_status(ids["t2_icepop"], "failed", error="RuntimeError: worker died at step 3")
    for key in ("c1", "t1_tis", "c2", "t2_tis"):
        st.set_run_status(ids[key], "completed")
    st.set_sweep_status(sid, "completed")
    st.close()
    return Filled(url, sid, ids)


# --- a threshold sweep: three seeds, thresholds that vary, stops at nearby steps --------

T_STEPS = 20
CODEC = "topk(keep=0.05)"
# (correction, its thresholds) -> per seed 0, 1, 2: (stop step or None, rule, final score)
T_OUTCOMES: dict[tuple[str, tuple[tuple[str, float], ...]], list[tuple[int | None, str, float]]] = {
    ("tis", (("C", 1.5),)): [(6, "score_collapse", -0.1), (7, "score_collapse", -0.1),
                             (6, "score_collapse", -0.1)],
    ("tis", (("C", 2.0),)): [(7, "length_runaway", -0.05), (9, "score_collapse", -0.1),
                             (None, "", 0.05)],
    ("tis", (("C", 4.0),)): [(None, "", 0.28), (None, "", 0.35), (None, "", 0.40)],
    ("icepop", (("lo", 0.5), ("hi", 5.0))): [(7, "score_collapse", -0.1), (None, "", 0.10),
                                             (None, "", 0.15)],
    ("icepop", (("lo", 0.8), ("hi", 5.0))): [(8, "post_tool_tail_growth", -0.02),
                                             (10, "ess_collapse", 0.0), (None, "", 0.12)],
    ("k3_rs", (("hi", 0.001),)): [(6, "score_collapse", -0.1), (None, "", 0.22),
                                  (None, "", 0.24)],
    ("k3_rs", (("hi", 0.01),)): [(None, "", 0.18), (None, "", 0.20), (None, "", 0.25)],
    ("k3_rs", (("hi", 0.1),)): [(12, "score_collapse", -0.1), (None, "", 0.15),
                                (None, "", 0.17)],
}  # fmt: skip
T_CONTROL = [0.20, 0.26, 0.31]
"""The dense control's final score per seed (it always runs to the end)."""


def fill_hostile(url: str, bad: str) -> tuple[int, int]:
    """A store whose sweep name, run labels and stored error all carry ``bad`` (markdown
    or HTML an attacker planted): (sweep id, run id)."""
    with open_store(url) as st:
        sid = st.ensure_sweep(f"sweep {bad}", "name: x\n")
        rid = st.ensure_run(sid, "t", role="treatment", pair_key="p", seed=0,
                            compression=bad, correction=bad, config={})  # fmt: skip
        st.write_steps(rid, [(1, {names.SCORE_MEAN: 0.1}, {})])
        st.set_run_status(rid, "failed", error=f"RuntimeError: {bad}")
    return sid, rid


def label(name: str, kw: tuple[tuple[str, float], ...]) -> str:
    """A run's correction column as the sweep writes it, ``tis(C=2)``."""
    return f"{name}({', '.join(f'{k}={v:g}' for k, v in kw)})"


@dataclass(frozen=True)
class Thresholds:
    url: str
    sweep_id: int
    ids: dict[tuple[str, int], int]
    """Run ids by (correction label or "control", seed)."""


def fill_thresholds(url: str) -> Thresholds:
    """A sweep of one codec, ``tis`` over C, ``icepop`` over lo and ``k3_rs`` over hi
    (0.001 to 0.1: a log axis), three seeds, with the outcomes of ``T_OUTCOMES``."""
    st = open_store(url)
    sid = st.ensure_sweep("thresholds", "name: thresholds\n")
    ids: dict[tuple[str, int], int] = {}
    arms = [("control", "none", "none", (), None)] + [
        (label(n, kw), CODEC, label(n, kw), kw, n) for n, kw in T_OUTCOMES
    ]
    for seed in range(3):
        for key, codec, corr, kw, name in arms:
            config = {
                "steps": T_STEPS, "seed": seed, "compression": "topk" if name else "none",
                "compression_kwargs": {"keep": 0.05} if name else {},
                "correction": name or "none", "correction_kwargs": dict(kw),
            }  # fmt: skip
            rid = st.ensure_run(
                sid, f"s{seed}-{key}", role="treatment" if name else "control",
                pair_key=f"mul/tiny/s{seed}", seed=seed, compression=codec, correction=corr,
                config=config,
            )  # fmt: skip
            ids[(key, seed)] = rid
            if name:
                stop, rule, final = T_OUTCOMES[(name, kw)][seed]
            else:
                stop, rule, final = None, "", T_CONTROL[seed]
            last = stop or T_STEPS
            rows = []
            for step in range(1, last + 1):
                score = 0.3 + (final - 0.3) * step / last
                gap = 0.3 if name else 0.006
                rows.append((step, _metrics(step, gap, score, 20.0, 0.0), {}))
            st.write_steps(rid, rows)
            if stop:
                st.write_decision(rid, stop, rule, "stop", {"step": stop})
                st.set_run_status(rid, "stopped", stop_rule=rule, stop_step=stop)
            else:
                st.set_run_status(rid, "completed")
    st.set_sweep_status(sid, "completed")
    st.close()
    return Thresholds(url, sid, ids)


@pytest.fixture(scope="session")
def thresholds(tmp_path_factory: pytest.TempPathFactory) -> Thresholds:
    path = tmp_path_factory.mktemp("uithresholds") / "thresholds.db"
    return fill_thresholds(f"sqlite:///{path}")


@pytest.fixture(scope="session")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Filled:
    path = tmp_path_factory.mktemp("uistore") / "ui.db"
    return fill(f"sqlite:///{path}")


@pytest.fixture(scope="session")
def empty_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("uiempty") / "empty.db"
    url = f"sqlite:///{path}"
    open_store(url).close()
    return url


@pytest.fixture(scope="session")
def hostile() -> Any:
    """:func:`fill_hostile` itself."""
    return fill_hostile


@pytest.fixture(scope="session")
def filler() -> Any:
    """The :func:`fill` function itself (test modules cannot import conftest by name)."""
    return fill


@pytest.fixture()
def missing_url(tmp_path: Path) -> Iterator[str]:
    yield f"sqlite:///{tmp_path / 'nothing-here.db'}"


@pytest.fixture(scope="session")
def filled_pg(pg_user: str) -> Iterator[Filled]:
    """The same sweep in this session's own PostgreSQL database (dropped at the end)."""
    user = pg_user
    name = f"gapwatch_ui_{uuid.uuid4().hex[:10]}"
    admin = {"host": PG_HOST, "port": PG_PORT, "user": user, "dbname": "test", "autocommit": True}
    with psycopg.connect(**admin) as conn:  # type: ignore[arg-type]
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield fill(f"postgresql+psycopg://{user}@{PG_HOST}:{PG_PORT}/{name}")
    finally:
        with psycopg.connect(**admin) as conn:  # type: ignore[arg-type]
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
