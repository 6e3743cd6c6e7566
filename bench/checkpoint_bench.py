"""Benchmark of a built-in trial's checkpoint on the quick preset: size, save and load time.

    .venv/bin/python bench/checkpoint_bench.py [--saves 10]

A ``GRPORun`` of the quick preset (compressed, the preset codec) takes two steps, then its
checkpoint is saved ``--saves`` times (what a trial does every ``checkpoint_every``
steps, Tune's copy into its storage not included) and loaded once into a fresh run.
Writes bench/results/checkpoint_bench.md.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _machine import machine  # noqa: E402  (bench/ is on sys.path as a script)

from gapwatch.workers import RunConfig  # noqa: E402
from gapwatch.workers.config import QUICK_CODEC  # noqa: E402
from gapwatch.workers.loop import GRPORun  # noqa: E402

OUT = ROOT / "bench" / "results" / "checkpoint_bench.md"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--saves", type=int, default=10)
    args = ap.parse_args()
    codec, strength = QUICK_CODEC
    cfg = RunConfig.preset("quick", compression=codec, compression_kwargs=strength, num_threads=1)
    run = GRPORun(cfg)
    list(itertools.islice(run.steps(), 2))
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.saves):
            t0 = time.perf_counter()
            path = run.save(Path(tmp) / f"c{i}")
            times.append(time.perf_counter() - t0)
        size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        t0 = time.perf_counter()
        GRPORun(cfg, resume=path)
        load = time.perf_counter() - t0
    params = sum(p.numel() for p in run.model.parameters())
    lines = [
        "## Checkpoints of a built-in trial (bench/checkpoint_bench.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- command: `python bench/checkpoint_bench.py --saves {args.saves}`",
        f"- run: quick preset, tiny model ({params:,} parameters), {codec} {strength}, after 2 steps",
        "",
        "| figure | measured |",
        "|---|---|",
        f"| checkpoint size (weights, AdamW state, random states, meta) | {size / 2**20:.2f} MiB |",
        f"| time per save, median of {args.saves} (max) | {1000 * statistics.median(times):.0f} ms "
        f"({1000 * max(times):.0f} ms) |",
        f"| building a run from it (model load + restore) | {load:.2f} s |",
    ]
    OUT.write_text("\n".join(lines) + "\n")
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
