"""Record real metric logs of the tiny model (a dense control and a 2-bit treatment).

REAL RUNS of ``workers.train`` on this machine's CPU, unlike the synthetic seed
reconstruction in ``make_seed_logs.py``: the quickstart defaults (``RunConfig`` quick
preset: mul task, 8 tasks x 4 trajectories, 48-token budget, correction none) at a given
learning rate, seed 0, dense vs ``quant`` 2 bits on every layer's output. About 4-5
minutes on 2 busy cores for 12-15 steps each::

    .venv/bin/python examples/logs/make_tiny_logs.py --steps 15 --lr 1e-3
    .venv/bin/python examples/logs/make_tiny_logs.py --steps 12 --lr 1e-4

writes ``tiny_{dense,quant2}_lr<lr>_seed<seed>.jsonl`` next to this file.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUNS: dict[str, dict[str, Any]] = {
    "dense": {},
    "quant2": {"compression": "quant", "compression_kwargs": {"bits": 2}},
}


def stem(run: str, lr: float, seed: int) -> str:
    """``tiny_<run>_lr<lr>_seed<seed>``, the file name (without ``.jsonl``)."""
    return f"tiny_{run}_lr{lr:g}_seed{seed}"


def write_jsonl(history: list[dict[str, Any]], path: Path) -> None:
    """One ``{"step": n, name: value}`` line per step; NaN written as JSON ``NaN``."""
    with path.open("w") as f:
        for row in history:
            clean = {
                k: (v if isinstance(v, int) or not math.isfinite(v) else float(f"{v:.6g}"))
                for k, v in row.items()
            }
            f.write(json.dumps(clean) + "\n")


def main() -> None:
    from gapwatch.workers import RunConfig, train

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args()
    for run, extra in RUNS.items():
        name = stem(run, args.lr, args.seed)
        cfg = RunConfig.from_dict(
            {"name": name, "steps": args.steps, "seed": args.seed, "lr": args.lr}
            | {"num_threads": 2, **extra}
        )
        hist = [{"step": r.step, **r.metrics} for r in train(cfg)]
        write_jsonl(hist, HERE / f"{name}.jsonl")
        print(f"wrote {HERE / f'{name}.jsonl'} ({len(hist)} steps)")


if __name__ == "__main__":
    main()
