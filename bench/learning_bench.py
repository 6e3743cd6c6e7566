"""Does a preset's dense control learn on any machine? 8 seeds x torch threads.

    .venv/bin/python bench/learning_bench.py [--preset quick] [--seeds 0-7] [--threads 1,2,4]
        [--cores 2] [--fresh] [--compressed] [--steps N]

``--preset long`` is the long-horizon task (``add_chain``, 8-12 tool calls an episode): its
warm start (shipped, ``workers/assets/long``; a changed config's is built once, here, before
the runs) is reported with its gate figures, and each run also reports the share of its
tokens written after a tool result. (``bench/ground_truth.py --grid long`` records the same
dense runs and the compressed ones at three strengths.) ``--compressed`` adds, per seed, the same run with the quick
codec (top-k 5%, no correction) and its fate (``bench/ground_truth.fate``: collapsed = last-5
mean below 0.05, onset = the first step from which it stays below). ``--steps`` shortens
the runs (a smoke test; the criteria need at least 10 steps).

Each thread count changes the floating-point summation order of every matmul, a proxy for
another CPU: the quick preset must not depend on it. Every run starts from the shipped warm
start (``workers/assets/quick``), runs the quick preset's 30 steps dense, in its own
process with ``num_threads`` set, and is judged by the ground truth's learning criteria
(``bench/ground_truth.learning``: mean score over the last 10 steps >= 2x the steps 1-3
mean and >= 0.3, never below zero two steps running). Writes
bench/results/learning_bench.md (``--preset long``: learning_bench-long.md; histories under
bench/results/learning/, gzipped JSONL).
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
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import ground_truth  # noqa: E402
from _machine import machine  # noqa: E402

RESULTS = ROOT / "bench" / "results"
RUNS = RESULTS / "learning"
SCORE = "critic/score/mean"
POST_SHARE = "response_length/post_tool_token_frac"
TOOL_CALLS = "tool_call_counts/mean"


def out_file(preset: str) -> Path:
    return RESULTS / ("learning_bench.md" if preset == "quick" else f"learning_bench-{preset}.md")


def history(
    preset: str,
    seed: int,
    threads: int,
    compressed: bool = False,
    steps: int = 0,
    runs: Path = RUNS,
    sets: dict[str, Any] | None = None,
) -> Path:
    """Where a run's rows are kept (the quick preset's dense runs where they always were;
    runs with ``--set`` overrides in a folder named after them)."""
    tag = f"s{seed}-t{threads}{'-topk' if compressed else ''}{f'-n{steps}' if steps else ''}"
    folder = runs if preset == "quick" and not sets else runs / (preset + set_tag(sets))
    return folder / f"{tag}.jsonl.gz"


def set_tag(sets: dict[str, Any] | None) -> str:
    """``-lr=0.0002,warm_start_batch=32`` for ``--set`` overrides; empty without."""
    return "-" + ",".join(f"{k}={v}" for k, v in sorted(sets.items())) if sets else ""


def stored(path: Path) -> list[dict[str, float]] | None:
    """The rows of a run already recorded (the bench goes on where it stopped)."""
    if not path.is_file():
        return None
    return [json.loads(x) for x in gzip.decompress(path.read_bytes()).decode().splitlines()]


def config(
    preset: str,
    seed: int,
    threads: int,
    compressed: bool,
    steps: int,
    sets: dict[str, Any] | None = None,
) -> Any:
    from gapwatch.workers import RunConfig
    from gapwatch.workers.config import QUICK_CODEC

    over: dict[str, Any] = {**(sets or {}), "seed": seed, "num_threads": threads}
    if compressed:
        over.update(compression=QUICK_CODEC[0], compression_kwargs=QUICK_CODEC[1])
    if steps:
        over["steps"] = steps
    return RunConfig.preset(preset, **over)


def run_one(
    preset: str,
    seed: int,
    threads: int,
    compressed: bool,
    steps: int,
    runs: Path,
    sets: dict[str, Any] | None = None,
) -> tuple[int, int, bool, list[dict[str, float]], float]:
    """One run of the preset; its rows and wall seconds."""
    from gapwatch.workers import train

    cfg = config(preset, seed, threads, compressed, steps, sets)
    t0 = time.perf_counter()
    rows = [{"step": r.step, **r.metrics} for r in train(cfg)]
    wall = time.perf_counter() - t0
    path = history(preset, seed, threads, compressed, steps, runs, sets)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_bytes(gzip.compress(text.encode(), mtime=0))
    return seed, threads, compressed, rows, wall


def warm_start(preset: str, threads: int, sets: dict[str, Any] | None = None) -> str:
    """Build (or find) the preset's warm start once, before the runs; its line."""
    import torch

    from gapwatch.workers.model import INFO_FILE, ensure_warm_start

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    path = ensure_warm_start(config(preset, 0, threads, False, 0, sets))
    info = json.loads((path / INFO_FILE).read_text()) if (path / INFO_FILE).is_file() else {}
    gate = info.get("gate") or {}
    figs = ", ".join(f"{k} {v:.0%}" for k, v in gate.items() if k in ("success", "tool_calls",
                                                                       "copied"))  # fmt: skip
    return (f"{path.name}: {figs or 'no gate figures'}; {info.get('steps', '?')} steps + "
            f"{info.get('extra_rounds', 0)} extra rounds, built with "
            f"{info.get('torch_threads', '?')} threads; found or built in "
            f"{time.perf_counter() - t0:.0f} s")  # fmt: skip


def mean(rows: list[dict[str, float]], name: str, sl: slice) -> float:
    vals = [float(r[name]) for r in rows[sl] if name in r]
    return sum(vals) / len(vals) if vals else float("nan")


def span(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="quick", help="workers.config preset: quick or long")
    ap.add_argument("--seeds", default="0-7")
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--cores", type=int, default=2,
                    help="runs at once = cores // threads (results do not depend on it)")  # fmt: skip
    ap.add_argument("--fresh", action="store_true", help="rerun the runs already recorded")
    ap.add_argument("--compressed", action="store_true",
                    help="also run each seed compressed (top-k 5%%, no correction)")  # fmt: skip
    ap.add_argument("--steps", type=int, default=0, help="shorter runs (a smoke test)")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the markdown fragment (default: bench/results/learning_bench[-PRESET].md)",
    )
    ap.add_argument("--runs", type=Path, default=RUNS, help="where the runs' histories go")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a RunConfig field of the preset (repeatable): a screening "
                    "run, written under bench/results/learning/, not BENCHMARKS.md")  # fmt: skip
    args = ap.parse_args()
    try:
        args.over = {k: yaml.safe_load(v) for k, _, v in (x.partition("=") for x in args.sets)}
    except yaml.YAMLError as e:
        ap.error(f"--set needs KEY=VALUE: {e}")
    from gapwatch.workers.config import PRESETS

    if args.preset not in PRESETS:
        print(f"error: unknown preset {args.preset!r}; valid: {', '.join(PRESETS)}")
        return 2
    seeds, threads = span(args.seeds), span(args.threads)
    arms = [False, True] if args.compressed else [False]
    t0 = time.perf_counter()
    ws = None if args.preset == "quick" and not args.over else (
        warm_start(args.preset, min(threads), args.over))  # fmt: skip
    if ws:
        print(f"[learning] warm start {ws}", flush=True)
    res: dict[tuple[int, int, bool], list[dict[str, float]]] = {}
    walls: dict[tuple[int, int, bool], float] = {}
    for t in threads:
        todo = []
        for s in seeds:
            for c in arms:
                path = history(args.preset, s, t, c, args.steps, args.runs, args.over)
                old = None if args.fresh else stored(path)
                if old is None:
                    todo.append((s, c))
                else:
                    res[(s, t, c)] = old
        jobs = max(1, args.cores // t)  # never more threads than cores
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            futs = [
                pool.submit(run_one, args.preset, s, t, c, args.steps, args.runs, args.over)
                for s, c in todo
            ]
            for fut in as_completed(futs):
                s, _, c, rows, wall = fut.result()
                res[(s, t, c)], walls[(s, t, c)] = rows, wall
                sc = [float(r[SCORE]) for r in rows]
                ok = ground_truth.learning(sc)
                verdict = ground_truth.fate(sc)["fate"] if c else (
                    "learns" if ok["learns"] else "NO")  # fmt: skip
                print(f"[learning] seed {s} threads {t}{' compressed' if c else ''}: steps 1-3 "
                      f"{ok['first3']:+.3f} -> last 10 {ok['last10']:+.3f} ({verdict}), "
                      f"{wall:.0f} s", flush=True)  # fmt: skip
    lines = table(args, seeds, threads, res, walls, time.perf_counter() - t0, ws)
    out = args.out or (
        args.runs / f"{args.preset}{set_tag(args.over)}.md" if args.over else out_file(args.preset)
    )
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def table(
    args: argparse.Namespace,
    seeds: list[int],
    threads: list[int],
    res: dict[tuple[int, int, bool], list[dict[str, float]]],
    walls: dict[tuple[int, int, bool], float],
    wall: float,
    ws: str | None,
) -> list[str]:
    """The markdown fragment: the dense table per thread count, then (``--compressed``)
    each seed's compressed fate; the long preset adds tool calls and the post-tool share."""
    cmd = (f"python bench/learning_bench.py --preset {args.preset} --seeds {args.seeds} "
           f"--threads {args.threads}{' --compressed' if args.compressed else ''}"
           f"{f' --steps {args.steps}' if args.steps else ''}"
           f"{''.join(f' --set {x}' for x in args.sets)}")  # fmt: skip
    cfg = config(args.preset, 0, 1, False, args.steps, args.over)
    start = "the shipped warm start (`workers/assets/quick`)" if ws is None else f"warm start {ws}"
    per_run = ", ".join(f"{v:.0f}" for v in sorted(walls.values())) or "all recorded before"
    lines = [
        f"## Learning table: the {args.preset} preset's dense control under "
        + ", ".join(map(str, threads))
        + " torch thread(s)",
        "",
        f"- machine: {machine()}",
        f"- date: {dt.date.today().isoformat()}",
        f"- command: `{cmd}`",
        f"- wall: {wall:.0f} s for the runs not recorded before ({args.cores} // threads runs "
        f"at once); per run: {per_run} s",
        f"- env `{cfg.env}`, {cfg.steps} steps, {cfg.tasks_per_step} tasks x {cfg.group_size}; "
        f"start: {start}",
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
            c = ground_truth.learning([float(r[SCORE]) for r in res[(s, t, False)]])
            met[t] += c["learns"]
            cells.append(f"{c['last10']:+.3f} ({c['first3']:+.3f}){'' if c['learns'] else ' *'}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines.append(
        "| **meet the criteria** | "
        + " | ".join(f"**{met[t]} of {len(seeds)}**" for t in threads)
        + " |"
    )
    if args.preset != "quick" or args.compressed:
        t = threads[0]
        lines += ["", f"Per seed ({t} thread{'s' * (t > 1)}): tool calls per episode and the share"
                  " of emitted tokens written after a tool result, steps 1-3 -> last 10"
                  + ("; the compressed run's fate (last-5 mean, onset step)"
                     if args.compressed else "") + ".", "",  # fmt: skip
                  "| seed | tool calls | post-tool share |"
                  + (" compressed fate |" if args.compressed else ""),
                  "|---|---|---|" + ("---|" if args.compressed else "")]  # fmt: skip
        for s in seeds:
            rows = res[(s, t, False)]
            cell = [f"{mean(rows, TOOL_CALLS, slice(0, 3)):.1f} -> {mean(rows, TOOL_CALLS, slice(-10, None)):.1f}",
                    f"{mean(rows, POST_SHARE, slice(0, 3)):.0%} -> {mean(rows, POST_SHARE, slice(-10, None)):.0%}"]  # fmt: skip
            if args.compressed:
                f = ground_truth.fate([float(r[SCORE]) for r in res[(s, t, True)]])
                cell.append(f"{f['fate']} ({f['last5']:+.3f}, onset {f['onset']})")
            lines.append(f"| {s} | " + " | ".join(cell) + " |")
    lines.append("")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
