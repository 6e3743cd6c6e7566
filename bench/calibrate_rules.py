"""Pick the stop rules' thresholds from recorded runs, and test them on runs not used.

    .venv/bin/python bench/calibrate_rules.py [--truth DIR]

Reads the ground-truth grid (``bench/ground_truth.py``; labels as
``bench/detection_bench.py`` gives them) and splits it by seed: **calibration** runs are
seeds 0 and 1 (their dense controls and every treatment), **held-out** runs seeds 2 and 3
with the controls of seeds 2-7. Per rule, every setting of a small grid of its thresholds
is replayed alone over the calibration runs; the chosen setting is the one with no false
stop (no stop of a control or of a treatment that did not collapse) that catches the most
collapses, then with the smallest total delay after onset, then the fewest trial-steps.
The chosen settings together are then scored on the held-out runs, which played no part
in choosing them.

For ``post_tool_tail_growth`` and ``ess_collapse`` it also reports the separation of their
statistic between healthy and collapsing runs: the largest post-tool p95 growth (and its
excess over the text slice's growth) and the smallest post-tool ESS after the baseline
steps, up to 2 steps after onset for collapsed runs and over the whole run for healthy
ones.

Writes bench/results/calibrate_rules.md.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import detection_bench as db  # noqa: E402
from _machine import machine  # noqa: E402

from gapwatch.correction import names as N  # noqa: E402
from gapwatch.orchestrator import rules  # noqa: E402

OUT = ROOT / "bench" / "results" / "calibrate_rules.md"
CALIBRATION_SEEDS = frozenset({0, 1})

GRIDS: dict[str, dict[str, list[Any]]] = {
    "score_collapse": {
        "drop": [None, 0.4, 1.0, 1.5],
        "window": [1, 5],
        "baseline_steps": [3, 10],
        "control_margin": [None, 1.0, 1.2, 1.5],
    },
    "constant_advantage": {
        "frac": [0.7, 0.8, 0.9, 1.0],
        "k": [2, 3, 4],
        "saturation": [None, 0.25, 0.5, 1.0],
    },
    "length_runaway": {"clip_level": [0.3, 0.5, 0.9], "k": [2, 3]},
    "post_tool_tail_growth": {"factor": [2.0, 3.0, 4.0, 6.0, 10.0], "k": [2, 3]},
    "ess_collapse": {"floor": [0.05, 0.1, 0.2, 0.3], "k": [2, 3, 5]},
    "grad_norm_blowup": {"factor": [5.0, 10.0, 20.0, 50.0], "window": [5, 50]},
    "entropy_collapse": {"frac": [0.05, 0.1, 0.2]},
    "length_collapse": {"frac": [0.1, 0.2, 0.3]},
    "kl_blowup": {"factor": [5.0, 10.0], "min_kl": [0.5, 1.0, 10.0]},
}
"""The thresholds tried per rule (the rest keep their defaults)."""


@dataclass
class Trial:
    """One rule setting scored on a set of runs."""

    params: dict[str, Any]
    score: db.Score

    @property
    def late(self) -> int:
        """Total steps stopped after onset (stops before onset count 0)."""
        return sum(max(d, 0) for d in self.score.delays)

    def key(self) -> tuple[int, int, int]:
        return (-self.score.caught, self.late, self.score.steps_used)


def split(runs: list[db.Run]) -> tuple[list[db.Run], list[db.Run]]:
    """(calibration, held-out) runs; each treatment keeps its own control."""
    cal = [r for r in runs if r.seed in CALIBRATION_SEEDS]
    held = [r for r in runs if r.seed not in CALIBRATION_SEEDS]
    return cal, held


def sweep_rule(name: str, runs: list[db.Run]) -> list[Trial]:
    grid = GRIDS[name]
    out = []
    for values in itertools.product(*grid.values()):
        params = dict(zip(grid, values, strict=True))
        # every rule judged as a stop (post_tool_tail_growth only warns by default)
        ruleset = rules.build({name: {**params, "action": "stop"}}).select([name])
        out.append(Trial(params, db.score(name, db.gapwatch(ruleset, runs), runs)))
    return out


def choose(trials: list[Trial]) -> Trial | None:
    clean = [t for t in trials if t.score.false_stops == 0 and t.score.caught > 0]
    return min(clean, key=Trial.key) if clean else None


def fmt_params(p: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items())


# --- separation of the tail and ESS statistics -------------------------------------------
def _window(run: db.Run) -> list[db.Row]:
    """The steps a rule may use to judge the run: up to onset + 2 for a collapse."""
    if run.collapsed and run.onset is not None:
        return [r for r in run.rows if r["step"] <= run.onset + 2]
    return run.rows


def tail_growth(run: db.Run, baseline: int = 3, window: int = 3) -> tuple[float, float] | None:
    """Largest rolling post-tool p95 growth over its baseline and its excess over the text
    slice's growth, as post_tool_tail_growth computes them (floored at 0.01)."""
    rows = _window(run)
    pt = [r.get(N.tail("post_tool", "p95")) for r in rows]
    tx = [r.get(N.tail("text", "p95")) for r in rows]

    def med(v: list[float | None]) -> float | None:
        v2 = [x for x in v if x is not None]
        return max(statistics.median(v2), 0.01) if v2 else None

    bp, bt = med(pt[:baseline]), med(tx[:baseline])
    if bp is None or bt is None:
        return None
    best: tuple[float, float] | None = None
    for i in range(baseline + window, len(rows) + 1):
        rp, rt = med(pt[i - window : i]), med(tx[i - window : i])
        if rp is None or rt is None:
            continue
        g = rp / bp
        ex = g / max(rt / bt, 1.0)
        if best is None or min(g, ex) > min(best):
            best = (g, ex)
    return best


def ess_low(run: db.Run, baseline: int = 3) -> tuple[float, float] | None:
    """(median ESS of the baseline steps, lowest ESS after them)."""
    vals = [r.get(N.ess("post_tool")) for r in _window(run)]
    early = [v for v in vals[:baseline] if v is not None]
    late = [v for v in vals[baseline:] if v is not None]
    if not early or not late:
        return None
    return statistics.median(early), min(late)


def quantiles(v: list[float]) -> str:
    if not v:
        return "-"
    q = statistics.quantiles(v, n=10, method="inclusive") if len(v) > 1 else [v[0]] * 9
    return f"{min(v):.3g} / {q[4]:.3g} / {q[8]:.3g} / {max(v):.3g} (n={len(v)})"


def separation(runs: list[db.Run]) -> list[str]:
    treat = [r for r in runs if r.role == "treatment"]
    groups = {
        "collapsed treatments (to onset + 2)": [r for r in treat if r.collapsed],
        "treatments that did not collapse": [r for r in treat if not r.collapsed],
        "dense controls": [r for r in runs if r.role == "control"],
    }
    lines = [
        "| runs | post-tool p95 growth: min / median / p90 / max | growth beyond the text "
        "slice's | ESS floor (lowest after step 3): min / median / p90 / max |",
        "|---|---|---|---|",
    ]
    for label, group in groups.items():
        tg = [t for r in group if (t := tail_growth(r)) is not None]
        es = [e[1] for r in group if (e := ess_low(r)) is not None]
        lines.append(
            f"| {label} | {quantiles([t[0] for t in tg])} | {quantiles([t[1] for t in tg])} "
            f"| {quantiles(es)} |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", type=Path, default=db.TRUTH)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    runs = db.load(args.truth, quick=False)
    cal, held = split(runs)
    lines = [
        "## Calibrating the stop rules (bench/calibrate_rules.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- ground truth: `{db.rel(args.truth)}`; calibration: seeds "
        f"{', '.join(map(str, sorted(CALIBRATION_SEEDS)))} ({len(cal)} runs, "
        f"{sum(r.collapsed for r in cal)} collapsed); held out: the other seeds ({len(held)} "
        f"runs, {sum(r.collapsed for r in held)} collapsed). Each codec strength is a sweep "
        "with its own copy of the controls.",
        "",
        "### Each rule alone: the best setting without a false stop on the calibration runs",
        "",
        "| rule | settings tried | chosen | caught (calibration) | steps late after onset "
        "(total) | clean settings |",
        "|---|---|---|---|---|---|",
    ]
    chosen: dict[str, dict[str, Any]] = {}
    for name in GRIDS:
        trials = sweep_rule(name, cal)
        best = choose(trials)
        n_clean = sum(t.score.false_stops == 0 for t in trials)
        if best is None:
            lines.append(
                f"| {name} | {len(trials)} | none catches a collapse without a false stop "
                f"| - | - | {n_clean} |"
            )
            continue
        chosen[name] = best.params
        lines.append(
            f"| {name} | {len(trials)} | {fmt_params(best.params)} | {best.score.caught} of "
            f"{best.score.collapses} | {best.late} | {n_clean} |"
        )
    settings: dict[str, Any] = {n: {**p, "action": "stop"} for n, p in chosen.items()}
    for name in GRIDS:
        settings.setdefault(name, {"enabled": False})
    calibrated = rules.build(settings)
    lines += [
        "",
        "### The chosen settings together, and today's defaults",
        "",
        f"Chosen: `{settings}`.",
        "",
        *db.HEAD,
    ]
    policies = (
        ("chosen settings", calibrated),
        ("defaults (rules.build())", rules.build()),
    )
    for label, rs in policies:
        for part, part_runs in (("calibration", cal), ("held out", held), ("all", runs)):
            sc = db.score(label, db.gapwatch(rs, part_runs), part_runs)
            lines.append(db.row(sc, f"{label}, {part}"))
    lines += [
        "",
        "### Separation: post-tool tail growth and ESS, all runs",
        "",
        *separation(runs),
        "",
        f"({time.perf_counter() - t0:.0f} s; command: `python bench/calibrate_rules.py`)",
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
