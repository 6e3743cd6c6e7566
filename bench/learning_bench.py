"""Does the quick preset's dense control learn on any machine? 8 seeds x torch threads.

    .venv/bin/python bench/learning_bench.py [--seeds 0-7] [--threads 1,2,4] [--cores 2] [--fresh]

Each thread count changes the floating-point summation order of every matmul, a proxy for
another CPU: the quick preset must not depend on it. Every run starts from the shipped warm
start (``workers/assets/quick``), runs the quick preset's 30 steps dense, in its own
process with ``num_threads`` set, and is judged by the ground truth's learning criteria
(``bench/ground_truth.learning``: mean score over the last 10 steps >= 2x the steps 1-3
mean and >= 0.3, never below zero two steps running). Writes
bench/results/learning_bench.md (histories under bench/results/learning/, gzipped JSONL).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import multiprocessing as mp
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import ground_truth  # noqa: E402
from _machine import machine  # noqa: E402

OUT = ROOT / "bench" / "results" / "learning_bench.md"
RUNS = ROOT / "bench" / "results" / "learning"
SCORE = "critic/score/mean"


def history(seed: int, threads: int) -> Path:
    return RUNS / f"s{seed}-t{threads}.jsonl.gz"


def stored(seed: int, threads: int) -> list[float] | None:
    """The scores of a run already recorded (the bench goes on where it stopped)."""
    path = history(seed, threads)
    if not path.is_file():
        return None
    rows = [json.loads(x) for x in gzip.decompress(path.read_bytes()).decode().splitlines()]
    return [float(r[SCORE]) for r in rows]


def run_one(seed: int, threads: int) -> tuple[int, int, list[float], float]:
    """One dense quick-preset run; its score per step and wall seconds."""
    from workers import RunConfig, train

    cfg = RunConfig.preset("quick", seed=seed, num_threads=threads)
    t0 = time.perf_counter()
    rows = [{"step": r.step, **r.metrics} for r in train(cfg)]
    wall = time.perf_counter() - t0
    RUNS.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    history(seed, threads).write_bytes(gzip.compress(text.encode(), mtime=0))
    return seed, threads, [float(r[SCORE]) for r in rows], wall


def span(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-7")
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--cores", type=int, default=2,
                    help="runs at once = cores // threads (results do not depend on it)")  # fmt: skip
    ap.add_argument("--fresh", action="store_true", help="rerun the runs already recorded")
    args = ap.parse_args()
    seeds, threads = span(args.seeds), span(args.threads)
    t0 = time.perf_counter()
    res: dict[tuple[int, int], list[float]] = {}
    for t in threads:
        todo = []
        for s in seeds:
            old = None if args.fresh else stored(s, t)
            if old is None:
                todo.append(s)
            else:
                res[(s, t)] = old
        jobs = max(1, args.cores // t)  # never more threads than cores
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            futs = [pool.submit(run_one, s, t) for s in todo]
            for fut in as_completed(futs):
                s, _, scores, wall = fut.result()
                res[(s, t)] = scores
                ok = ground_truth.learning(scores)
                print(f"[learning] seed {s} threads {t}: steps 1-3 {ok['first3']:+.3f} -> last "
                      f"10 {ok['last10']:+.3f} ({'learns' if ok['learns'] else 'NO'}), {wall:.0f} s",
                      flush=True)  # fmt: skip
    lines = [
        "## Learning table: the quick preset's dense control under 1, 2 and 4 torch threads",
        "",
        f"- machine: {machine()}",
        f"- date: {dt.date.today().isoformat()}",
        f"- command: `python bench/learning_bench.py --seeds {args.seeds} --threads {args.threads}`",
        f"- wall: {time.perf_counter() - t0:.0f} s for the runs not recorded before "
        f"({args.cores} // threads runs at once)",
        "- start: the shipped warm start (`workers/assets/quick`); 30 steps, 16 tasks x 4",
        "- criteria (`bench/ground_truth.learning`): last-10 mean >= 2x the steps 1-3 mean and"
        " >= 0.3, never below zero two steps running",
        "",
        "Last-10 mean score of the dense control (steps 1-3 mean in brackets); * = does not"
        " meet the criteria.",
        "",
        "| seed | " + " | ".join(f"{t} thread{'s' * (t > 1)}" for t in threads) + " |",
        "|---|" + "---|" * len(threads),
    ]
    met = {t: 0 for t in threads}
    for s in seeds:
        cells = []
        for t in threads:
            c = ground_truth.learning(res[(s, t)])
            met[t] += c["learns"]
            cells.append(f"{c['last10']:+.3f} ({c['first3']:+.3f}){'' if c['learns'] else ' *'}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines.append(
        "| **meet the criteria** | "
        + " | ".join(f"**{met[t]} of {len(seeds)}**" for t in threads)
        + " |"
    )
    lines.append("")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
