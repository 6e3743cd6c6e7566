"""Are the stops right? Every stopping policy replayed over runs recorded to the end.

    .venv/bin/python bench/detection_bench.py [--truth DIR] [--quick]

Ground truth: runs trained to their last step with stopping off (``bench/ground_truth.py``
writes them: one ``{"step": n, ...}`` JSONL per run and an ``index.json``). A run is
**collapsed** when the mean score of its last 5 steps is below 0.05 (a dead policy scores
-0.1 to +0.01; ``ground_truth.COLLAPSED_BELOW`` says why not zero); its **onset** is the
first step from which the score stays below that to the end. Every other run is healthy.
Each codec strength is one sweep with its own dense controls.

Each policy sees each run's steps in order (treatments with their paired control's steps
as they come, as a sweep's Monitor does) and stops it at most once:

- gapwatch's default rules (``orchestrator.rules.build()``), and each rule alone;
- Ray Tune's ``MedianStoppingRule``, ``AsyncHyperBandScheduler`` (ASHA) and
  ``TrialPlateauStopper``, through their own classes, on the mean score, with every run
  of a sweep reporting step by step side by side (as trials running at once);
- the Post-Training Toolkit's GRPO heuristics with their own window and minimum-step
  settings: truncation rate (the clip ratio) > 0.3 and group reward std < 0.01, each the
  mean of the last 20 steps, from step 30 and 40 on;
- rlwatch 0.5.1's ``DetectorSuite`` with its defaults, in its own virtual environment
  (``bench/.venv-rlwatch``, made on first use: ``pip install rlwatch==0.5.1``); its first
  critical alert is its stop.

Per policy: collapses caught, the delay from onset to the stop (median, worst), false
stops of controls and of healthy treatments, and the trial-steps used against running
every run to the end. Then, for gapwatch's defaults: the share of collapses stopped
within 2 steps of onset (at or before onset + 2), which rule made each stop and how late
(the late stops, by rule), the same for the rules as they were before issue 37 (the
control test in batch spreads only, a fixed streak of 2 for the zero-advantage share),
and how much later ``constant_advantage``'s small-batch streak stops each collapse than
the fixed one. Last, the control test's false stops on simulated pairs of runs alike
(``control_z`` and ``noise_steps`` around their defaults, seeded): what its line rests on.
Writes bench/results/detection_bench.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _machine, also when imported (the smoke test)

import ground_truth  # noqa: E402
from _machine import machine  # noqa: E402  (bench/ is on sys.path as a script)

from gapwatch.correction import names as N  # noqa: E402
from gapwatch.orchestrator import rules  # noqa: E402
from gapwatch.orchestrator.watch.logs import read_log  # noqa: E402

OUT = ROOT / "bench" / "results" / "detection_bench.md"
TRUTH = ROOT / "bench" / "results" / "ground_truth" / "grid"
RLWATCH_VENV = ROOT / "bench" / ".venv-rlwatch"
Row = dict[str, Any]


@dataclass
class Run:
    """One recorded run and what it really did."""

    key: str
    role: str
    sweep: str
    """Runs that would have run side by side (one codec strength's sweep)."""
    control: str | None
    rows: list[Row]
    seed: int = -1
    fate: str = ""
    """``collapsed``, ``learns`` or ``stalls`` (``bench/ground_truth.py``'s fates)."""
    collapsed: bool = False
    onset: int | None = None


def other_grid(truth: Path) -> str | None:
    """The folder name of a ground truth other than the full grid (None for the full grid):
    what a bench appends to its fragment's file name, heading and command."""
    return None if truth.resolve() == TRUTH.resolve() else truth.name


def fragment(out: Path, truth: Path) -> Path:
    """``out`` for the full grid; ``<out stem>-<grid>.md`` beside it for another."""
    grid = other_grid(truth)
    return out if grid is None else out.with_name(f"{out.stem}-{grid}.md")


def rel(p: Path) -> str:
    """``p`` relative to the repository where it lies inside it."""
    return str(p.resolve().relative_to(ROOT)) if p.resolve().is_relative_to(ROOT) else str(p)


def label(run: Run) -> None:
    """Collapsed and onset as ``bench/ground_truth.py`` computes a run's fate (one definition:
    last-5-step mean score below ``ground_truth.COLLAPSED_BELOW``; onset: the first step
    from which the score stays below it)."""
    scored = [(int(r["step"]), float(r[N.SCORE_MEAN])) for r in run.rows
              if math.isfinite(r.get(N.SCORE_MEAN, math.nan))]  # fmt: skip
    f = ground_truth.fate([s for _, s in scored])
    run.fate = f["fate"]
    run.collapsed = f["fate"] == "collapsed"
    run.onset = scored[f["onset"] - 1][0] if run.collapsed and f["onset"] else None


def _rows(path: Path) -> list[Row]:
    """A recorded history as ``gapwatch replay`` reads it (gzipped files unpacked first)."""
    if path.suffix != ".gz":
        return read_log(path).rows
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        return read_log(plain).rows


def load(truth: Path, quick: bool) -> list[Run]:
    """The runs of ``truth/index.json`` as ``bench/ground_truth.py`` writes it, one sweep per
    codec strength, each with its own copy of the dense controls (as every sweep runs its
    own); ``--quick``: seeds 0 and 1 only."""
    index = json.loads((truth / "index.json").read_text())
    entries = [e for e in index["runs"] if not quick or int(e["seed"]) < 2]
    entries = [e for e in entries if ground_truth.history_file(truth, e["run"]) is not None]
    controls = [e for e in entries if e["role"] == "control"]
    treatments = [e for e in entries if e["role"] != "control"]
    strengths = sorted({ground_truth.label(e["codec"], e["codec_kwargs"]) for e in treatments})
    rows = {e["run"]: _rows(truth / ground_truth.history_file(truth, e["run"]).name)
            for e in entries}  # fmt: skip
    runs: list[Run] = []
    for sweep in strengths or ["controls"]:
        for e in controls:
            runs.append(
                Run(f"{sweep}/{e['run']}", "control", sweep, None, rows[e["run"]], e["seed"])
            )
        for e in treatments:
            if ground_truth.label(e["codec"], e["codec_kwargs"]) == sweep:
                ctl = f"{sweep}/s{e['seed']}-control"
                run = Run(f"{sweep}/{e['run']}", "treatment", sweep, ctl, rows[e["run"]], e["seed"])
                runs.append(run)
    for run in runs:
        label(run)
    return runs


# --- the policies ------------------------------------------------------------------------

Stops = dict[str, int]
"""Run key -> the step the policy stops it at (absent: never)."""


def gapwatch(ruleset: rules.RuleSet, runs: list[Run], *, fires: bool = False) -> Stops:
    """Each run's first stop under ``ruleset`` (``fires``: the step at which its first
    warning or stop is raised; bench/lead_time_bench.py's "first fire")."""
    by_key = {r.key: r for r in runs}
    out: Stops = {}
    for run in runs:
        w = ruleset.watch()
        ctl = iter(by_key[run.control].rows if run.control in by_key else ())
        pending = next(ctl, None)
        for row in run.rows:
            while pending is not None and pending["step"] <= row["step"]:
                w.control(pending)
                pending = next(ctl, None)
            new = w.step(row)
            if fires and new:
                out[run.key] = int(row["step"])
                break
            if w.first_stop is not None:
                out[run.key] = int(w.first_stop.step)
                break
    return out


def side_by_side(runs: list[Run]) -> Iterable[tuple[int, Run, Row]]:
    """Every sweep's runs, step by step, interleaved (as trials running at once)."""
    longest = max(len(r.rows) for r in runs)
    for i in range(longest):
        for run in runs:
            if i < len(run.rows):
                yield i + 1, run, run.rows[i]


def ray_scheduler(make: Callable[[], Any], runs: list[Run]) -> Stops:
    """A Ray Tune TrialScheduler fed every run's score, each run a real Trial."""
    from ray import tune
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler

    tune.register_trainable("gapwatch_replay", lambda config: None)
    out: Stops = {}
    for sweep in sorted({r.sweep for r in runs}):
        members = [r for r in runs if r.sweep == sweep]
        sched = make()
        trials = {
            r.key: Trial("gapwatch_replay", config={"key": r.key}, stub=True) for r in members
        }
        controller = _Controller(list(trials.values()))
        for t in trials.values():
            sched.on_trial_add(controller, t)
        for it, run, row in side_by_side(members):
            if run.key in out or row.get(N.SCORE_MEAN) is None:
                continue
            result = {"score": row[N.SCORE_MEAN], "training_iteration": it}
            if sched.on_trial_result(controller, trials[run.key], result) == TrialScheduler.STOP:
                out[run.key] = int(row["step"])
    return out


class _Controller:
    """What Ray's schedulers ask of the Tune controller: the trials."""

    def __init__(self, trials: list[Any]) -> None:
        self.trials = trials

    def get_trials(self) -> list[Any]:
        return self.trials

    def get_live_trials(self) -> list[Any]:
        return self.trials


def plateau(runs: list[Run]) -> Stops:
    from ray.tune.stopper import TrialPlateauStopper

    stopper = TrialPlateauStopper(metric="score")
    out: Stops = {}
    for run in runs:
        for row in run.rows:
            if row.get(N.SCORE_MEAN) is not None and stopper(run.key, {"score": row[N.SCORE_MEAN]}):
                out[run.key] = int(row["step"])
                break
    return out


def post_training_toolkit(runs: list[Run]) -> Stops:
    """truncation_rate > 0.3 (window 20, from 30 steps) or group_reward_std < 0.01
    (window 20, from 40 steps): the toolkit's YAML heuristics, mean of the window."""
    out: Stops = {}
    for run in runs:
        clip: list[float] = []
        gstd: list[float] = []
        for n, row in enumerate(run.rows, start=1):
            if (c := row.get(N.CLIP_RATIO)) is not None:
                clip.append(c)
            g = row.get(N.SCORE_GROUP_STD, row.get(N.SCORE_STD))
            if g is not None:
                gstd.append(g)
            trunc = n >= 30 and clip and statistics.mean(clip[-20:]) > 0.3
            flat = n >= 40 and gstd and statistics.mean(gstd[-20:]) < 0.01
            if trunc or flat:
                out[run.key] = int(row["step"])
                break
    return out


RLWATCH_RUNNER = r"""
import json, sys
from rlwatch.config import RLWatchConfig
from rlwatch.detectors import DetectorSuite
out = {}
for line in sys.stdin:
    run = json.loads(line)
    suite = DetectorSuite(RLWatchConfig())
    for r in run["rows"]:
        alerts = suite.check_step(
            int(r["step"]), entropy=r.get("actor/entropy"), kl_divergence=r.get("actor/kl_to_ref"),
            reward_mean=r.get("critic/score/mean"), reward_std=r.get("critic/score/std"),
            loss=r.get("actor/pg_loss"), grad_norm=r.get("actor/grad_norm"))
        if any(a.severity == "critical" for a in alerts):
            out[run["key"]] = int(r["step"])
            break
print(json.dumps(out))
"""


def rlwatch(runs: list[Run]) -> Stops | None:
    """rlwatch 0.5.1 in its own venv; None where it cannot be installed."""
    py = RLWATCH_VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(RLWATCH_VENV)], check=True)
        res = subprocess.run([str(py), "-m", "pip", "install", "-q", "rlwatch==0.5.1"],
                             capture_output=True, text=True, check=False)  # fmt: skip
        if res.returncode != 0:
            print(f"[detection] rlwatch not installed: {res.stderr.strip()[-300:]}")
            return None
    payload = "".join(json.dumps({"key": r.key, "rows": r.rows}) + "\n" for r in runs)
    res = subprocess.run([str(py), "-c", RLWATCH_RUNNER], input=payload, capture_output=True,
                         text=True, check=False)  # fmt: skip
    if res.returncode != 0:
        print(f"[detection] rlwatch failed: {res.stderr.strip()[-300:]}")
        return None
    return {k: int(v) for k, v in json.loads(res.stdout).items()}


# --- scoring ----------------------------------------------------------------------------


@dataclass
class Score:
    policy: str
    caught: int = 0
    collapses: int = 0
    delays: list[int] = field(default_factory=list)
    false_controls: int = 0
    false_treatments: int = 0
    steps_used: int = 0
    steps_all: int = 0

    @property
    def false_stops(self) -> int:
        return self.false_controls + self.false_treatments


def score(policy: str, stops: Stops, runs: list[Run]) -> Score:
    sc = Score(policy)
    for run in runs:
        n = len(run.rows)
        stop = stops.get(run.key)
        sc.steps_all += n
        sc.steps_used += n if stop is None else min(stop, n)
        if run.collapsed:
            sc.collapses += 1
            if stop is not None:
                sc.caught += 1
                sc.delays.append(stop - int(run.onset or stop))
        elif stop is not None:
            if run.role == "control":
                sc.false_controls += 1
            else:
                sc.false_treatments += 1
    return sc


def evaluate(runs: list[Run], *, with_rlwatch: bool = True) -> list[Score]:
    from ray.tune.schedulers import AsyncHyperBandScheduler, MedianStoppingRule

    steps = max(len(r.rows) for r in runs)
    policies: list[tuple[str, Stops | None]] = [
        ("gapwatch: default rules", gapwatch(rules.build(), runs))
    ]
    for name in rules.names():
        policies.append((f"gapwatch: {name} alone", gapwatch(rules.build().select([name]), runs)))
    policies += [
        ("Ray Tune MedianStoppingRule (grace 3, min 3 samples)", ray_scheduler(
            lambda: MedianStoppingRule(time_attr="training_iteration", metric="score",
                                       mode="max", grace_period=3, min_samples_required=3),
            runs)),
        ("Ray Tune ASHA (grace 1, reduction 4)", ray_scheduler(
            lambda: AsyncHyperBandScheduler(time_attr="training_iteration", metric="score",
                                            mode="max", max_t=steps, grace_period=1),
            runs)),
        ("Ray Tune TrialPlateauStopper (std 0.01, 4 results)", plateau(runs)),
        ("Post-Training Toolkit (truncation > 0.3 @30, group std < 0.01 @40)",
         post_training_toolkit(runs)),
    ]  # fmt: skip
    if with_rlwatch:
        policies.append(("rlwatch 0.5.1 (first critical alert)", rlwatch(runs)))
    return [score(name, stops, runs) for name, stops in policies if stops is not None]


HEAD = [
    "| policy | collapses caught | delay after onset, median / worst | false stops: controls, "
    "healthy treatments | trial-steps used (of all) |",
    "|---|---|---|---|---|",
]
"""The head of a table of :func:`row`s (also bench/calibrate_rules.py's)."""


def row(s: Score, policy: str | None = None, mark: str = "") -> str:
    """One policy's scores as a table row (``policy`` overrides the score's name)."""
    delay = f"{statistics.median(s.delays):+g} / {max(s.delays):+d}" if s.delays else "-"
    return (
        f"| {policy or s.policy} | {s.caught} of {s.collapses} | {delay} | {s.false_controls}, "
        f"{s.false_treatments} | {s.steps_used} of {s.steps_all}{mark} |"
    )


def table(scores: list[Score]) -> list[str]:
    clean = [s for s in scores if s.false_stops == 0]
    fewest = min((s.steps_used for s in clean), default=None)
    return [*HEAD] + [
        row(
            s,
            mark=" (fewest, no false stop)"
            if s.false_stops == 0 and s.steps_used == fewest
            else "",
        )
        for s in scores
    ]


WITHIN = 2
"""A collapse is stopped in time when stopped at or before onset + ``WITHIN`` steps."""
BEFORE_37: dict[str, Any] = {
    "score_collapse": {"control_z": None},
    "constant_advantage": {"chance": None, "dead_share": None},
}
"""The rules as they were before issue 37, where its changes have a setting that turns
them off (``length_at_cap``'s patience has none, and catches no ground-truth collapse)."""


def firsts(ruleset: rules.RuleSet, runs: list[Run]) -> dict[str, rules.Decision]:
    """Each run's first stop under ``ruleset`` (the decision: its rule and step)."""
    by_key = {r.key: r for r in runs}
    out: dict[str, rules.Decision] = {}
    for run in runs:
        w = ruleset.watch()
        ctl = iter(by_key[run.control].rows if run.control in by_key else ())
        pending = next(ctl, None)
        for row in run.rows:
            while pending is not None and pending["step"] <= row["step"]:
                w.control(pending)
                pending = next(ctl, None)
            w.step(row)
            if w.first_stop is not None:
                out[run.key] = w.first_stop
                break
    return out


def in_time(stops: Stops, runs: list[Run]) -> tuple[int, int, int]:
    """(collapses stopped at or before onset + WITHIN, of which before onset, collapses)."""
    col = [r for r in runs if r.collapsed]
    ok = [r for r in col if r.key in stops and stops[r.key] - (r.onset or stops[r.key]) <= WITHIN]
    early = [r for r in ok if stops[r.key] < (r.onset or stops[r.key])]
    return len(ok), len(early), len(col)


def by_rule(ruleset: rules.RuleSet, runs: list[Run]) -> list[str]:
    """Per rule that made a first stop of a collapse: how many, how late, how many in time."""
    ds = firsts(ruleset, runs)
    rows: dict[str, list[int]] = {}
    for r in runs:
        if r.collapsed and r.key in ds:
            d = ds[r.key]
            rows.setdefault(d.rule, []).append(d.step - (r.onset or d.step))
    out = ["| rule | collapses it stopped first | delay, median / worst | within 2 steps |",
           "|---|---|---|---|"]  # fmt: skip
    for rule, delays in sorted(rows.items(), key=lambda kv: -len(kv[1])):
        out.append(f"| {rule} | {len(delays)} | {statistics.median(delays):+g} / {max(delays):+d} "
                   f"| {sum(d <= WITHIN for d in delays)} |")  # fmt: skip
    return out


def small_batch_delay(runs: list[Run]) -> list[str]:
    """``constant_advantage`` alone, its small-batch streak against the fixed one: per
    collapse both stop, how much later the new one stops it."""
    new = gapwatch(rules.build().select(["constant_advantage"]), runs)
    old = gapwatch(rules.build(BEFORE_37).select(["constant_advantage"]), runs)
    col = [r for r in runs if r.collapsed]
    both = [r for r in col if r.key in new and r.key in old]
    diffs = [new[r.key] - old[r.key] for r in both]
    counts = {d: diffs.count(d) for d in sorted(set(diffs))}
    lost = sum(1 for r in col if r.key in old and r.key not in new)
    gained = sum(1 for r in col if r.key in new and r.key not in old)
    return [
        "| | collapses stopped | later by (steps: runs) | stopped only by the fixed streak | "
        "only by the new |",
        "|---|---|---|---|---|",
        f"| constant_advantage alone | {len(both) + gained} (fixed streak: {len(both) + lost}) | "
        + ", ".join(f"{d:+d}: {n}" for d, n in counts.items())
        + f" | {lost} | {gained} |",
    ]


def small_batch_runs(groups: int, rate: float, ruleset: rules.RuleSet, runs: int = 200,
                     steps: int = 60) -> int:  # fmt: skip
    """Of ``runs`` simulated healthy runs (seeded) of ``groups`` groups a step, each all
    alike with probability ``rate`` and no other sign, how many ``ruleset`` stops."""
    import random

    stopped = 0
    for seed in range(runs):
        rng = random.Random(seed)
        w = ruleset.watch()
        for s in range(1, steps + 1):
            alike = sum(rng.random() < rate for _ in range(groups))
            w.step({"step": s, N.ZERO_ADV_FRAC: alike / groups, N.SCORE_MEAN: 0.3,
                    N.SCORE_STD: 0.4})  # fmt: skip
            if w.first_stop is not None:
                stopped += 1
                break
    return stopped


def small_batches() -> list[str]:
    """``constant_advantage`` on simulated healthy runs of small batches: the fixed streak
    of 2 against the streak chance rarely makes."""
    now = rules.build().select(["constant_advantage"])
    fixed = rules.build(BEFORE_37).select(["constant_advantage"])
    out = ["| groups a step | each all alike with probability | stopped by the fixed streak "
           "(of 200 runs of 60 steps) | by the small-batch streak |", "|---|---|---|---|"]  # fmt: skip
    for groups, rate in ((1, 0.5), (2, 0.5), (2, 0.7), (4, 0.5), (4, 0.8)):
        out.append(f"| {groups} | {rate:g} | {small_batch_runs(groups, rate, fixed)} "
                   f"| {small_batch_runs(groups, rate, now)} |")  # fmt: skip
    return out


def alike_pairs(z: float, noise_steps: int, pairs: int = 2000, steps: int = 100) -> float:
    """The share of simulated pairs of runs alike (the same mean, normal noise of a step
    mean, seeded) whose treatment ``score_collapse``'s control test alone stops."""
    import random

    rule = rules.get("score_collapse", control_z=z, noise_steps=noise_steps,
                     control_margin=None, drop=None)  # fmt: skip
    stopped = 0
    for seed in range(pairs):
        rng = random.Random(seed)
        w = rules.Watcher([rule])
        for s in range(1, steps + 1):
            w.control({"step": s, N.SCORE_MEAN: 0.4 + rng.gauss(0, 0.05)})
            w.step({"step": s, N.SCORE_MEAN: 0.4 + rng.gauss(0, 0.05)})
            if w.first_stop is not None:
                stopped += 1
                break
    return stopped / pairs


def control_line(runs: list[Run]) -> list[str]:
    """The control test's false stops on runs alike, and its catches in time on the
    ground truth, around its defaults."""
    out = ["| control_z | noise_steps | runs alike stopped (2000 pairs of 100 steps) | "
           "collapses stopped within 2 steps (defaults otherwise) |", "|---|---|---|---|"]  # fmt: skip
    for z in (2.0, 2.5, 3.0):
        for n in (10, 20):
            stops = gapwatch(rules.build({"score_collapse": {"control_z": z, "noise_steps": n}}),
                             runs)  # fmt: skip
            ok, _, col = in_time(stops, runs)
            out.append(f"| {z:g} | {n} | {100 * alike_pairs(z, n):.1f}% | {ok} of {col} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", type=Path, default=TRUTH)
    ap.add_argument("--quick", action="store_true", help="two seeds of each sweep")
    ap.add_argument("--no-rlwatch", action="store_true")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: bench/results/detection_bench.md; with another --truth "
                    "detection_bench-<its folder>.md")  # fmt: skip
    args = ap.parse_args()
    other = other_grid(args.truth)
    args.out = args.out or fragment(OUT, args.truth)
    t0 = time.perf_counter()
    runs = load(args.truth, args.quick)
    scores = evaluate(runs, with_rlwatch=not args.no_rlwatch)
    before = score("gapwatch: the rules before issue 37", gapwatch(rules.build(BEFORE_37), runs),
                   runs)  # fmt: skip
    default_stops = gapwatch(rules.build(), runs)
    ok, early, col = in_time(default_stops, runs)
    fates = {f: [r for r in runs if r.role == "treatment" and not r.collapsed and r.fate == f]
             for f in ("stalls", "learns")}  # fmt: skip
    by_fate = "; ".join(f"{sum(r.key in default_stops for r in rs)} of the {len(rs)} that "
                        f"{f.removesuffix('s')}" for f, rs in fates.items())  # fmt: skip
    ok_b, early_b, _ = in_time(gapwatch(rules.build(BEFORE_37), runs), runs)
    extra = [
        "",
        "### Stopped in time: within 2 steps of onset",
        "",
        "| policy | collapses stopped at or before onset + 2 | of them before onset |",
        "|---|---|---|",
        f"| gapwatch: default rules | {ok} of {col} ({100 * ok / max(col, 1):.0f}%) | {early} |",
        f"| gapwatch: the rules before issue 37 | {ok_b} of {col} ({100 * ok_b / max(col, 1):.0f}%)"
        f" | {early_b} |",
        "",
        "The rules before issue 37 (settings `"
        + str(BEFORE_37)
        + "`): "
        + row(before).strip("| ").replace(" | ", "; "),
        "",
        "### Which rule stops each collapse first, and how late",
        "",
        "Default rules:",
        "",
        *by_rule(rules.build(), runs),
        "",
        "The rules before issue 37:",
        "",
        *by_rule(rules.build(BEFORE_37), runs),
        "",
        "### constant_advantage's small-batch streak against the fixed streak of 2",
        "",
        "On the ground truth (16 groups a step), `constant_advantage` alone:",
        "",
        *small_batch_delay(runs),
        "",
        "On simulated healthy runs of small batches (no other sign; seeded):",
        "",
        *small_batches(),
        "",
        "### score_collapse's control test: runs alike, and collapses in time",
        "",
        *control_line(runs),
    ]
    wall = time.perf_counter() - t0
    collapsed = [r for r in runs if r.collapsed]
    default = scores[0]
    target = default.false_controls == 0 and ok >= 0.9 * col
    lines = [
        "## Are the stops right? (bench/detection_bench.py)"
        + (f": {other} grid" if other else ""),
        "",
        f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `python bench/detection_bench.py{' --quick' if args.quick else ''}"
        f"{f' --truth {rel(args.truth)}' if other else ''}"
        f"{' --no-rlwatch' if args.no_rlwatch else ''}` ({wall:.0f} s)",
        f"- ground truth: {len(runs)} runs from `{rel(args.truth)}` "
        f"({sum(r.role == 'control' for r in runs)} controls), {len(collapsed)} collapsed "
        f"(last-5-step mean score < {ground_truth.COLLAPSED_BELOW}; onset: the first step the "
        "score stays below that); each codec strength a sweep with its own copy of the controls",
        "",
        *table(scores),
        "",
        "Target (issue 37), gapwatch's defaults: no dense control stopped and at least 90% of "
        f"collapses stopped within 2 steps of onset: {'met' if target else 'NOT met'} "
        f"({default.false_controls} controls stopped, {ok} of {col} in time). Healthy "
        "treatments stopped are those that did not collapse (stalls below their control, and "
        f"runs that learn late): a control test stops a run that trails its control ({by_fate}).",
        *extra,
    ]  # fmt: skip
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
