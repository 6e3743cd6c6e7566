"""Benchmark of the one-run pipeline: replay at scale, the Monitor's memory, the driver's cost.

    .venv/bin/python bench/pipeline_bench.py [--steps 100000] [--trials 100] [--before e5c16cb]
    .venv/bin/python bench/pipeline_bench.py --parts scale,outage [--scale-trials 1000]

Five parts, each measured here, nothing typed in:

1. **Replay** (``gapwatch replay LOG --control LOG --json`` as a subprocess): wall time and
   peak RSS on a synthetic ``--steps``-step log and its control, every rule fed. "Before"
   is the same command run from the commit ``--before`` (the last one before the
   incremental watcher; checked out with ``git worktree``) on shorter logs, since it
   re-read the whole history at every step (quadratic); its figure at ``--steps`` is a
   projection from the fitted exponent, labelled as such.
2. **Monitor memory per trial**: a control and a treatment fed to the Monitor (the Tune
   Stopper) for 1,000 and 10,000 steps of the worker's full metric set; bytes held
   (tracemalloc), now and before.
3. **Driver cost at scale**: ``--trials`` concurrent synthetic trials on local Ray
   (fractional CPUs) through the real sweep (Tuner, Monitor, Recorder, SQLite store),
   each reporting the worker's full metric set and both distributions every
   ``--interval`` seconds (figures computed by ``correction.diagnostics`` on synthetic
   log-probs; no model). Treatments collapse at a known step. Reported: the Monitor's and
   the Recorder's time per result, the store's rows/s while under that load, the delay
   from a result leaving its trial to its stop decision, and the driver's whole CPU time
   per result (Tune included), to say what bounds the driver. ``--writer`` picks the
   Recorder's writer (``thread``, or ``inline``: the synchronous path before issue 21).
4. **One driver core for 1,000 trials** (``bench/driver_sim.py``): ``--scale-trials``
   synthetic trials reporting every ``--scale-interval`` s, fed to the Monitor and the
   Recorder on ONE pinned core as Tune's controller feeds them, on SQLite and on
   PostgreSQL (a private server, or ``--pg-url``), with each writer of ``--writers``
   (inline = before, thread = after): driver cost per result (median, p95), delay from a
   result to its stop decision (median, max), the store's rows/s.
5. **Store outages** (same driver, thread writer): a private PostgreSQL server stopped
   for ``--outage-s`` s mid-run and started again; the SQLite file held by another
   process's exclusive transaction as long. Steps lost and written twice, and the lines
   the Recorder printed.

Writes bench/results/pipeline_bench.md.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import machine  # noqa: E402  (bench/ is on sys.path as a script)

from gapwatch.correction import names as N  # noqa: E402

OUT = ROOT / "bench" / "results" / "pipeline_bench.md"
SCALE_OUT = ROOT / "bench" / "results" / "pipeline_bench-scale.md"
"""Where parts 4 and 5 alone write (so they do not replace parts 1-3's figures);
bench/run_all.py collects it after pipeline_bench.md."""
RULE_FED = [
    N.SCORE_MEAN, N.SCORE_MIN, N.SCORE_MAX, N.ZERO_ADV_FRAC, N.RESPONSE_LENGTH_MEAN,
    N.RESPONSE_BUDGET, N.CLIP_RATIO, N.PROBS_DIFF_MEAN, N.ABS_LOG_RATIO_MEAN,
    N.tail("text", "p95"), N.tail("post_tool", "p95"), N.ess("post_tool"),
]  # fmt: skip
"""Every figure some rule reads."""


# --- synthetic steps -------------------------------------------------------------------


def step_pool(variants: int = 8) -> list[tuple[dict[str, float], dict[str, Any]]]:
    """Full metric sets and distribution payloads as the worker reports them: the real
    diagnostics and a real correction strategy over synthetic log-probs (B=64, T=24)."""
    import torch

    from gapwatch.correction import diagnostics, strategies

    gen = torch.Generator().manual_seed(0)
    pool = []
    for v in range(variants):
        ls = -torch.rand(64, 24, generator=gen) * 3
        lt = ls + torch.randn(64, 24, generator=gen) * (0.01 + 0.1 * v)
        m = torch.rand(64, 24, generator=gen) > 0.2
        post = torch.arange(64) % 2 == 1
        figs, sk = diagnostics.analyze(lt, ls, m, post_tool=post)
        figs.update(strategies.get("tis")(lt, ls, m)[1])
        ep = {n: 0.3 for n in (N.SCORE_MEAN, N.SCORE_STD, N.ZERO_ADV_FRAC, N.SUCCESS_RATE)}
        ep |= {N.SCORE_MIN: -0.1, N.SCORE_MAX: 1.0, N.RESPONSE_LENGTH_MEAN: 30.0}
        ep |= {N.RESPONSE_LENGTH_MAX: 48.0, N.CLIP_RATIO: 0.0, N.RESPONSE_BUDGET: 48.0}
        ep |= {N.NUM_TURNS: 2.0, N.PARSE_FAIL_FRAC: 0.05, N.TOOL_CALLS: 1.0}
        ep |= {N.ENTROPY: 0.8, N.PG_LOSS: 0.01, N.PG_CLIPFRAC: 0.1, N.GRAD_NORM: 0.5}
        ep |= {N.KL_TO_REF: 0.01, N.STEP_TIME: 1.0, N.TOKENS_PER_S: 1000.0}
        pool.append(({**figs, **ep}, diagnostics.payloads(sk)))
    return pool


def synthetic_row(step: int, collapse_at: int | None, rng: random.Random) -> dict[str, float]:
    """A step of every rule-fed figure: healthy noise, or a collapse from ``collapse_at``."""
    bad = collapse_at is not None and step >= collapse_at
    return {
        N.SCORE_MEAN: -0.1 if bad else 0.4 + rng.gauss(0, 0.05),
        N.SCORE_MIN: -0.1, N.SCORE_MAX: -0.1 if bad else 1.0,
        N.ZERO_ADV_FRAC: 1.0 if bad else 0.3, N.RESPONSE_LENGTH_MEAN: 47.0 if bad else 30.0,
        N.RESPONSE_BUDGET: 48.0, N.CLIP_RATIO: 0.9 if bad else 0.0,
        N.PROBS_DIFF_MEAN: 0.6 if collapse_at else 0.001, N.ABS_LOG_RATIO_MEAN: 0.7,
        N.tail("text", "p95"): 0.05, N.tail("post_tool", "p95"): 0.06,
        N.ess("post_tool"): 0.8 + rng.gauss(0, 0.02),
    }  # fmt: skip


def write_log(path: Path, steps: int, collapse_at: int | None) -> None:
    rng = random.Random(1)
    with path.open("w") as fh:
        for s in range(1, steps + 1):
            fh.write(json.dumps({"step": s, **synthetic_row(s, collapse_at, rng)}) + "\n")


# --- 1. replay ---------------------------------------------------------------------------


def timed(cmd: list[str], cwd: Path = ROOT) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB, stdout) of one subprocess run in ``cwd`` (whose packages it
    imports first), from its own rusage (wait4)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=cwd)
        assert p.stdout is not None
        out = p.stdout.read().decode()
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed: {err.read().decode().strip()[-500:]}")
    return wall, usage.ru_maxrss / 1024, out


def replay_cmd(pyexe: str, log: Path, ctl: Path) -> list[str]:
    return [
        pyexe,
        "-m",
        "gapwatch.orchestrator.cli",
        "replay",
        str(log),
        "--control",
        str(ctl),
        "--json",
    ]


def bench_replay(steps: int, before: str | None, work: Path) -> list[str]:
    lines = ["### 1. Replay", ""]
    log, ctl = work / "run.jsonl", work / "control.jsonl"
    write_log(log, steps, collapse_at=steps - 20)
    write_log(ctl, steps, collapse_at=None)
    mb = (log.stat().st_size + ctl.stat().st_size) / 2**20
    wall, rss, out = timed(replay_cmd(sys.executable, log, ctl))
    verdict = json.loads(out)
    print(
        f"[replay] after: {steps} steps {wall:.2f} s, {rss:.0f} MiB; {verdict['rule']} @ {verdict['step']}"
    )
    lines += [
        f"Logs: {steps:,} steps each (run and control, {len(RULE_FED)} figures per step, every "
        f"rule fed; {mb:.0f} MiB together); the run collapses 20 steps before its end. "
        f"Verdict: {verdict['rule']} at step {verdict['step']}.",
        "",
        "| code | steps | wall s | peak RSS MiB | target |",
        "|---|---|---|---|---|",
        f"| now (streamed logs, one watcher) | {steps:,} | {wall:.2f} | {rss:.0f} | <= 10 s, <= 200 MB: "
        f"{'met' if wall <= 10 and rss <= 200 else 'NOT met'} |",
    ]
    old = checkout(before, work) if before else None
    if old is None:
        lines += ["", "Before: not measured (no git checkout of the earlier commit)."]
        return lines
    pts = []
    for n in (1000, 2000, 4000):
        lo, co = work / f"old-{n}.jsonl", work / f"old-ctl-{n}.jsonl"
        write_log(lo, n, collapse_at=n - 20)
        write_log(co, n, collapse_at=None)
        w, r, _ = timed(replay_cmd(sys.executable, lo, co), cwd=old)
        print(f"[replay] before ({before}): {n} steps {w:.2f} s, {r:.0f} MiB")
        pts.append((n, w, r))
        lines.append(f"| before ({before}: whole history per step) | {n:,} | {w:.2f} | {r:.0f} | |")
    (n1, w1, r1), (n2, w2, r2) = pts[-2], pts[-1]
    k = math.log(w2 / w1) / math.log(n2 / n1)
    proj = w2 * (steps / n2) ** k
    proj_rss = r2 + (r2 - r1) / (n2 - n1) * (steps - n2)
    lines += [
        f"| before, projected (time ~ steps^{k:.2f}, RSS linear, from the last two) | "
        f"{steps:,} | ~{proj:,.0f} (not run) | ~{proj_rss:,.0f} (not run) | |",
    ]
    return lines


def checkout(commit: str, work: Path) -> Path | None:
    dest = work / f"tree-{commit}"
    res = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(dest), commit],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return dest if res.returncode == 0 else None


def drop_checkout(path: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                   capture_output=True, check=False)  # fmt: skip


# --- 2. Monitor memory -------------------------------------------------------------------

MONITOR_PROBE = r"""
import gc, json, sys, tracemalloc
steps, old = int(sys.argv[1]), sys.argv[2] == "old"
pool = json.loads(open(sys.argv[3]).read())
K, S, M = "gw_trial", "gw_step", "gw_metrics"
if old:
    from gapwatch.orchestrator.tune_parts import Monitor, SweepState, TrialRow
    state = SweepState(rows={"t": TrialRow(spec={"control_key": "c"}), "c": TrialRow(spec={})})
    make = lambda: Monitor({}, state, None)
else:
    from gapwatch.orchestrator import rules
    from gapwatch.orchestrator.sweep.monitor import Monitor
    specs = [{"trial_key": "c", "control_key": None}, {"trial_key": "t", "control_key": "c"}]
    make = lambda: Monitor(rules.build({}), specs, None)
gc.collect(); tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
mon = make()
for s in range(1, steps + 1):
    for key in ("c", "t"):
        m = dict(pool[s % len(pool)]); m["critic/score/mean"] = 0.4
        mon("x", {K: key, S: s, M: m})
gc.collect()
print(json.dumps({"bytes": tracemalloc.get_traced_memory()[0] - base}))
"""


def monitor_bytes(steps: int, old_tree: Path | None, pool_file: Path) -> float:
    flag = "old" if old_tree else "new"
    cmd = [sys.executable, "-c", MONITOR_PROBE, str(steps), flag, str(pool_file)]
    out = timed(cmd, cwd=old_tree or ROOT)[2]
    return float(json.loads(out.strip().splitlines()[-1])["bytes"])


def bench_monitor(before: str | None, work: Path) -> list[str]:
    pool = [figs for figs, _ in step_pool(4)]
    pool_file = work / "pool.json"
    pool_file.write_text(json.dumps(pool))
    lines = ["### 2. Monitor memory per trial", "",
             "A control and a treatment, every step the worker's full metric set "
             f"({len(pool[0])} figures); bytes the Monitor holds (tracemalloc), per trial.",
             "", "| code | steps | KiB per trial |", "|---|---|---|"]  # fmt: skip
    for n in (1000, 10000):
        b = monitor_bytes(n, None, pool_file) / 2 / 1024
        print(f"[monitor] now: {n} steps {b:.1f} KiB/trial")
        lines.append(f"| now (one watcher per trial) | {n:,} | {b:.1f} |")
    old = work / f"tree-{before}" if before else None
    if old is not None and old.exists():
        for n in (500, 2000):
            b = monitor_bytes(n, old, pool_file) / 2 / 1024
            print(f"[monitor] before: {n} steps {b:.1f} KiB/trial")
            lines.append(f"| before ({before}: whole histories) | {n:,} | {b:.1f} |")
    return lines


# --- 3. driver cost at scale -----------------------------------------------------------


def synthetic_trainable(
    config: dict[str, Any], *, pool: list[Any], steps: int, interval: float
) -> None:
    """A trial that reports the worker's full figures every ``interval`` s, no model."""
    from ray import tune

    from gapwatch.orchestrator.sweep.trainable import pack

    spec = config["spec"]
    key, role = spec["trial_key"], spec["role"]
    seed = int(spec["seed"])
    collapse_at = None if role == "control" else 5 + (seed * 7 + len(key)) % (steps - 10)
    rng = random.Random(hash(key) & 0xFFFF)

    class Res:
        def __init__(self, step: int) -> None:
            figs, dists = pool[step % len(pool)]
            self.step = step
            self.metrics = {
                **figs,
                **synthetic_row(step, collapse_at, rng),
                "bench/sent_at": time.time(),
            }
            self.distributions = dists

    t_next = time.monotonic()
    for s in range(1, steps + 1):
        t_next += interval
        time.sleep(max(0.0, t_next - time.monotonic()))
        tune.report(pack(key, Res(s)))


class Clock:
    """Seconds spent inside wrapped methods, and calls."""

    def __init__(self) -> None:
        self.s: dict[str, float] = {}
        self.n: dict[str, int] = {}

    def wrap(self, cls: Any, name: str, tag: str) -> None:
        fn = getattr(cls, name)

        @functools.wraps(fn)
        def timed_fn(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.s[tag] = self.s.get(tag, 0.0) + time.perf_counter() - t0
                self.n[tag] = self.n.get(tag, 0) + 1

        setattr(cls, name, timed_fn)


def bench_driver(trials: int, steps: int, interval: float, work: Path, writer: str) -> list[str]:
    from gapwatch.orchestrator.sweep.config import parse_sweep_config
    from gapwatch.orchestrator.sweep.driver import execute_sweep
    from gapwatch.orchestrator.sweep.monitor import Monitor
    from gapwatch.orchestrator.sweep.recorder import Recorder
    from gapwatch.store import Store

    # the sweep builds its own Recorder: its writer is chosen through the default
    assert Recorder.__init__.__kwdefaults__ is not None
    Recorder.__init__.__kwdefaults__["writer"] = writer

    seeds = max(1, trials // 5)
    cfg = {
        "name": "driver-bench", "seeds": list(range(seeds)), "steps": steps,
        "compression": [{"codec": "quant", "bits": 2}],
        "correction": ["none", "tis", "icepop", "seq_mis"],
        "resources": {"cpus": round(1.8 / (seeds * 5), 4)},
    }  # fmt: skip
    sweep = parse_sweep_config(cfg)
    clock = Clock()
    for hook in ("on_trial_start", "on_trial_result", "on_step_end", "on_trial_complete",
                 "on_trial_error", "on_experiment_end"):  # fmt: skip
        clock.wrap(Recorder, hook, "recorder")
        clock.wrap(Recorder, hook, hook)
    clock.wrap(Store, "write_batch", "store")
    delays: list[float] = []
    rows_written = [0]
    call = Monitor.__call__

    def monitored(self: Monitor, trial_id: str, result: dict[str, Any]) -> bool:
        t0 = time.perf_counter()
        stop = call(self, trial_id, result)
        clock.s["monitor"] = clock.s.get("monitor", 0.0) + time.perf_counter() - t0
        clock.n["monitor"] = clock.n.get("monitor", 0) + 1
        if stop:
            delays.append(time.time() - result["gw_metrics"]["bench/sent_at"])
        return stop

    Monitor.__call__ = monitored  # type: ignore[method-assign]
    write = Store.write_batch

    def counted(self: Store, steps_: Any, decisions: Any = ()) -> int:
        n = write(self, steps_, decisions)
        rows_written[0] += n
        return n

    Store.write_batch = counted  # type: ignore[method-assign]
    train_fn = functools.partial(
        synthetic_trainable, pool=step_pool(), steps=steps, interval=interval
    )
    cpu0, t0 = time.process_time(), time.perf_counter()
    out = execute_sweep(sweep, db_url=f"sqlite:///{work}/driver.db", address=None,
                        resume=False, storage=work / "ray", live=False, train_fn=train_fn)  # fmt: skip
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    results = clock.n.get("monitor", 0)
    per = {
        k: 1000 * clock.s.get(k, 0.0) / max(results, 1) for k in ("monitor", "recorder", "store")
    }
    stopped = sum(1 for ln in out.lines if ln.status == "stopped")
    treat = sum(1 for ln in out.lines if ln.role == "treatment")
    controls_stopped = sum(1 for ln in out.lines if ln.role == "control" and ln.status == "stopped")
    rate = rows_written[0] / max(clock.s.get("store", 1e-9), 1e-9)
    ours = per["monitor"] + per["recorder"]
    print({k: round(1000 * v / max(clock.n.get(k, 1), 1), 3) for k, v in clock.s.items()}, clock.n)
    print(f"[driver] {len(sweep.trials)} trials, {results} results in {wall:.0f} s; "
          f"monitor {per['monitor']:.2f} ms, recorder {per['recorder']:.2f} ms per result")  # fmt: skip
    d = sorted(delays)
    return [
        "### 3. Driver cost at scale",
        "",
        f"{len(sweep.trials)} trials at once on local Ray ({cfg['resources']['cpus']} CPU each), "
        f"{steps} steps each, a report every {interval:g} s per trial with the worker's full "
        f"metric set and both |log-ratio| distributions; SQLite store, {writer} writer; "
        f"{results:,} results in "
        f"{wall:.0f} s ({results / wall:.0f}/s). Treatments collapse at known steps; "
        f"{stopped} of {treat} stopped, controls stopped: {controls_stopped}.",
        "",
        "| figure | measured | target |",
        "|---|---|---|",
        f"| Monitor (rules) time per result | {per['monitor']:.3f} ms | |",
        f"| Recorder time per result (buffering + batched writes) | {per['recorder']:.3f} ms | |",
        f"| Monitor + Recorder per result | {ours:.3f} ms | <= 2 ms: {'met' if ours <= 2 else 'NOT met'} |",
        f"| of which the store's write_batch | {per['store']:.3f} ms | |",
        f"| store ingest under this load | {rate:,.0f} rows/s ({rows_written[0]:,} rows) | |",
        f"| delay from a result leaving its trial to its stop decision, median / max | "
        f"{1000 * statistics.median(d):.0f} / {1000 * d[-1]:.0f} ms ({len(d)} stops) | |"
        if d
        else "| delay to stop decision | no stop happened | |",
        f"| driver process CPU per result, everything (Tune included) | "
        f"{1000 * cpu / max(results, 1):.2f} ms | |",
        "",
        f"What bounds the driver: of its {1000 * cpu / max(results, 1):.2f} ms of CPU per result, "
        f"the Monitor and Recorder take {ours:.2f} ms; the rest is Ray Tune's own result "
        "handling (and Ray's driver threads).",
    ]


# --- 4 and 5. one driver core, and store outages ----------------------------------------


def _stores(kinds: list[str], pg_url: str | None, work: Path) -> tuple[dict[str, Any], Any]:
    """A fresh store URL per kind (the private PostgreSQL server, if one is started)."""
    urls: dict[str, Any] = {}
    pg = None
    for kind in kinds:
        if kind == "sqlite":
            urls[kind] = lambda tag: f"sqlite:///{work}/{tag}.db"
        elif pg_url is not None:
            urls[kind] = lambda tag: pg_url
        else:
            from tests.orchestrator.pg_server import PrivatePostgres

            why = PrivatePostgres.available()
            if why is not None:
                raise SystemExit(f"cannot start a private PostgreSQL server: {why}; pass --pg-url")
            pg = PrivatePostgres().init()
            urls[kind] = lambda tag, url=pg.url: url
    return urls, pg


def bench_scale(args: argparse.Namespace, work: Path) -> list[str]:
    from driver_sim import HEADER, simulate

    kinds = args.stores.split(",")
    urls, pg = _stores(kinds, args.pg_url, work)
    pool = step_pool()
    lines = [
        "### 4. One driver core: Monitor + Recorder at scale (bench/driver_sim.py)", "",
        f"{args.scale_trials:,} synthetic trials ({args.scale_trials // 5} seeds x a control "
        f"and 4 treatments), {args.scale_steps} steps each, a report every "
        f"{args.scale_interval:g} s per trial (phases spread), the worker's full figure set "
        f"({len(pool[0][0])} figures) and both distributions per result; the driver process "
        "pinned to ONE core (its writer thread and SQLite with it; PostgreSQL is a server "
        "of its own). Treatments collapse at known steps. inline = the synchronous write "
        "path before issue 21, thread = the writer thread.", "",
        *HEADER,
    ]  # fmt: skip
    try:
        for kind in kinds:
            for writer in args.writers.split(","):
                gc.collect()
                r = simulate(urls[kind](f"scale-{writer}"), trials=args.scale_trials,
                             steps=args.scale_steps, interval=args.scale_interval,
                             writer=writer, pool=pool, row_fn=synthetic_row, work=work)  # fmt: skip
                lines.append(r.row(f"{kind}, {writer}"))
                print(f"[scale] {lines[-1]}")
                if r.lines:
                    print(f"[scale] lines: {r.lines}")
    finally:
        if pg is not None:
            pg.destroy()
    return lines


def bench_outage(args: argparse.Namespace, work: Path) -> list[str]:
    from driver_sim import HEADER, simulate, sqlite_lock

    kinds = args.stores.split(",")
    urls, pg = _stores(kinds, None, work)
    pool = step_pool()
    steps = math.ceil((args.outage_at + args.outage_s + args.outage_after) / args.scale_interval)
    lines = [
        "### 5. Store outages during a sweep (bench/driver_sim.py)", "",
        f"The driver of part 4 (thread writer), {args.scale_trials:,} trials, {steps} steps "
        f"every {args.scale_interval:g} s; {args.outage_at:g} s in, the store goes away for "
        f"{args.outage_s:g} s: PostgreSQL, a private server stopped (`pg_ctl stop -m fast`) "
        "and started again; SQLite, another process holds the file in an exclusive "
        "transaction, then rolls back. Lost: steps a trial reported that the store lacks "
        "afterwards; twice: steps stored with more rows than one write leaves, and results "
        "the writer committed more than once.", "",
        *HEADER,
    ]  # fmt: skip
    notes: list[str] = []
    rec_kw: dict[str, Any] = {}
    if args.lock_wait_s is not None:
        rec_kw["lock_wait_s"] = args.lock_wait_s
    if args.bound is not None:
        rec_kw["bound"] = args.bound
    try:
        for kind in kinds:
            url = urls[kind]("outage")
            if kind == "sqlite":
                from gapwatch.store import open_store

                open_store(url).close()  # the file exists before another process locks it
                go, back = sqlite_lock(Path(url.removeprefix("sqlite:///")))
            else:
                assert pg is not None
                go, back = pg.stop, pg.start
            r = simulate(url, trials=args.scale_trials, steps=steps,
                         interval=args.scale_interval, writer="thread", pool=pool,
                         row_fn=synthetic_row, work=work,
                         outage=(args.outage_at, args.outage_s, go, back),
                         recorder_kw=rec_kw)  # fmt: skip
            lines.append(r.row(f"{kind}, thread, {args.outage_s:g} s outage"))
            twice = (r.twice or 0) + max(0, (r.commits or 0) - r.results)
            notes.append(
                f"- {kind}: steps lost **{r.lost}**, written twice **{twice}**; "
                f"{r.late} results written late, {r.spilled} writes through the spill file. "
                "Lines printed: "
                + "; ".join(f"`{ln.replace(str(work), '<temp dir>')}`" for ln in r.lines)
            )
            print(f"[outage] {lines[-1]}\n[outage] {notes[-1]}")
    finally:
        if pg is not None:
            pg.destroy()
    return [*lines, "", *notes]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000, help="replay log length")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--trial-steps", type=int, default=60)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--before", default="e5c16cb", help="commit to compare with ('' to skip)")
    ap.add_argument(
        "--parts", default="replay,monitor,driver", help="any of replay,monitor,driver,scale,outage"
    )
    ap.add_argument("--writer", default="thread", help="part 3's Recorder writer")
    ap.add_argument("--scale-trials", type=int, default=1000)
    ap.add_argument("--scale-steps", type=int, default=60)
    ap.add_argument("--scale-interval", type=float, default=2.0)
    ap.add_argument("--stores", default="sqlite,postgresql")
    ap.add_argument("--writers", default="inline,thread", help="part 4: before,after")
    ap.add_argument(
        "--pg-url",
        default=None,
        help="part 4's PostgreSQL (default: a private server; part 5 always "
        "uses one, since it stops it)",
    )
    ap.add_argument("--outage-at", type=float, default=30.0)
    ap.add_argument("--outage-s", type=float, default=60.0)
    ap.add_argument(
        "--outage-after",
        type=float,
        default=60.0,
        help="seconds the run goes on after the store is back",
    )
    ap.add_argument(
        "--lock-wait-s",
        type=float,
        default=None,
        help="part 5: the Recorder's SQLite lock wait (default: its LOCK_WAIT_S)",
    )
    ap.add_argument(
        "--bound",
        type=int,
        default=None,
        help="part 5: writes held in memory before spilling (default: BOUND)",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="the markdown written (default: "
        "pipeline_bench.md, or pipeline_bench-scale.md for parts 4-5 alone)",
    )
    args = ap.parse_args()  # fmt: skip
    parts = set(args.parts.split(","))
    cmd = "python bench/pipeline_bench.py " + " ".join(sys.argv[1:])
    lines = [
        "## One-run pipeline: replay, Monitor memory, driver cost, one driver core, outages "
        "(bench/pipeline_bench.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `{cmd.strip()}`",
        "",
    ]
    work = Path(tempfile.mkdtemp(prefix="gw-pipeline-"))
    try:
        if "replay" in parts:
            lines += bench_replay(args.steps, args.before or None, work) + [""]
        if "monitor" in parts:
            if args.before and not (work / f"tree-{args.before}").exists():
                checkout(args.before, work)
            lines += bench_monitor(args.before or None, work) + [""]
        if "driver" in parts:
            gc.collect()
            lines += bench_driver(args.trials, args.trial_steps, args.interval, work,
                                  args.writer) + [""]  # fmt: skip
        if "scale" in parts:
            lines += bench_scale(args, work) + [""]
        if "outage" in parts:
            lines += bench_outage(args, work) + [""]
    finally:
        for tree in work.glob("tree-*"):
            drop_checkout(tree)
        shutil.rmtree(work, ignore_errors=True)
    out = (
        Path(args.out)
        if args.out
        else (OUT if parts & {"replay", "monitor", "driver"} else SCALE_OUT)
    )
    out.write_text("\n".join(lines).rstrip() + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
