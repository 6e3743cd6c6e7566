"""Benchmark of one RL run (workers/): the five figures of issue 4, measured, never typed.

    .venv/bin/python bench/worker_bench.py [--steps 30] [--seed 0] [--threads 1]

Runs, on the quick preset with one seed:
1. dense control, codec none, sampler in the trainer's dtype (float32): step-1 gap;
2. dense control, default bfloat16 sampler, ``--steps`` steps (the learning curve);
3. compressed run, the preset codec (``workers.config.QUICK_CODEC``), no correction,
   ``--steps`` steps (the collapse);
and prints / writes to bench/results/worker_bench.md: the step-1 gaps, the dense curve,
the steps at which the compressed run's score goes and stays below 0, its clip ratio
reaches 0.5 and its zero-advantage fraction 0.95, and the median step time, tokens/s and
peak RSS. Each figure is printed against its target. The warm start is built first (and
cached), outside the timings.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _machine import machine  # noqa: E402  (bench/ is on sys.path as a script)

from gapwatch.correction import names as N
from gapwatch.workers import RunConfig, train
from gapwatch.workers.config import QUICK_CODEC
from gapwatch.workers.model import ensure_warm_start

OUT = Path(__file__).resolve().parent / "results" / "worker_bench.md"
CURVE = (
    N.SCORE_MEAN,
    N.SUCCESS_RATE,
    N.PROBS_DIFF_MEAN,
    N.CLIP_RATIO,
    N.ZERO_ADV_FRAC,
    N.RESPONSE_LENGTH_MEAN,
)


def run(cfg: RunConfig) -> list[dict[str, float]]:
    rows = []
    for res in train(cfg):
        rows.append({"step": float(res.step), **res.metrics})
        m = res.metrics
        print(
            f"  {cfg.name} step {res.step:2d} score {m[N.SCORE_MEAN]:+.3f} success {m[N.SUCCESS_RATE]:.2f} "
            f"gap {m[N.PROBS_DIFF_MEAN]:.4f} clip {m[N.CLIP_RATIO]:.2f} zadv {m[N.ZERO_ADV_FRAC]:.2f} "
            f"len {m[N.RESPONSE_LENGTH_MEAN]:.1f} {m[N.STEP_TIME]:.2f}s",
            flush=True,
        )
    return rows


def first(rows: list[dict[str, float]], pred: Any) -> int | None:
    return next((int(r["step"]) for r in rows if pred(r)), None)


def stays_below_zero_from(rows: list[dict[str, float]]) -> int | None:
    """First step from which the score is < 0 at every later step."""
    start = None
    for r in rows:
        below = r[N.SCORE_MEAN] < 0
        start = None if not below else (int(r["step"]) if start is None else start)
    return start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads per run (the sweep uses 1)"
    )
    ap.add_argument("--out", type=Path, default=OUT, help="Markdown fragment to write")
    args = ap.parse_args()
    command = " ".join(
        [".venv/bin/python", "bench/worker_bench.py", *map(shlex.quote, sys.argv[1:])]
    )
    base: dict[str, Any] = {"preset": "quick", "seed": args.seed, "num_threads": args.threads}
    codec_name, codec_kw = QUICK_CODEC

    t0 = time.perf_counter()
    ensure_warm_start(RunConfig.from_dict(base))
    warm_s = time.perf_counter() - t0
    print(f"warm start ready in {warm_s:.0f} s (0 when cached)")

    fp32 = run(
        RunConfig.from_dict({**base, "name": "dense-fp32", "steps": 1, "sampler_dtype": "float32"})
    )
    dense = run(RunConfig.from_dict({**base, "name": "dense", "steps": args.steps}))
    comp = run(
        RunConfig.from_dict(
            {
                **base,
                "name": "compressed",
                "steps": args.steps,
                "compression": codec_name,
                "compression_kwargs": codec_kw,
            }
        )
    )
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    g_fp32, g_dense, g_comp = (
        fp32[0][N.PROBS_DIFF_MEAN],
        dense[0][N.PROBS_DIFF_MEAN],
        comp[0][N.PROBS_DIFF_MEAN],
    )
    ratio = g_comp / g_dense if g_dense > 0 else float("inf")
    succ1 = dense[0][N.SUCCESS_RATE]
    tail = dense[-10:]
    succ_late = statistics.mean(r[N.SUCCESS_RATE] for r in tail)
    succ_best = max(r[N.SUCCESS_RATE] for r in dense)
    dense_min_score = min(r[N.SCORE_MEAN] for r in dense)
    below = stays_below_zero_from(comp)
    # counted from the collapse on (a hard batch earlier can give all-equal rewards too)
    after = [r for r in comp if below is not None and r["step"] >= below]
    clip_at = first(after, lambda r: r[N.CLIP_RATIO] >= 0.5)
    zadv_at = first(after, lambda r: r[N.ZERO_ADV_FRAC] >= 0.95)
    dense_below = [str(int(r["step"])) for r in dense if r[N.SCORE_MEAN] <= 0]
    times = [r[N.STEP_TIME] for r in dense + comp]
    med = statistics.median(times)
    med_dense = statistics.median(r[N.STEP_TIME] for r in dense)
    med_comp = statistics.median(r[N.STEP_TIME] for r in comp)
    tok_s = statistics.median(r[N.TOKENS_PER_S] for r in dense + comp)

    def ok(cond: bool) -> str:
        return "PASS" if cond else "FAIL"

    figures = [
        (
            "1. dense, fp32 sampler: step-1 `training/rollout_probs_diff_mean`",
            f"{g_fp32:.2e}",
            "< 1e-4",
            ok(g_fp32 < 1e-4),
        ),
        (
            "2a. step-1 gap, dense control (bf16 sampler)",
            f"{g_dense:.4f}",
            "small, > 0",
            ok(g_dense > 0),
        ),
        (
            f"2b. step-1 gap, compressed ({codec_name} {codec_kw})",
            f"{g_comp:.4f} ({ratio:.0f}x dense)",
            ">= 0.1 and >= 20x dense",
            ok(g_comp >= 0.1 and ratio >= 20),
        ),
        (
            "3a. dense success: step 1 -> mean of last 10 steps (best)",
            f"{succ1:.3f} -> {succ_late:.3f} ({succ_best:.3f})",
            "rises above step 1",
            ok(succ_late > succ1),
        ),
        (
            "3b. dense min `critic/score/mean` over the run (steps <= 0)",
            f"{dense_min_score:+.3f} ({', '.join(dense_below) or 'none'})",
            "> 0",
            ok(dense_min_score > 0),
        ),
        (
            "4a. compressed: score < 0 from step (and stays)",
            str(below) if below else "never",
            f"<= {args.steps}",
            ok(below is not None),
        ),
        (
            "4b. compressed: first step (from 4a on) clip_ratio >= 0.5",
            str(clip_at) if clip_at else "never",
            "either 4b",
            "-",
        ),
        (
            "4c. compressed: first step (from 4a on) zero_group_frac >= 0.95",
            str(zadv_at) if zadv_at else "never",
            "or 4c",
            ok(clip_at is not None or zadv_at is not None),
        ),
        (
            f"5a. median step time, {args.threads} thread(s) (dense / compressed)",
            f"{med:.2f} s ({med_dense:.2f} / {med_comp:.2f})",
            "<= 3 s (aim 1.5 s)",
            ok(med <= 3.0),
        ),
        ("5b. median emitted tokens/s", f"{tok_s:.0f}", "-", "-"),
        ("5c. peak RSS of this process", f"{peak_rss_mb:.0f} MB", "-", "-"),
    ]
    print()
    for name, val, target, verdict in figures:
        print(f"{verdict:4s}  {name}: {val}  (target {target})")

    lines = [
        "## workers: one agentic GRPO run (bench/worker_bench.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- command: `{command}`",
        f"- setting: quick preset (tiny model, {dense and int(RunConfig.from_dict(base).tasks_per_step)} tasks x "
        f"{RunConfig.from_dict(base).group_size} trajectories, budget {RunConfig.from_dict(base).token_budget} tokens, "
        f"{RunConfig.from_dict(base).max_interactions} interactions), seed {args.seed}, {args.steps} steps, "
        f"compressed = `{codec_name}` {codec_kw}, correction none; warm start {warm_s:.0f} s (0 = cached)",
        "",
        "| figure | measured | target | verdict |",
        "|---|---|---|---|",
        *[f"| {n} | {v} | {t} | {k} |" for n, v, t, k in figures],
        "",
        "Per-step curves (dense control | compressed, no correction):",
        "",
        "| step | dense score | dense success | dense gap | comp score | comp success | comp gap | comp clip | comp zero-adv | comp len |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d, c in zip(dense, comp, strict=True):
        lines.append(
            f"| {int(d['step'])} | {d[N.SCORE_MEAN]:+.3f} | {d[N.SUCCESS_RATE]:.3f} | {d[N.PROBS_DIFF_MEAN]:.4f} | "
            f"{c[N.SCORE_MEAN]:+.3f} | {c[N.SUCCESS_RATE]:.3f} | {c[N.PROBS_DIFF_MEAN]:.4f} | {c[N.CLIP_RATIO]:.2f} | "
            f"{c[N.ZERO_ADV_FRAC]:.2f} | {c[N.RESPONSE_LENGTH_MEAN]:.1f} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
