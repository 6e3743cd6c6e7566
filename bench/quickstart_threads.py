"""The quickstart with its rules under 1 and 2 torch threads per trial: the same story?

    .venv/bin/python bench/quickstart_threads.py [--threads 1,2]

Runs ``examples/quickstart.yaml`` (preflight on, every rule at its defaults) once per
thread count (``--set num_threads=N``: each changes the floating-point summation order,
a proxy for another CPU) into a temporary SQLite store, and tabulates every trial's fate
(completed, or stopped by which rule at which step) side by side, with each sweep's wall
time. The story holds when, under every thread count, both dense controls complete and
every compressed treatment is stopped. Writes bench/results/quickstart_threads.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _machine import machine  # noqa: E402

from gapwatch.orchestrator.sweep.config import load_sweep_config  # noqa: E402
from gapwatch.orchestrator.sweep.driver import execute_sweep  # noqa: E402

OUT = ROOT / "bench" / "results" / "quickstart_threads.md"
CONFIG = ROOT / "examples" / "quickstart.yaml"


def fates(threads: int, db: Path) -> tuple[dict[str, str], float, str]:
    sweep = load_sweep_config(CONFIG, [f"num_threads={threads}", f"name=quickstart-t{threads}"])
    t0 = time.perf_counter()
    out = execute_sweep(sweep, db_url=f"sqlite:///{db}", address=None, resume=False,
                        storage=db.parent / "ray", live=False, check_first=True)  # fmt: skip
    wall = time.perf_counter() - t0
    got = {}
    for ln in out.lines:
        got[ln.trial_key] = (
            f"stopped: {ln.stop_rule} @ {ln.stop_step}" if ln.status == "stopped" else ln.status
        )
    ok = all(
        (got[ln.trial_key] == "completed") == (ln.role == "control") and ln.status != "failed"
        for ln in out.lines
    )
    return got, wall, "holds" if ok else "DOES NOT HOLD"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for t in threads:
            res[t] = fates(t, Path(tmp) / f"t{t}.db")
            print(f"[quickstart] {t} threads: {res[t][1]:.0f} s, story {res[t][2]}", flush=True)
    keys = list(res[threads[0]][0])
    lines = [
        "## The quickstart with rules under 1 and 2 torch threads per trial",
        "",
        f"- machine: {machine()}",
        f"- date: {dt.date.today().isoformat()}",
        f"- command: `python bench/quickstart_threads.py --threads {args.threads}`",
        "- config: `examples/quickstart.yaml` (2 seeds x (control + 4 treatments), 30 steps,"
        " every rule at its defaults, preflight on), `--set num_threads=N`",
        "",
        "| trial | " + " | ".join(f"{t} thread{'s' * (t > 1)}" for t in threads) + " |",
        "|---|" + "---|" * len(threads),
    ]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(res[t][0].get(k, "-") for t in threads) + " |")
    lines.append("| **wall** | " + " | ".join(f"{res[t][1]:.0f} s" for t in threads) + " |")
    lines.append(
        "| **controls complete, treatments stopped** | "
        + " | ".join(res[t][2] for t in threads)
        + " |"
    )
    lines.append("")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
