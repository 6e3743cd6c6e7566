"""A sweep's driver at scale, without Ray's actors: the Monitor and the Recorder fed as
Ray Tune's controller feeds them, by N synthetic trials on one core.

One process, pinned to one CPU core (the writer thread and SQLite with it; a PostgreSQL
server runs where the OS puts it), plays ``trials`` trials that each report the worker's
full figure set and both distributions every ``interval`` s (phases spread evenly). A
result is handed to the Monitor (the Tune stopper) and then to the Recorder's
``on_trial_result`` when it is due, or as soon as the driver is free if it is behind (a
trial's ``tune.report`` blocks until the driver takes it); a stop ends the trial
(``on_trial_complete``). 1,000 trials of Ray actors need ~1,000 worker processes (about
100 MB each), more than one machine holds for a benchmark; Tune's own per-result work is
measured in part 3 of ``pipeline_bench.py`` on a real Ray sweep.

Measured per result: the driver's time in Monitor + Recorder (median, p95); the delay from
a result's due time to its stop decision (median, max); the store's rows/s (metric rows
committed per second of the run, and per second spent writing). With ``outage``, the store
goes away for a while mid-run (a private PostgreSQL server stopped and started; a SQLite
file held by another process's exclusive transaction) and the store is checked afterwards:
steps lost and written twice, and the lines the Recorder printed.

Call :func:`simulate`.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

HOLD_SQLITE = r"""
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
c.execute("ROLLBACK")
"""


@dataclass
class SimResult:
    trials: int
    results: int
    wall_s: float
    cost_ms: list[float]
    monitor_ms: list[float]
    recorder_ms: list[float]
    delays_s: list[float]
    stops: int
    controls_stopped: int
    rows: int
    write_s: float
    lines: list[str] = field(default_factory=list)
    lost: int | None = None
    twice: int | None = None
    late: int | None = None
    spilled: int | None = None
    commits: int | None = None
    """Results the writer committed (a result committed twice counts twice)."""

    def row(self, label: str) -> str:
        d = sorted(self.delays_s)
        delay = f"{1000 * statistics.median(d):.0f} / {1000 * d[-1]:.0f}" if d else "no stop"
        return (
            f"| {label} | {self.trials:,} | {self.results:,} | {_mp(self.cost_ms)} | "
            f"{_mp(self.monitor_ms)} | {_mp(self.recorder_ms)} | {delay} | {self.stops} "
            f"({self.controls_stopped} controls) | {self.rows / self.wall_s:,.0f} | "
            f"{self.rows / max(self.write_s, 1e-9):,.0f} |"
        )


def _mp(ms: list[float]) -> str:
    """Median / p95 of per-result milliseconds."""
    s = sorted(ms)
    return f"{statistics.median(s):.3f} / {s[int(0.95 * (len(s) - 1))]:.3f}"


HEADER = [
    "| store, writer | trials | results | Monitor + Recorder ms per result, median / p95 "
    "| Monitor alone | Recorder alone | result to stop decision ms, median / max | stops | "
    "rows/s over the run | rows/s while writing |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def _pin_one_core() -> int:
    core = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(0, {core})
    return core


def simulate(
    url: str, *, trials: int, steps: int, interval: float, writer: str, pool: list[Any],
    row_fn: Callable[..., dict[str, float]], work: Path,
    outage: tuple[float, float, Callable[[], None], Callable[[], None]] | None = None,
    recorder_kw: dict[str, Any] | None = None,
) -> SimResult:  # fmt: skip
    """Run the driver for ``trials`` trials of ``steps`` steps (see the module docstring).

    ``outage``: (start s, length s, go, back): ``go()`` at ``start`` s into the run,
    ``back()`` ``length`` s later (from a timer thread, as an operator would)."""
    from gapwatch.orchestrator import rules
    from gapwatch.orchestrator.sweep.config import parse_sweep_config
    from gapwatch.orchestrator.sweep.monitor import Monitor
    from gapwatch.orchestrator.sweep.recorder import Recorder
    from gapwatch.orchestrator.sweep.trainable import DISTS_KEY, METRICS_KEY, STEP_KEY, TRIAL_KEY
    from gapwatch.orchestrator.sweep.writer import ThreadWriter
    from gapwatch.store import Store, open_store

    _pin_one_core()
    seeds = max(1, trials // 5)
    cfg = {
        "name": f"scale-{writer}-{time.time_ns()}", "seeds": list(range(seeds)),
        "steps": steps, "compression": [{"codec": "quant", "bits": 2}],
        "correction": ["none", "tis", "icepop", "seq_mis"],
    }  # fmt: skip
    sweep = parse_sweep_config(cfg)
    specs = [s.to_dict() for s in sweep.trials]
    st = open_store(url)
    sweep_id = st.ensure_sweep(cfg["name"], "")
    lines: list[str] = []
    rec = Recorder(url, sweep_id, specs, writer=writer, say=lines.append,
                   spill_dir=work / "spill", **(recorder_kw or {}))  # fmt: skip
    for s in specs:
        rec.run_id(s["trial_key"])
    mon = Monitor(rules.build({}), specs, rec)

    written = {"rows": 0, "s": 0.0}
    orig = Store.write_batch

    def counted(self: Store, steps_: Any, decisions: Any = ()) -> int:
        t0 = time.perf_counter()
        n = orig(self, steps_, decisions)
        written["s"] += time.perf_counter() - t0
        written["rows"] += n
        return n

    Store.write_batch = counted  # type: ignore[method-assign]
    dists = [json.dumps(d) for _, d in pool]

    class _Trial:
        def __init__(self, spec: dict[str, Any]) -> None:
            self.config = {"spec": spec}
            self.latest_checkpoint_result = None

    tr = {s["trial_key"]: _Trial(s) for s in specs}
    collapse = {}
    for i, s in enumerate(specs):
        k = s["trial_key"]
        collapse[k] = None if s["role"] == "control" else 5 + (i * 7) % max(1, steps - 10)
    rngs = {k: random.Random(i) for i, k in enumerate(tr)}
    w = rec.writer  # closed at the end: kept here for its counts
    for k in tr:
        rec.on_trial_start(0, [], tr[k])
    t_start = time.monotonic()
    due = [(t_start + interval * i / len(tr), k, 1) for i, k in enumerate(tr)]
    heapq.heapify(due)
    if outage is not None:
        start, length, go, back = outage
        threading.Timer(start, go).start()
        threading.Timer(start + length, back).start()
    cost, mon_ms, rec_ms, delays = [], [], [], []
    carry = 0.0
    """Driver time in the Recorder between results (Tune's step ends, trial ends): added
    to the next result's cost, so the inline path's flushes there are counted."""
    stops = controls_stopped = results = 0
    last_step: dict[str, int] = {}
    nfigs: dict[str, int] = {}
    while due:
        at, key, step = heapq.heappop(due)
        now = time.monotonic()
        t0 = time.perf_counter()
        rec.on_step_end(0, [])  # Tune's controller ends a step between results
        carry += time.perf_counter() - t0
        if at > now:
            time.sleep(at - now)
        figs, _ = pool[step % len(pool)]
        result = {
            TRIAL_KEY: key, STEP_KEY: step,
            METRICS_KEY: {**figs, **row_fn(step, collapse[key], rngs[key])},
            DISTS_KEY: dists[step % len(dists)],
        }  # fmt: skip
        t0 = time.perf_counter()
        stop = mon(key, result)
        t1 = time.perf_counter()
        rec.on_trial_result(0, [], tr[key], result)
        if stop or step == steps:
            rec.on_trial_complete(0, [], tr[key])
        t3 = time.perf_counter()
        results += 1
        last_step[key] = step
        nfigs[key] = len(result[METRICS_KEY])
        cost.append(1000 * (t3 - t0 + carry))
        mon_ms.append(1000 * (t1 - t0))
        rec_ms.append(1000 * (t3 - t1 + carry))
        carry = 0.0
        if stop:
            delays.append(time.monotonic() - at)
            stops += 1
            controls_stopped += tr[key].config["spec"]["role"] == "control"
        if stop or step == steps:
            continue
        heapq.heappush(due, (at + interval, key, step + 1))
    rec.on_experiment_end([])
    wall = time.monotonic() - t_start
    Store.write_batch = orig  # type: ignore[method-assign]
    out = SimResult(len(tr), results, wall, cost, mon_ms, rec_ms, delays, stops,
                    controls_stopped, written["rows"], written["s"], lines)  # fmt: skip
    if isinstance(w, ThreadWriter):
        out.late, out.spilled = w.counts.late, w.counts.spilled
        out.commits = w.counts.results
    if outage is not None:
        out.lost, out.twice = _lost_and_twice(st, sweep_id, last_step, nfigs)
    st.close()
    return out


def _lost_and_twice(
    st: Any, sweep_id: int, sent: dict[str, int], figs: dict[str, int]
) -> tuple[int, int]:
    """(steps sent but not stored, steps stored twice: with more metric rows than the
    result had figures, or beyond the last step sent)."""
    runs = {r.trial_id: r.id for r in st.runs(sweep_id=sweep_id)}
    with st.engine.connect() as c:
        q = text("SELECT run_id, step, count(*) FROM metrics WHERE run_id IN "
                 "(SELECT id FROM runs WHERE sweep_id = :s) GROUP BY run_id, step")  # fmt: skip
        stored: dict[int, dict[int, int]] = {}
        for rid, step, n in c.execute(q, {"s": sweep_id}):
            stored.setdefault(int(rid), {})[int(step)] = int(n)
    lost = twice = 0
    for key, last in sent.items():
        have = stored.get(runs[key], {})
        lost += sum(1 for s in range(1, last + 1) if s not in have)
        twice += sum(1 for s, n in have.items() if n > figs[key] or s > last)
    return lost, twice


def sqlite_lock(db: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    """(go, back): another process takes ``db``'s write lock, then lets it go."""
    held: list[subprocess.Popen[str]] = []

    def go() -> None:
        p = subprocess.Popen([sys.executable, "-c", HOLD_SQLITE, str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert p.stdout is not None
        p.stdout.readline()
        held.append(p)

    def back() -> None:
        p = held.pop()
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=60)

    return go, back
