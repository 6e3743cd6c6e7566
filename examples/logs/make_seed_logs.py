"""Write the example metric logs that ``gapwatch replay`` reads (run from anywhere).

SYNTHETIC RECONSTRUCTION, NOT REAL DATA. These logs rebuild, from the facts DESIGN.md
states about the seed run, what its compressed run and its dense control would have
logged; every value between the stated facts is an invented, smooth, seeded-noise curve.
Facts followed (DESIGN.md, "The problem it exists for"):

- compressed: the score gains, peaking above the control early, falls below zero at
  step 6, and from step 17 every trajectory scores exactly -0.1 (format penalty only),
  so score min == max and the zero-advantage group fraction is 1.0; run to step 44;
- compressed: mean tokens per interaction reach the per-interaction budget (512) by
  step 5, with nearly every interaction cut there;
- gap at step 1: 0.61 compressed vs 0.006 dense (mean |p_trainer - p_sampler|); its max
  is 1.000 every compressed step; in probability space the mean shrinks once dead;
- the post-tool p95 |log-ratio| grows while the text-only p95 stays flat; ESS falls;
- the dense control stays positive.

Outputs, next to this file: ``seed_compressed.{jsonl,verl.jsonl,csv}`` and
``seed_dense.{jsonl,verl.jsonl,csv}`` (flat JSON lines, verl's file-logger form
``{"step": N, "data": {...}}``, and CSV ``step,name,value``), and
``seed_{compressed,dense}.verl-defaults.jsonl``: the same runs with only the keys verl
logs by default (:data:`VERL_DEFAULTS`: no budget, no tails, no ESS, no zero-advantage
fraction), as a stock verl run would write them::

    .venv/bin/python examples/logs/make_seed_logs.py
    .venv/bin/gapwatch replay examples/logs/seed_compressed.jsonl \\
        --control examples/logs/seed_dense.jsonl
"""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

from gapwatch.correction import names as N

STEPS = 44
BUDGET = 512.0
HERE = Path(__file__).resolve().parent


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def _compressed_score(step: int, rng: random.Random) -> float:
    """Peaks above the control at step 3, below zero from step 6, exactly -0.1 from 17."""
    early = {1: 0.30, 2: 0.42, 3: 0.48, 4: 0.26, 5: 0.06}
    if step in early:
        return early[step] + rng.gauss(0, 0.01)
    if step >= 17:
        return -0.1
    # steps 6..16: from -0.03 down towards -0.1, a little noise, never back above zero
    frac = (step - 6) / 11
    return min(-0.03 - 0.069 * frac + rng.gauss(0, 0.003), -0.01)


def compressed_history(seed: int = 6) -> list[dict[str, float | int]]:
    """The compressed run's per-step metrics (synthetic; see the module docstring)."""
    rng = random.Random(seed)
    rows: list[dict[str, float | int]] = []
    for step in range(1, STEPS + 1):
        score = _compressed_score(step, rng)
        dead = step >= 17
        # tokens per interaction run to the budget by step 5
        length = min(BUDGET, 150.0 * 1.36 ** (step - 1)) if step < 5 else BUDGET
        clip = {1: 0.04, 2: 0.10, 3: 0.25, 4: 0.55}.get(step, 0.97 + 0.03 * (step >= 8))
        zero_frac = 1.0 if dead else min(0.95, 0.15 + 0.05 * step + rng.gauss(0, 0.02))
        gap = 0.61 if step == 1 else 0.61 * (0.55 + 0.45 * math.exp(-(step - 1) / 8))
        post_p95 = min(20.0, 1.3 * 1.4 ** (step - 1)) * (1 + rng.gauss(0, 0.03))
        text_p95 = 1.2 * (1 + rng.gauss(0, 0.04))
        row: dict[str, float | int] = {
            "step": step,
            N.SCORE_MEAN: score,
            N.SCORE_STD: 0.0 if dead else max(0.05, 0.45 - 0.03 * step),
            N.SCORE_MIN: -0.1,
            N.SCORE_MAX: -0.1 if dead else (1.0 if step < 12 else 0.0),
            N.ZERO_ADV_FRAC: zero_frac,
            N.RESPONSE_LENGTH_MEAN: length,
            N.RESPONSE_LENGTH_MAX: BUDGET,
            N.CLIP_RATIO: clip,
            N.RESPONSE_BUDGET: BUDGET,
            N.PROBS_DIFF_MEAN: gap,
            N.PROBS_DIFF_MAX: 1.0,
            N.tail("text", "p95"): text_p95,
            N.tail("post_tool", "p95"): post_p95,
            N.ess("text"): 0.55 + rng.gauss(0, 0.02),
            N.ess("post_tool"): max(0.01, 0.6 * 0.8 ** (step - 1)),
            N.PARSE_FAIL_FRAC: clip,
        }
        rows.append({k: v if k == "step" else _r(float(v)) for k, v in row.items()})
    return rows


def dense_history(seed: int = 7) -> list[dict[str, float | int]]:
    """The dense control's per-step metrics (synthetic; positive throughout)."""
    rng = random.Random(seed)
    rows: list[dict[str, float | int]] = []
    for step in range(1, STEPS + 1):
        score = 0.25 + 0.2 * (1 - math.exp(-step / 15)) + rng.gauss(0, 0.02)
        row: dict[str, float | int] = {
            "step": step,
            N.SCORE_MEAN: score,
            N.SCORE_STD: 0.42 + rng.gauss(0, 0.01),
            N.SCORE_MIN: -0.1,
            N.SCORE_MAX: 1.0,
            N.ZERO_ADV_FRAC: min(0.6, max(0.0, 0.25 + rng.gauss(0, 0.04))),
            N.RESPONSE_LENGTH_MEAN: 120.0 + rng.gauss(0, 6),
            N.RESPONSE_LENGTH_MAX: 300.0 + rng.gauss(0, 20),
            N.CLIP_RATIO: max(0.0, 0.01 + rng.gauss(0, 0.004)),
            N.RESPONSE_BUDGET: BUDGET,
            N.PROBS_DIFF_MEAN: 0.006 * (1 + rng.gauss(0, 0.05)),
            N.PROBS_DIFF_MAX: 0.2 + rng.gauss(0, 0.02),
            N.tail("text", "p95"): 0.03 * (1 + rng.gauss(0, 0.1)),
            N.tail("post_tool", "p95"): 0.035 * (1 + rng.gauss(0, 0.1)),
            N.ess("text"): 0.98,
            N.ess("post_tool"): 0.97 + rng.gauss(0, 0.005),
            N.PARSE_FAIL_FRAC: max(0.0, 0.02 + rng.gauss(0, 0.005)),
        }
        rows.append({k: v if k == "step" else _r(float(v)) for k, v in row.items()})
    return rows


VERL_DEFAULTS = (
    N.SCORE_MEAN,
    N.SCORE_MAX,
    N.SCORE_MIN,
    N.RESPONSE_LENGTH_MEAN,
    N.RESPONSE_LENGTH_MAX,
    N.CLIP_RATIO,
    N.PROBS_DIFF_MEAN,
    N.PROBS_DIFF_MAX,
)
"""The seed's figures that a stock verl run logs (verl 0.9: ``compute_data_metrics``'s
``critic/score/{mean,max,min}`` and ``response_length/{mean,max,clip_ratio}``, and
``training/rollout_probs_diff_{mean,max}`` of ``calculate_debug_metrics`` when the rollout
returns its log-probs). verl logs no score std and no budget."""


def write_verl_defaults(rows: list[dict[str, float | int]], stem: Path) -> Path:
    """``rows`` as a stock verl run's file logger writes them: :data:`VERL_DEFAULTS` only."""
    path = stem.with_suffix(".verl-defaults.jsonl")
    with path.open("w") as f:
        for row in rows:
            data = {k: row[k] for k in VERL_DEFAULTS}
            f.write(json.dumps({"step": row["step"], "data": data}) + "\n")
    return path


def write_logs(rows: list[dict[str, float | int]], stem: Path) -> list[Path]:
    """Write ``rows`` in the three formats replay reads; returns the paths."""
    flat, verl, table = (
        stem.with_suffix(".jsonl"),
        stem.with_suffix(".verl.jsonl"),
        stem.with_suffix(".csv"),
    )
    with flat.open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with verl.open("w") as f:  # verl's FileLogger: {"step": step, "data": {...}} per line
        for row in rows:
            data = {k: v for k, v in row.items() if k != "step"}
            f.write(json.dumps({"step": row["step"], "data": data}) + "\n")
    with table.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "name", "value"])
        for row in rows:
            for k, v in row.items():
                if k != "step":
                    w.writerow([row["step"], k, v])
    return [flat, verl, table]


def main() -> None:
    for stem, rows in (
        ("seed_compressed", compressed_history()),
        ("seed_dense", dense_history()),
    ):
        for p in [*write_logs(rows, HERE / stem), write_verl_defaults(rows, HERE / stem)]:
            print(f"wrote {p}")


if __name__ == "__main__":
    main()
