"""Benchmark of ``gapwatch watch`` on a log written live by a real trainer process.

    .venv/bin/python bench/watch_bench.py [--steps 30] [--seed 0]

The trainer is this project's worker (quick preset, the collapsing top-k 5% codec, no
correction) writing each step as verl's file logger does (``{"step", "data"}`` lines,
flushed), plus the wall time it wrote the line. ``gapwatch watch LOG --pid TRAINER``
follows it into a SQLite store as a separate process. This script polls the store every
10 ms and reports, measured here:

- the latency from a line written to its step's row in the store (median, p95, max);
- the time from the stop decision (its ``created`` time in the store) to the trainer's
  process gone (SIGTERM to its process group).

Targets: <= 1 s and <= 5 s. Writes bench/results/watch_bench.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import machine  # noqa: E402  (bench/ is on sys.path as a script)

OUT = ROOT / "bench" / "results" / "watch_bench.md"
TRAINER = r"""
import json, sys, time
from gapwatch.workers import RunConfig, train
from gapwatch.workers.config import QUICK_CODEC
path, steps, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
codec, strength = QUICK_CODEC
cfg = RunConfig.preset("quick", seed=seed, steps=steps, compression=codec,
                       compression_kwargs=strength, num_threads=1)
t0 = time.monotonic()
with open(path, "a") as f:
    for res in train(cfg):
        f.write(json.dumps({"step": res.step, "elapsed_seconds": time.monotonic() - t0,
                            "wall": time.time(), "data": res.metrics}) + "\n")
        f.flush()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from gapwatch.store import open_store
    from gapwatch.workers import RunConfig
    from gapwatch.workers.model import ensure_warm_start

    ensure_warm_start(RunConfig.preset("quick"))  # built (cached) before any timing
    work = Path(tempfile.mkdtemp(prefix="gw-watch-"))
    log, db = work / "metrics.jsonl", f"sqlite:///{work}/watch.db"
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(log), str(args.steps), str(args.seed)],
        cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    gapwatch = str(Path(sys.executable).with_name("gapwatch"))
    watcher = subprocess.Popen(
        [gapwatch, "watch", str(log), "--db", db, "--pid", str(trainer.pid), "--grace", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: dict[int, float] = {}
    gone_at: float | None = None
    st = None
    while watcher.poll() is None or trainer.poll() is None:
        now = time.time()
        if gone_at is None and trainer.poll() is not None:
            gone_at = now
        if st is None and (work / "watch.db").exists():
            try:
                st = open_store(db, read_only=True)
            except Exception:  # noqa: BLE001 - created but not migrated yet: try again
                st = None
        if st is not None:
            for run in st.runs():
                for s in range(1, (run.last_step or 0) + 1):
                    seen.setdefault(s, now)
        time.sleep(0.01)
    if gone_at is None:
        gone_at = time.time()
    out = watcher.stdout.read() if watcher.stdout else ""
    print(out)
    written = {}
    for line in log.read_text().splitlines():
        obj = json.loads(line)
        written[int(obj["step"])] = float(obj["wall"])
    lat = sorted(seen[s] - written[s] for s in written if s in seen)
    st = open_store(db, read_only=True)
    (run,) = st.runs()
    stops = [d for d in st.decisions(run_id=run.id) if d.action == "stop"]
    decided = stops[0].created.timestamp() if stops else None
    kill_s = None if decided is None else gone_at - decided
    p95 = lat[min(len(lat) - 1, int(round(0.95 * (len(lat) - 1))))] if lat else float("nan")
    lines = [
        "## gapwatch watch: a live trainer's log into the store, and the stop (bench/watch_bench.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- command: `python bench/watch_bench.py --steps {args.steps} --seed {args.seed}`",
        "- trainer: the built-in worker, quick preset, top-k 5% codec, no correction, writing "
        "verl file-logger lines; `gapwatch watch LOG --pid TRAINER` in its own process, "
        "polling the log every 0.1 s; the store polled here every 10 ms",
        "",
        "| figure | measured | target |",
        "|---|---|---|",
        f"| line written -> its row in the store, median | {1000 * statistics.median(lat):.0f} ms "
        f"({len(lat)} steps) | <= 1 s |" if lat else "| latency | no step seen | |",
        f"| same, p95 / max | {1000 * p95:.0f} / {1000 * lat[-1]:.0f} ms | <= 1 s |" if lat else "",
        f"| stop decision -> trainer process gone | {kill_s:.2f} s | <= 5 s |"
        if kill_s is not None else "| stop decision | no rule stopped the run | |",
        "",
        f"Run: {run.status}" + (f", stopped by {run.stop_rule} at step {run.stop_step}"
                                 if run.stop_rule else "") + f"; {run.last_step} steps stored.",
    ]  # fmt: skip
    OUT.write_text("\n".join(ln for ln in lines if ln is not None) + "\n")
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
