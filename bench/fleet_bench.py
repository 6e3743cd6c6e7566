"""Cost of one ``gapwatch watch`` process following a fleet of growing logs.

    .venv/bin/python bench/fleet_bench.py [--logs 200] [--seconds 60] [--max-open 128]

This script writes ``--logs`` logs (``runs/<i>-s<i>/metrics.jsonl``, verl's file-logger
lines replayed from ``examples/logs/seed_dense.verl.jsonl``, so no rule stops them), each
growing by one step per second, staggered over the second, for ``--seconds`` s; one
``gapwatch watch 'runs/*/metrics.jsonl' --layout ...`` process follows them all into a
SQLite store (every rule at its defaults, ``--max-open`` files held open). Measured here:

- the watcher's CPU (user + system seconds over the writing window, as a share of one
  core) and its peak resident memory (``/proc/<pid>/status`` VmHWM);
- the delay from a line written to its step stored (the store's ``last_step`` per run,
  polled every 50 ms from this process: the figure includes up to 50 ms of that
  polling), median, p95 and max;
- steps written vs stored.

The writer and the store poller run in this process, on the same cores as the watcher:
on a 2-core machine the figures are an upper bound. Writes bench/results/fleet_bench.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _machine import machine  # noqa: E402

from gapwatch.store import open_store  # noqa: E402

OUT = ROOT / "bench" / "results" / "fleet_bench.md"
HISTORY = ROOT / "examples" / "logs" / "seed_dense.verl.jsonl"
GAPWATCH = Path(sys.executable).with_name("gapwatch")


def _proc(pid: int) -> tuple[float, int]:
    """(user + system CPU seconds, peak RSS in KiB) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = 100.0  # SC_CLK_TCK on Linux
    cpu = (int(fields[11]) + int(fields[12])) / tick
    hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return cpu, hwm


def _line(lines: list[str], step: int) -> str:
    """Step ``step`` of the dense history (cycled), renumbered."""
    text = lines[(step - 1) % len(lines)]
    return '{"step": ' + str(step) + text[text.index(",") :]


def bench(n_logs: int, seconds: int, max_open: int) -> dict[str, float]:
    lines = HISTORY.read_text().splitlines(keepends=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        logs = [root / f"runs/{i}-s{i}/metrics.jsonl" for i in range(n_logs)]
        for p in logs:
            p.parent.mkdir(parents=True)
            p.write_text(_line(lines, 1))
        written: dict[tuple[int, int], float] = {(i, 1): time.time() for i in range(n_logs)}
        db = f"sqlite:///{root}/fleet.db"
        watcher = subprocess.Popen(
            [str(GAPWATCH), "watch", "runs/*/metrics.jsonl", "--db", db, "--sweep", "bench",
             "--layout", "runs/{job}-s{seed}/metrics.jsonl", "--idle", "5", "--rescan", "2",
             "--max-open", str(max_open)],
            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        seen: dict[tuple[int, int], float] = {}
        done = threading.Event()

        def poll_store() -> None:
            st = None
            last: dict[int, int] = {}
            while not done.is_set():
                time.sleep(0.05)
                try:
                    st = st or open_store(db, read_only=True)
                    rows = st.runs()
                except Exception:  # the store is not there yet
                    continue
                now = time.time()
                for r in rows:
                    i = int(r.trial_id.split("-", 1)[0])
                    top = r.last_step or 0
                    for s in range(last.get(i, 0) + 1, top + 1):
                        seen[(i, s)] = now
                    last[i] = max(last.get(i, 0), top)

        poller = threading.Thread(target=poll_store, daemon=True)
        poller.start()
        time.sleep(3.0)  # the watcher starts and finds the logs
        cpu0, _ = _proc(watcher.pid)
        t0 = time.monotonic()
        for step in range(2, seconds + 2):
            for i, p in enumerate(logs):
                due = t0 + (step - 2) + i / n_logs
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                with p.open("a") as fh:
                    fh.write(_line(lines, step))
                written[(i, step)] = time.time()
        cpu1, hwm = _proc(watcher.pid)
        window = time.monotonic() - t0
        out, _ = watcher.communicate(timeout=120)
        time.sleep(0.3)
        done.set()
        poller.join()
        delays = sorted(seen[k] - t for k, t in written.items() if k in seen and k[1] > 1)
        if not delays:
            raise SystemExit(f"nothing was stored; the watcher said:\n{out}")
        return {
            "logs": n_logs,
            "seconds": seconds,
            "max_open": max_open,
            "cpu_share": (cpu1 - cpu0) / window,
            "peak_rss_mib": hwm / 1024,
            "written": len(written),
            "stored": len(seen),
            "median_s": statistics.median(delays),
            "p95_s": delays[int(0.95 * (len(delays) - 1))],
            "max_s": delays[-1],
            "exit": float(watcher.returncode),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--max-open", type=int, default=128)
    ap.add_argument("--no-write", action="store_true", help="print, do not write the results")
    a = ap.parse_args()
    r = bench(a.logs, a.seconds, a.max_open)
    text = (
        "## Fleet watch cost (bench/fleet_bench.py)\n\n"
        f"`bench/fleet_bench.py --logs {a.logs} --seconds {a.seconds} --max-open {a.max_open}`, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {machine()}.\n\n"
        f"One `gapwatch watch` process over {a.logs} verl file-logger logs, each growing by "
        f"one step per second for {a.seconds} s (SQLite store, every rule at its defaults, "
        f"at most {a.max_open} files open). The writer and the store poller share the cores.\n\n"
        "| figure | value |\n|---|---|\n"
        f"| watcher CPU (share of one core, over the writing window) | {r['cpu_share']:.2f} |\n"
        f"| watcher peak resident memory | {r['peak_rss_mib']:.0f} MiB |\n"
        f"| line written -> step stored, median | {r['median_s']:.2f} s |\n"
        f"| line written -> step stored, p95 | {r['p95_s']:.2f} s |\n"
        f"| line written -> step stored, max | {r['max_s']:.2f} s |\n"
        f"| steps written / stored | {r['written']} / {r['stored']} |\n"
        f"| watcher exit status | {r['exit']:.0f} |\n"
    )
    print(text)
    if not a.no_write:
        OUT.write_text(text)


if __name__ == "__main__":
    main()
