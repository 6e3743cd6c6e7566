"""How much this CPU's bfloat16 support decides the speed of a run (workers/, torch sampler).

    .venv/bin/python bench/cpu_bench.py [--steps 3] [--size 512]

The torch sampler holds its weights in bfloat16 by default (as vLLM serves), the trainer
in float32. A CPU without bfloat16 instructions (``avx512_bf16`` / ``amx_bf16``) emulates
the bfloat16 matmuls, and every sampled token pays for it. Measured, one torch thread
(as each Ray trial uses):

1. matmul throughput, ``--size`` square, float32 vs bfloat16 (median of 7 rounds);
2. one quick-preset dense run per sampler dtype, ``--steps`` steps: median step time
   (the first step is left out: it warms the kernels).

Writes bench/results/cpu_bench.md. The warm start is built first (cached), untimed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from _machine import bf16_flags, machine  # noqa: E402  (bench/ is on sys.path as a script)

from gapwatch.correction import names as N
from gapwatch.workers import RunConfig, train
from gapwatch.workers.model import ensure_warm_start

OUT = Path(__file__).resolve().parent / "results" / "cpu_bench.md"


def gflops(dtype: torch.dtype, size: int, rounds: int = 7) -> float:
    """Median GFLOP/s of ``size x size`` matmuls in ``dtype`` on one thread."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    a @ b  # warm the kernel
    per_round = []
    for _ in range(rounds):
        n, t0 = 0, time.perf_counter()
        while n == 0 or time.perf_counter() - t0 < 0.3:
            a @ b
            n += 1
        per_round.append(2 * size**3 * n / (time.perf_counter() - t0) / 1e9)
    return statistics.median(per_round)


def step_time(sampler_dtype: str, steps: int) -> tuple[float, float]:
    """(median step time after step 1, median emitted tokens/s) of a dense quick run."""
    cfg = RunConfig.from_dict(
        {"preset": "quick", "seed": 0, "num_threads": 1, "steps": steps,
         "sampler_dtype": sampler_dtype, "name": f"dense-{sampler_dtype}"}
    )  # fmt: skip
    rows = [r.metrics for r in train(cfg)]
    later = rows[1:] or rows
    return (
        statistics.median(m[N.STEP_TIME] for m in later),
        statistics.median(m[N.TOKENS_PER_S] for m in later),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (step 1 is left out of the timing)")
    command = " ".join([".venv/bin/python", "bench/cpu_bench.py", *map(shlex.quote, sys.argv[1:])])
    torch.set_num_threads(1)
    ensure_warm_start(RunConfig.from_dict({"preset": "quick", "seed": 0}))

    f32, bf16 = gflops(torch.float32, args.size), gflops(torch.bfloat16, args.size)
    print(f"matmul {args.size}: float32 {f32:.1f} GFLOP/s, bfloat16 {bf16:.1f} GFLOP/s")
    runs = {}
    for dtype in ("bfloat16", "float32"):
        runs[dtype] = step_time(dtype, args.steps)
        print(f"dense run, {dtype} sampler: {runs[dtype][0]:.2f} s/step", flush=True)
    (t_bf, tok_bf), (t_32, tok_32) = runs["bfloat16"], runs["float32"]
    lines = [
        "## CPU: bfloat16 support and step time (bench/cpu_bench.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- command: `{command}`",
        f"- torch {torch.__version__}, 1 thread; quick preset, dense, seed 0, {args.steps} steps "
        "(step 1 left out)",
        "",
        "| figure | float32 | bfloat16 | float32 / bfloat16 |",
        "|---|---|---|---|",
        f"| matmul {args.size}x{args.size}, GFLOP/s | {f32:.1f} | {bf16:.1f} | {f32 / bf16:.1f}x |",
        f"| dense run, sampler in this dtype: s/step | {t_32:.2f} | {t_bf:.2f} | "
        f"{t_bf / t_32:.2f}x faster in float32 |",
        f"| dense run: emitted tokens/s | {tok_32:.0f} | {tok_bf:.0f} | |",
        "",
        f"bf16 flags on this CPU: {bf16_flags()}. With the default bfloat16 sampler a "
        f"step took {t_bf / t_32:.2f}x as long as with a float32 one; worker_bench, "
        "sweep_bench and the demo use the default, so their timings depend on this as "
        "much as on the core count. `sampler_dtype: float32` is faster on such a CPU but "
        "removes the dense control's gap (its sampler then matches the trainer exactly).",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
