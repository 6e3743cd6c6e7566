"""The collapse, drawn from a real run pair in a store: the three panels of the account.

    .venv/bin/python bench/collapse_figure.py --db sqlite:///gapwatch.db [--sweep quickstart]
        [--seed 0] [--treatment TRIAL_KEY] [--out docs/img/collapse.png]

Draws, for a compressed run and its dense control (the same pair key): the task score
per step with the zero line and the stop step; the probability gap per step on a log axis;
tokens per interaction against the per-interaction budget. The treatment is the first
stopped one of the seed (or ``--treatment``). Every number comes from the store.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gapwatch.correction import names as N  # noqa: E402
from gapwatch.store import open_store  # noqa: E402


def _series(st: Any, run_id: int, name: str) -> tuple[list[int], list[float]]:
    rows = [h for h in st.history(run_id, names=[name]) if h.get(name) is not None]
    return [int(h["step"]) for h in rows], [float(h[name]) for h in rows]


def pick(st: Any, sweep: str | None, seed: int, treatment: str | None) -> tuple[Any, Any]:
    sweeps = {s.id: s.name for s in st.sweeps()}
    runs = [r for r in st.runs() if sweep is None or sweeps.get(r.sweep_id) == sweep]
    runs = [r for r in runs if r.seed == seed]
    if treatment is not None:
        treat = next((r for r in runs if r.trial_id == treatment), None)
    else:
        treated = [r for r in runs if r.role == "treatment"]
        treat = next((r for r in treated if r.status == "stopped"), treated[0] if treated else None)
    if treat is None:
        raise SystemExit(f"no treatment run for seed {seed} (sweep {sweep}) in the store")
    ctrl = next((r for r in runs if r.role == "control" and r.pair_key == treat.pair_key), None)
    if ctrl is None:
        raise SystemExit(f"no control shares the pair key {treat.pair_key} of {treat.trial_id}")
    return treat, ctrl


def draw(st: Any, treat: Any, ctrl: Any, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), constrained_layout=True)
    runs = [(ctrl, "dense control", "#1f77b4"), (treat, f"compressed: {treat.compression}, "
            f"{treat.correction}", "#d62728")]  # fmt: skip
    panels = [
        (N.SCORE_MEAN, "task score (mean)", False),
        (N.PROBS_DIFF_MEAN, "probability gap |p_trainer - p_sampler|", True),
        (N.RESPONSE_LENGTH_MEAN, "tokens per interaction", False),
    ]
    for ax, (name, title, log) in zip(axes, panels, strict=True):
        for run, label, colour in runs:
            x, y = _series(st, run.id, name)
            ax.plot(x, y, color=colour, label=label, lw=1.8)
        if name == N.SCORE_MEAN:
            ax.axhline(0.0, color="black", lw=0.8, ls="--")
        if name == N.RESPONSE_LENGTH_MEAN:
            _, budget = _series(st, treat.id, N.RESPONSE_BUDGET)
            if budget:
                ax.axhline(budget[0], color="gray", lw=1.0, ls=":", label="budget")
        if log:
            ax.set_yscale("log")
        if treat.stop_step is not None:
            ax.axvline(treat.stop_step, color="#d62728", lw=1.0, ls="-.",
                       label=f"stopped: {treat.stop_rule} @ {treat.stop_step}")  # fmt: skip
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].legend(fontsize=7, loc="best")
    axes[2].legend(fontsize=7, loc="best")
    fig.suptitle(f"seed {treat.seed}: {treat.trial_id} vs {ctrl.trial_id}", fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=None)
    ap.add_argument("--sweep", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--treatment", default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "collapse.png")
    args = ap.parse_args()
    st = open_store(args.db, read_only=True)
    treat, ctrl = pick(st, args.sweep, args.seed, args.treatment)
    draw(st, treat, ctrl, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
