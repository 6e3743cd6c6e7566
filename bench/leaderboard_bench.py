"""Do stops keep the leaderboard true? Each stopping policy's ranking of the corrections
against the ranking the runs earn when carried to the end.

    .venv/bin/python bench/leaderboard_bench.py [--truth DIR] [--quick]

Ground truth and policies as ``bench/detection_bench.py`` loads and replays them (its
``load``, ``gapwatch``, ``ray_scheduler`` and ``plateau``): runs trained to the end with
stopping off, one sweep per codec strength with its own dense controls, every run of a
sweep reporting step by step side by side.

**Final score.** The mean score of a run's last 5 steps; a stopped run's final score is
the mean of its last 5 steps up to and including the step it was stopped at (what a
leaderboard of the stopped sweep shows). Per codec strength and seed, the corrections
(the treatments) are ranked by final score; each policy's ranking is compared with the
no-stop ranking by Kendall's tau-b (ties counted as scipy's ``kendalltau`` counts them)
and by top-1 agreement (the no-stop winner is the policy's winner, ties included), and
summarised over seeds (mean, min-max). Also the leaderboard a user reads across seeds:
each correction's final score averaged over seeds. Trial-steps: steps run by every run
of the sweeps (controls included) against running each to the end.

Policies: no stop (the reference), gapwatch's default rules, gapwatch's ranking preset
(``rules: {preset: ranking}``, ``orchestrator/rules/presets.py``), Ray Tune's ASHA and
MedianStoppingRule with detection_bench's settings, and TrialPlateauStopper.

Writes bench/results/leaderboard_bench.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _machine, detection_bench, also when imported

import detection_bench as db  # noqa: E402
import ground_truth  # noqa: E402
from _machine import machine  # noqa: E402

from gapwatch.correction import names as N  # noqa: E402
from gapwatch.orchestrator import rules  # noqa: E402

OUT = ROOT / "bench" / "results" / "leaderboard_bench.md"
LAST = 5
"""Steps averaged into a final score (ground_truth.py's fate reads the same last 5)."""


# --- ranking helpers ---------------------------------------------------------------------


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of two equally long sequences (NaN where either is constant or
    shorter than 2): (concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y)) over
    the n0 = n(n-1)/2 pairs, a pair tied in both counted in neither. scipy's
    ``stats.kendalltau`` (variant "b") gives the same; scipy is not a dependency here."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau needs sequences of one length, got {len(x)} and {len(y)}")
    n = len(x)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                ties_x += 1
            if dy == 0:
                ties_y += 1
            if dx * dy > 0:
                concordant += 1
            elif dx * dy < 0:
                discordant += 1
    n0 = n * (n - 1) // 2
    denom = math.sqrt((n0 - ties_x) * (n0 - ties_y))
    return (concordant - discordant) / denom if denom > 0 else math.nan


def top1_agrees(truth: dict[str, float], board: dict[str, float]) -> bool:
    """Whether a winner of ``truth`` (the no-stop board) is a winner of ``board`` (ties:
    any tied winner counts)."""
    best_t, best_b = max(truth.values()), max(board.values())
    return any(truth[k] == best_t and board[k] == best_b for k in truth)


def final_score(run: db.Run, stop: int | None) -> float:
    """The mean score of ``run``'s last :data:`LAST` steps up to ``stop`` (None: the end)."""
    scores = [float(r[N.SCORE_MEAN]) for r in run.rows
              if (stop is None or int(r["step"]) <= stop)
              and math.isfinite(r.get(N.SCORE_MEAN, math.nan))]  # fmt: skip
    return statistics.fmean(scores[-LAST:]) if scores else math.nan


def correction_of(run: db.Run) -> str:
    """``tis_C2`` from ``topk_keep0.5/s0-topk_keep0.5-tis_C2`` (ground_truth.py's names)."""
    return run.key.split("/", 1)[1].split("-", 2)[2]


Board = dict[str, float]
"""Correction -> final score."""


def boards(runs: list[db.Run], stops: db.Stops) -> dict[tuple[str, int], Board]:
    """(sweep, seed) -> the treatments' final scores under ``stops``."""
    out: dict[tuple[str, int], Board] = defaultdict(dict)
    for run in runs:
        if run.role == "treatment":
            out[run.sweep, run.seed][correction_of(run)] = final_score(run, stops.get(run.key))
    return dict(out)


def over_seeds(bs: dict[tuple[str, int], Board]) -> dict[str, Board]:
    """Sweep -> each correction's final score averaged over the seeds (the leaderboard a
    user reads)."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (sweep, _), board in bs.items():
        for corr, v in board.items():
            acc[sweep][corr].append(v)
    return {s: {c: statistics.fmean(v) for c, v in b.items()} for s, b in acc.items()}


def compare(truth: Board, board: Board) -> tuple[float, bool]:
    """(Kendall tau-b, top-1 agreement) of ``board`` against ``truth`` over their names.
    A board whose scores are all equal (every run stopped at step 1, before any update,
    where a seed's runs all score alike) ranks nothing: tau 0, not undefined; tau stays
    NaN where ``truth`` itself is all equal."""
    keys = sorted(truth)
    t, b = [truth[k] for k in keys], [board[k] for k in keys]
    tau = kendall_tau(t, b)
    if math.isnan(tau) and len(set(t)) > 1:
        tau = 0.0
    return tau, top1_agrees(truth, board)


def dead_tied(board: Board) -> Board:
    """``board`` with every final score below ``ground_truth.COLLAPSED_BELOW`` set to it:
    dead runs share the last place (their order, -0.1 to +0.05, is the noise of a policy
    that no longer calls the tool, not a ranking of corrections)."""
    floor = ground_truth.COLLAPSED_BELOW
    return {k: max(v, floor) for k, v in board.items()}


# --- scoring -----------------------------------------------------------------------------


@dataclass
class Fidelity:
    """One policy's leaderboard fidelity in one sweep (codec strength)."""

    taus: list[float] = field(default_factory=list)
    """Per seed."""
    taus_dead: list[float] = field(default_factory=list)
    """Per seed, dead runs tied (:func:`dead_tied`); NaN where every run of the seed died."""
    top1: list[bool] = field(default_factory=list)
    """Per seed."""
    pooled_tau: float = math.nan
    """Of the over-seeds leaderboard."""
    pooled_top1: bool = False
    steps_used: int = 0
    steps_all: int = 0
    winner: str = ""
    """The over-seeds leaderboard's winner under this policy."""


def fidelity(runs: list[db.Run], stops: db.Stops) -> dict[str, Fidelity]:
    """Sweep -> the policy's fidelity against the no-stop leaderboard."""
    truth, got = boards(runs, {}), boards(runs, stops)
    out: dict[str, Fidelity] = defaultdict(Fidelity)
    for key in sorted(truth):
        tau, top = compare(truth[key], got[key])
        out[key[0]].taus.append(tau)
        out[key[0]].taus_dead.append(compare(dead_tied(truth[key]), dead_tied(got[key]))[0])
        out[key[0]].top1.append(top)
    t_pooled, g_pooled = over_seeds(truth), over_seeds(got)
    for sweep, board in g_pooled.items():
        f = out[sweep]
        f.pooled_tau, f.pooled_top1 = compare(t_pooled[sweep], board)
        f.winner = max(sorted(board), key=lambda k: board[k])
    for run in runs:
        n = len(run.rows)
        stop = stops.get(run.key)
        out[run.sweep].steps_all += n
        out[run.sweep].steps_used += n if stop is None else min(stop, n)
    return dict(out)


def policies(runs: list[db.Run]) -> list[tuple[str, db.Stops]]:
    from ray.tune.schedulers import AsyncHyperBandScheduler, MedianStoppingRule

    steps = max(len(r.rows) for r in runs)
    return [
        ("no stop (reference)", {}),
        ("gapwatch: default rules", db.gapwatch(rules.build(), runs)),
        ("gapwatch: ranking preset", db.gapwatch(rules.build({"preset": "ranking"}), runs)),
        ("Ray Tune ASHA (grace 1, reduction 4)", db.ray_scheduler(
            lambda: AsyncHyperBandScheduler(time_attr="training_iteration", metric="score",
                                            mode="max", max_t=steps, grace_period=1),
            runs)),
        ("Ray Tune MedianStoppingRule (grace 3, min 3 samples)", db.ray_scheduler(
            lambda: MedianStoppingRule(time_attr="training_iteration", metric="score",
                                       mode="max", grace_period=3, min_samples_required=3),
            runs)),
        ("Ray Tune TrialPlateauStopper (std 0.01, 4 results)", db.plateau(runs)),
    ]  # fmt: skip


def _spread(v: list[float]) -> str:
    ok = [x for x in v if not math.isnan(x)]
    if not ok:
        return "- (all dead)"
    seeds = f", {len(ok)} of {len(v)} seeds" if len(ok) < len(v) else ""
    return f"{statistics.fmean(ok):+.2f} ({min(ok):+.2f} to {max(ok):+.2f}{seeds})"


def table(results: list[tuple[str, dict[str, Fidelity]]], sweeps: list[str]) -> list[str]:
    lines = [
        "| policy | codec strength | Kendall tau per seed: mean (min to max) | same, dead runs "
        "tied | top-1 per seed | over-seeds board: tau, top-1, winner | trial-steps used "
        "(of all) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, fid in results:
        for sweep in sweeps:
            f = fid[sweep]
            lines.append(
                f"| {name} | {sweep} | {_spread(f.taus)} | {_spread(f.taus_dead)} | "
                f"{sum(f.top1)} of {len(f.top1)} | "
                f"{f.pooled_tau:+.2f}, {'yes' if f.pooled_top1 else 'NO'}, {f.winner} | "
                f"{f.steps_used} of {f.steps_all} ({f.steps_used / f.steps_all:.0%}) |"
            )
        used = sum(f.steps_used for f in fid.values())
        total = sum(f.steps_all for f in fid.values())
        taus = [t for f in fid.values() for t in f.taus]
        dead = [t for f in fid.values() for t in f.taus_dead]
        top = [t for f in fid.values() for t in f.top1]
        lines.append(
            f"| **{name}** | all | {_spread(taus)} | {_spread(dead)} | {sum(top)} of {len(top)} | "
            f"{sum(f.pooled_top1 for f in fid.values())} of {len(fid)} winners kept | "
            f"{used} of {total} ({used / total:.0%}) |"
        )
    return lines


CURVE_K = (2, 3, 4, 5, 8)
"""The ranking preset's ``constant_advantage.k`` values of the trade-off table."""


def ranking_curve(runs: list[db.Run], sweeps: list[str]) -> list[str]:
    """The ranking preset with ``constant_advantage.k`` varied: fidelity against steps."""
    lines = [
        "| ranking preset, constant_advantage.k | "
        + " | ".join(f"{s}: tau dead tied, top-1" for s in sweeps)
        + " | collapses stopped | trial-steps used |",
        "|---|" + "---|" * len(sweeps) + "---|---|",
    ]
    for k in CURVE_K:
        stops = db.gapwatch(
            rules.build({"preset": "ranking", "constant_advantage": {"k": k}}), runs
        )
        fid, sc = fidelity(runs, stops), db.score(f"k={k}", stops, runs)
        cells = [f"{_spread(fid[s].taus_dead)}, {sum(fid[s].top1)} of {len(fid[s].top1)}"
                 for s in sweeps]  # fmt: skip
        lines.append(
            f"| {k} | {' | '.join(cells)} | {sc.caught} of {sc.collapses} "
            f"(false: {sc.false_stops}) | {sc.steps_used} of {sc.steps_all} |"
        )
    return lines


def truth_boards(runs: list[db.Run], sweeps: list[str]) -> list[str]:
    """The no-stop over-seeds leaderboard per sweep (top 3 and the range)."""
    out = []
    for sweep, board in sorted(over_seeds(boards(runs, {})).items()):
        ranked = sorted(board.items(), key=lambda kv: -kv[1])
        top = ", ".join(f"{k} {v:+.3f}" for k, v in ranked[:3])
        out.append(f"- {sweep}: {top}; last {ranked[-1][0]} {ranked[-1][1]:+.3f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", type=Path, default=db.TRUTH)
    ap.add_argument("--quick", action="store_true", help="seeds 0 and 1 only")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not (args.truth / "index.json").is_file():
        ap.error(f"{args.truth} holds no index.json; pass a grid bench/ground_truth.py wrote")
    t0 = time.perf_counter()
    runs = db.load(args.truth, args.quick)
    sweeps = sorted({r.sweep for r in runs})
    results = [(name, fidelity(runs, stops)) for name, stops in policies(runs)]
    wall = time.perf_counter() - t0
    seeds = sorted({r.seed for r in runs if r.role == "treatment"})
    lines = [
        "## Do stops keep the leaderboard true? (bench/leaderboard_bench.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `python bench/leaderboard_bench.py{' --quick' if args.quick else ''}`"
        f" ({wall:.0f} s)",
        f"- ground truth: `{db.rel(args.truth)}`, {len(runs)} runs; per codec strength and "
        f"seed ({len(seeds)} seeds: {', '.join(map(str, seeds))}) the "
        f"{len({correction_of(r) for r in runs if r.role == 'treatment'})} corrections ranked "
        f"by final score (mean of the last {LAST} steps; a stopped run's last {LAST} up to "
        "its stop)",
        "- no-stop leaderboard over seeds (the reference):",
        *truth_boards(runs, sweeps),
        "",
        *table(results, sweeps),
        "",
        "### The ranking preset's trade-off: steps of no learning signal before a stop",
        "",
        *ranking_curve(runs, sweeps),
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
