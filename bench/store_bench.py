"""Store benchmark: bulk ingest rows/s and downsampled series fetch latency.

    .venv/bin/python bench/store_bench.py            # full shape (issue 2 figures)
    .venv/bin/python bench/store_bench.py --quick    # small shape, seconds
    .venv/bin/python bench/store_bench.py --keep /tmp/store3m.db   # keep the SQLite query store

Figures (targets from issue 2, 2 CPU cores):
- ingest of 1,000 run-steps x 1,000 metric names (1M rows) through ``Store.write_steps``:
  rows/s on SQLite (>= 200k) and PostgreSQL (>= 100k), one step per call (what the
  recorder does) and 10 steps per call;
- a store of 100 runs x 1,000 steps x 30 metrics (3M rows, filled with
  ``store.synth.fill``): ``Store.series`` of 30 series (10 runs x 3 metrics) and of 300
  series (10 runs x 30 metrics), downsampled to 500 points, median ms (<= 200 ms).
PostgreSQL: the machine's server (127.0.0.1:5432); the bench creates its own database via
``test`` and drops it at the end. Prints the figures and writes bench/results/store_bench.md.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import machine  # noqa: E402  (bench/ is on sys.path when run as a script)

from gapwatch.store import Store, open_store, reads  # noqa: E402
from gapwatch.store.synth import fill, metric_names  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "store_bench.md"


@contextmanager
def pg_database(admin_url: str) -> Iterator[str | None]:
    """A fresh PostgreSQL database for the bench (dropped afterwards), or None if no server."""
    import psycopg

    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        print(f"PostgreSQL not reachable at {admin_url}: {exc}".splitlines()[0])
        yield None
        return
    name = f"gapwatch_bench_{uuid.uuid4().hex[:8]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    user = admin.info.user
    try:
        yield f"postgresql+psycopg://{user}@{admin.info.host}:{admin.info.port}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def ingest(
    st: Store,
    n_runs: int,
    steps: int,
    n_names: int,
    per_call: int,
    *,
    tag: str = "",
    prof: cProfile.Profile | None = None,
) -> float:
    """Rows/s of writing n_runs x steps x n_names rows through write_steps."""
    rng = random.Random(0)
    names = metric_names(n_names)
    sid = st.ensure_sweep(f"ingest-{per_call}{tag}", "")
    run_ids = [
        st.ensure_run(
            sid,
            f"t{r}",
            role="control",
            pair_key="p",
            seed=r,
            compression="none",
            correction="none",
            config={},
        )
        for r in range(n_runs)
    ]
    # payloads built up front: the figure is the store's, not the generator's
    data: list[list[tuple[int, dict[str, float], dict[str, Any]]]] = [
        [(s, {n: rng.random() for n in names}, {}) for s in range(1, steps + 1)] for _ in run_ids
    ]
    if prof is not None:
        prof.enable()
    t0 = time.perf_counter()
    for rid, steps_of_run in zip(run_ids, data, strict=True):
        for i in range(0, steps, per_call):
            st.write_steps(rid, steps_of_run[i : i + per_call])
    dt = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
    return n_runs * steps * n_names / dt


PROFILE_PARTS = ("gapwatch store code", "SQLAlchemy", "driver + database")


def profile_ingest(st: Store, steps: int, n_names: int, per_call: int) -> dict[str, float]:
    """Where one run's ingest spends its wall time (cProfile own-time, by layer)."""
    prof = cProfile.Profile()
    ingest(st, 1, steps, n_names, per_call, tag="-profiled", prof=prof)
    stats: Any = pstats.Stats(prof)
    share = dict.fromkeys(PROFILE_PARTS, 0.0)
    total = 0.0
    for (file, _line, func), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        total += tt
        if "/store/" in file:
            share[PROFILE_PARTS[0]] += tt
        elif "sqlalchemy" in file:
            share[PROFILE_PARTS[1]] += tt
        elif "psycopg" in file or "sqlite3" in func or func.startswith("<method '"):
            share[PROFILE_PARTS[2]] += tt
    return {k: v / total for k, v in share.items()} if total else share


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall ms of ``fn`` over ``repeats`` calls (after one warm-up) and its result."""
    out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


def query_bench(st: Store, runs: int, steps: int, n_names: int, repeats: int) -> dict[str, Any]:
    """Fill a store of runs x steps x n_names, then time the UI's reads over it."""
    t0 = time.perf_counter()
    run_ids = fill(st, runs=runs, steps=steps, names=n_names, sweep_name="query-store")
    fill_s = time.perf_counter() - t0
    names = metric_names(n_names)
    pick = run_ids[:10]
    few = names[:3]
    out: dict[str, Any] = {"fill_rows_per_s": runs * steps * n_names / fill_s, "fill_s": fill_s}
    out["ms_30"], pts30 = timed(lambda: st.series(pick, few, max_points=500), repeats)
    out["ms_300"], pts300 = timed(lambda: st.series(pick, names, max_points=500), repeats)
    out["points_30"], out["points_300"] = len(pts30), len(pts300)
    # What bounds it: the downsampling SQL alone (rows fetched, no Point objects) and a
    # plain fetch of every raw row of the same 30 series.
    ids = [st._name_ids[n] for n in few]
    params = {"run_ids": pick, "name_ids": ids, "max_points": 500, "nb": reads.buckets_for(500)}
    raw = text(
        "SELECT run_id, name_id, step, value, flag FROM metrics "
        "WHERE run_id IN :r AND name_id IN :n"
    ).bindparams(bindparam("r", expanding=True), bindparam("n", expanding=True))
    with st.engine.connect() as conn:
        sql = reads.series_sql(st.dialect)
        out["ms_30_sql_only"], _ = timed(lambda: conn.execute(sql, params).fetchall(), repeats)
        out["ms_30_raw_rows"], rows = timed(
            lambda: conn.execute(raw, {"r": pick, "n": ids}).fetchall(), repeats
        )
        out["raw_rows_30"] = len(rows)
    out["ms_latest"], _ = timed(lambda: st.latest(run_ids, few), repeats)
    return out


FIGURES = (
    "ingest_1",
    "ingest_10",
    "fill_rows_per_s",
    "ms_30",
    "ms_30_sql_only",
    "ms_30_raw_rows",
    "ms_300",
    "ms_latest",
    "points_30",
    "points_300",
)


def bench_backend(
    ingest_url: str,
    query_url: str,
    ing: tuple[int, int, int],
    qs: tuple[int, int, int],
    repeats: int,
) -> dict[str, Any]:
    """Every figure on one backend: ingest into one store, queries over another."""
    r: dict[str, Any] = {}
    with open_store(ingest_url) as st:
        r["version"] = _version(st)
        for per_call in (1, 10):
            r[f"ingest_{per_call}"] = ingest(st, *ing, per_call=per_call)
            print(
                f"  ingest, {per_call} step(s)/call: {r[f'ingest_{per_call}']:,.0f} rows/s",
                flush=True,
            )
        for per_call in (1, 10):
            r[f"profile_{per_call}"] = profile_ingest(st, ing[1], ing[2], per_call)
            print(f"  profile, {per_call} step(s)/call: {r[f'profile_{per_call}']}", flush=True)
    with open_store(query_url) as st:
        r.update(query_bench(st, *qs, repeats=repeats))
    for k in FIGURES[2:]:
        print(f"  {k}: {r[k]:,.1f}", flush=True)
    return r


def _unlink_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shape (seconds, not minutes)")
    ap.add_argument("--keep", type=Path, help="write the SQLite query store here and keep it")
    ap.add_argument(
        "--pg-admin",
        default="postgresql://root@127.0.0.1:5432/test",
        help="PostgreSQL database to create the bench databases from",
    )
    ap.add_argument("--no-pg", action="store_true", help="SQLite only")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    # (runs, steps, names)
    ing, qs = ((5, 20, 1000), (10, 600, 30)) if args.quick else ((10, 100, 1000), (100, 1000, 30))
    cmd = " ".join([".venv/bin/python", "bench/store_bench.py", *map(shlex.quote, sys.argv[1:])])
    results: dict[str, dict[str, Any]] = {}

    tag = uuid.uuid4().hex[:6]
    ingest_path = Path(f"/tmp/gapwatch_store_bench_ingest_{tag}.db")
    query_path = args.keep or Path(f"/tmp/gapwatch_store_bench_query_{tag}.db")
    _unlink_sqlite(ingest_path)
    _unlink_sqlite(query_path)
    try:
        print("== SQLite", flush=True)
        results["SQLite"] = bench_backend(
            f"sqlite:///{ingest_path}", f"sqlite:///{query_path}", ing, qs, args.repeats
        )
    finally:
        _unlink_sqlite(ingest_path)
        if args.keep is None:
            _unlink_sqlite(query_path)
    if args.keep:
        print(f"kept the {qs[0]} x {qs[1]} x {qs[2]} SQLite store at {args.keep}")
    if not args.no_pg:
        with pg_database(args.pg_admin) as ingest_url, pg_database(args.pg_admin) as query_url:
            if ingest_url is not None and query_url is not None:
                print("== PostgreSQL", flush=True)
                results["PostgreSQL"] = bench_backend(ingest_url, query_url, ing, qs, args.repeats)
    _write_md(results, cmd, ing, qs, args)
    return 0


def _version(st: Store) -> str:
    with st.engine.connect() as conn:
        if st.dialect == "sqlite":
            return "SQLite " + str(conn.exec_driver_sql("select sqlite_version()").scalar())
        return "PostgreSQL " + str(conn.exec_driver_sql("show server_version").scalar()).split()[0]


def _write_md(
    results: dict[str, dict[str, Any]],
    cmd: str,
    ing: tuple[int, int, int],
    qs: tuple[int, int, int],
    args: argparse.Namespace,
) -> None:
    ing_rows = ing[0] * ing[1] * ing[2]
    q_rows = qs[0] * qs[1] * qs[2]
    ok = lambda good: "meets" if good else "**misses**"  # noqa: E731
    lines = [
        "## Store (bench/store_bench.py)" + (" -- quick shape" if args.quick else ""),
        "",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
        f"- machine: {machine()}",
        f"- load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        " (the machine was shared; rerun on a quiet machine for final figures)",
        f"- command: `{cmd}`",
        f"- ingest shape: {ing[0]} runs x {ing[1]} steps x {ing[2]} names = {ing_rows:,} rows "
        "through `Store.write_steps` (values built before timing)",
        f"- query store: {qs[0]} runs x {qs[1]} steps x {qs[2]} metrics = {q_rows:,} rows "
        "(`store.synth.fill`, 50 steps/call); series of 10 runs, `max_points=500`, "
        f"median of {args.repeats} after a warm-up",
        "",
        "| figure | backend | measured | target | |",
        "|---|---|---|---|---|",
    ]
    targets = {"SQLite": 200_000, "PostgreSQL": 100_000}
    for label, r in results.items():
        lines.append(
            f"| ingest rows/s, 1 step per call ({ing[2]} rows/txn) | {r['version']} | "
            f"{r['ingest_1']:,.0f} | >= {targets[label]:,} | {ok(r['ingest_1'] >= targets[label])} |"
        )
        lines.append(
            f"| ingest rows/s, 10 steps per call | {r['version']} | "
            f"{r['ingest_10']:,.0f} | >= {targets[label]:,} | {ok(r['ingest_10'] >= targets[label])} |"
        )
    for r in results.values():
        lines.append(
            f"| series: 30 series (10 runs x 3 metrics) -> {r['points_30']:,} points, median ms | "
            f"{r['version']} | {r['ms_30']:.1f} | <= 200 | {ok(r['ms_30'] <= 200)} |"
        )
        lines.append(
            f"| series: 300 series (10 runs x 30 metrics) -> {r['points_300']:,} points, median ms | "
            f"{r['version']} | {r['ms_300']:.1f} | none (10x the issue's 30 series) | |"
        )
    lines += ["", "Context (no target):", ""]
    for label, r in results.items():
        lines.append(
            f"- {label}: filling the query store through `write_steps` ran at "
            f"{r['fill_rows_per_s']:,.0f} rows/s ({r['fill_s']:.1f} s). For the 30 series: "
            f"the downsampling SQL alone (rows fetched, no Point objects) took "
            f"{r['ms_30_sql_only']:.1f} ms; fetching all {r['raw_rows_30']:,} raw rows "
            f"undownsampled took {r['ms_30_raw_rows']:.1f} ms. `latest` of 3 metrics over "
            f"all {qs[0]} runs: {r['ms_latest']:.1f} ms."
        )
    lines += ["", "What bounds the ingest (cProfile own time of one run's ingest, by layer):", ""]
    for label, r in results.items():
        parts = "; ".join(
            f"{n} step{'s' if n > 1 else ''}/call: "
            + ", ".join(f"{k} {v:.0%}" for k, v in r[f"profile_{n}"].items())
            for n in (1, 10)
        )
        lines.append(f"- {label}: {parts}.")
    lines += [
        "",
        "The metrics primary key is (run, name, step), the order the series reads want; one "
        "step of N names therefore dirties about one leaf page per name, so a commit per "
        "step rewrites those pages every time and batching steps shares them.",
    ]
    # a quick run never overwrites the full-shape fragment BENCHMARKS.md is built from
    out = RESULTS.with_name("store_bench_quick.md") if args.quick else RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(main())
