"""Do the stops hold on real runs? gapwatch, rlwatch and Ray Tune over public training logs.

    .venv/bin/python bench/real_runs_bench.py [--corpus DIR] [--no-rlwatch]

The corpus: ``bench/data/real/manifest.yaml`` (runs of other people's GRPO/PPO trainers,
each with its provenance and a label decided from its curves by the manifest's written
criterion: healthy, dead, or degenerate with an onset window ``[first, last]`` in trainer
steps); the files themselves under ``bench/data/real/shipped/`` where their licence
allows, else under ``bench/data/real/files/`` (git-ignored; rebuilt by
``bench/real_corpus.py``). Each file is read as its trainer wrote it, as ``gapwatch
replay`` reads it (``orchestrator.watch.logs.open_log``, names mapped by ``NameMapper``), and
each policy sees its steps in order and stops it at most once:

- gapwatch's default rules (``orchestrator.rules.build()``) through ``orchestrator.watch.replay``
  (the one ``Watcher`` every path uses), and the rules as calibrated below;
- rlwatch 0.5.1's ``DetectorSuite`` with its defaults, in its own virtual environment
  (``bench/.venv-rlwatch``, as ``bench/detection_bench.py`` makes it); its first critical
  alert is its stop;
- Ray Tune's ``TrialPlateauStopper`` on the score (its defaults: std 0.01 over 4 results,
  grace 4), and with its std chosen on the calibration part.

Outcomes: a healthy run stopped is a **false stop**; a dead or degenerate run is
**caught** when stopped inside its window, **premature** before it, **late** after it,
**missed** when never stopped. A dead run's window is its first 20 trainer steps (the
span over which the criterion establishes "no improvement"). A run at the length cap from
its start (clip ratio >= 0.5, or where none is logged a mean length within 5% of the
longest of those steps, on at least 80% of its first 20 trainer steps) is scored by the
rule the owner decided (issue 37): a dead or degenerate one is also caught by a warning
inside its window and a stop by the patience's end (trainer step 60); a healthy one must
not be stopped, and its warnings are counted apart. Labels the manifest flags uncertain
are reported in rows of their own and not scored against the targets.

Calibration and held-out parts: the runs of each label are ordered by the sha256 of their
id and dealt alternately (a fixed, stratified hash split). Per rule, a small grid of its
thresholds is replayed over the calibration part, the others at their defaults; the
chosen setting has no false stop and no premature stop and catches the most, then the
fewest late; the chosen settings together, and today's defaults, are then scored on the
held-out part. Writes bench/results/real_runs_bench.md.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import detection_bench as db  # noqa: E402
from _machine import machine  # noqa: E402
from real_corpus import locate  # noqa: E402

from gapwatch.correction import names as N  # noqa: E402
from gapwatch.orchestrator import rules  # noqa: E402
from gapwatch.orchestrator.watch.logs import NameMapper, open_log  # noqa: E402
from gapwatch.orchestrator.watch.replay import replay  # noqa: E402

CORPUS = ROOT / "bench" / "data" / "real"
OUT = ROOT / "bench" / "results" / "real_runs_bench.md"
DEAD_WINDOW = 20
"""Trainer steps from a dead run's first over which a stop counts as caught."""
PATIENCE = 60
"""``length_at_cap``'s default patience (three 20-step windows): a run at the cap from its
start, warned inside its window, is caught by a stop at or before this trainer step
(counted from its first)."""
Row = dict[str, Any]

GRIDS: dict[str, dict[str, list[Any]]] = {
    "score_collapse": {
        "drop": [1.0, 1.5, 2.0],
        "from_best": [None, 2.0, 3.0],
        "window": [1, 5],
        "baseline_steps": [3, 10],
    },
    "constant_advantage": {
        "frac": [0.8, 0.9],
        "k_without_fraction": [10, 15, 20],
        "window_without_fraction": [10, 20],
    },
    "length_runaway": {"clip_level": [0.3, 0.5, 0.9], "k": [2, 5]},
    "length_at_cap": {"share": [0.6, 0.7, 0.8, 0.9], "improve": [0.0, 0.25, 0.5]},
    "length_collapse": {"frac": [0.1, 0.2, 0.3]},
    "entropy_collapse": {"frac": [0.05, 0.1, 0.2]},
    "kl_blowup": {"min_kl": [1.0, 5.0, 10.0]},
    "grad_norm_blowup": {"window": [5, 50]},
}
"""The thresholds tried per rule on the calibration part (the rest keep their defaults)."""
PLATEAU_STDS = [0.001, 0.003, 0.01, 0.03, 0.1]
"""TrialPlateauStopper std thresholds tried on the calibration part."""


@dataclass
class Run:
    """One corpus run: its rows as gapwatch reads them, and its label."""

    id: str
    label: str
    rows: list[Row]
    window: tuple[int, int] | None
    signal: str
    fmt: str
    interval: int
    reader: str = ""
    """The reader gapwatch chose (``LogReport.format``)."""
    trainer: str = ""
    """The trainer that wrote it (the manifest's), and whose names were read."""
    uncertain: bool = False
    """The manifest's flag: the label rests on a noisy or flat reward, a short run, few
    generations per prompt or a judgement about the cap (its ``reason`` says which)."""
    capped: bool = False
    """At the length cap on at least 80% of its first 20 trainer steps (:func:`at_cap`)."""

    @property
    def key(self) -> str:  # what detection_bench's rlwatch runner keys stops by
        return self.id


def load(corpus: Path) -> tuple[list[Run], list[str]]:
    """Every corpus run whose files are present (and what could not be read)."""
    manifest = yaml.safe_load((corpus / "manifest.yaml").read_text())
    runs, problems = [], []
    for entry in manifest["runs"]:
        path = locate(entry["files"][0]["local"], corpus)
        if path is None:
            problems.append(f"{entry['id']}: file absent (bench/real_corpus.py fetches it)")
            continue
        try:
            mapper = NameMapper()
            stream = open_log(path)
            rows = [mapper(r) for r in stream]
        except Exception as exc:  # noqa: BLE001 - reported, the others still run
            said = str(exc).replace(str(path), str(db.rel(path)))
            problems.append(f"{entry['id']}: not read ({said[:160]})")
            continue
        if not rows:
            problems.append(f"{entry['id']}: no rows read")
            continue
        first = int(rows[0]["step"])
        window = None
        if entry["label"] == "degenerate":
            window = (int(entry["onset"][0]), int(entry["onset"][1]))
        elif entry["label"] == "dead":
            window = (first, first + DEAD_WINDOW - 1)
        runs.append(Run(entry["id"], entry["label"], rows, window, str(entry.get("signal") or ""),
                        str(entry.get("format", "")), int(entry.get("logging_interval") or 1),
                        reader=stream.report.format,
                        trainer=f"{entry.get('trainer', '?')} ({mapper.source} names)",
                        uncertain=bool(entry.get("uncertain"))))  # fmt: skip
        runs[-1].capped = at_cap(rows) is not None
    return runs, problems


def split(runs: list[Run]) -> tuple[list[Run], list[Run]]:
    """(calibration, held out): each label's runs ordered by sha256(id), dealt alternately."""
    cal, held = [], []
    for label in sorted({r.label for r in runs}):
        group = sorted((r for r in runs if r.label == label),
                       key=lambda r: hashlib.sha256(r.id.encode()).hexdigest())  # fmt: skip
        for i, r in enumerate(group):
            (cal if i % 2 == 0 else held).append(r)
    return cal, held


# --- policies ----------------------------------------------------------------------------

Stops = dict[str, int]


def gapwatch(ruleset: rules.RuleSet, runs: list[Run]) -> tuple[Stops, dict[str, str]]:
    """Stops (and the rule that stopped) as ``gapwatch replay`` decides them."""
    stops, why, _ = gapwatch_fires(ruleset, runs)
    return stops, why


def gapwatch_fires(ruleset: rules.RuleSet, runs: list[Run]) -> tuple[Stops, dict[str, str], Stops]:
    """Stops, the rule that stopped, and each run's first warning (any rule), as
    ``gapwatch replay`` decides them."""
    stops, why, warns = {}, {}, {}
    for run in runs:
        res = replay(run.rows, None, ruleset)
        if res.stop is not None:
            stops[run.id] = int(res.stop.step)
            why[run.id] = res.stop.rule
        warned = [d.step for d in res.decisions if d.action == "warn"]
        if warned:
            warns[run.id] = int(min(warned))
    return stops, why, warns


def plateau(runs: list[Run], std: float = 0.01) -> Stops:
    from ray.tune.stopper import TrialPlateauStopper

    stopper = TrialPlateauStopper(metric="score", std=std)
    out: Stops = {}
    for run in runs:
        for row in run.rows:
            v = row.get(N.SCORE_MEAN)
            if isinstance(v, float) and math.isfinite(v) and stopper(run.id, {"score": v}):
                out[run.id] = int(row["step"])
                break
    return out


# --- scoring -----------------------------------------------------------------------------


@dataclass
class Score:
    policy: str
    healthy: int = 0
    false_stops: int = 0
    bad: int = 0
    caught: int = 0
    premature: int = 0
    late: int = 0
    missed: int = 0
    lateness: int = 0
    false_ids: list[str] = field(default_factory=list)
    uncaught_ids: list[str] = field(default_factory=list)
    """Dead or degenerate runs missed, or stopped outside their window."""
    by_cap_rule: int = 0
    """Caught by the cap rule: warned inside the window, stopped by the patience's end."""
    healthy_warned: int = 0
    """Healthy runs warned (allowed: a warning asks a person to look)."""

    def key(self) -> tuple[int, int]:
        return (-self.caught, self.lateness)


def score(policy: str, stops: Stops, runs: list[Run], warns: Stops | None = None) -> Score:
    """Each run's outcome under ``stops`` (and, for a run at the cap from its start,
    ``warns``: the cap rule of issue 37)."""
    sc = Score(policy)
    for run in runs:
        stop = stops.get(run.id)
        warn = None if warns is None else warns.get(run.id)
        if run.window is None:
            sc.healthy += 1
            sc.healthy_warned += warn is not None
            if stop is not None:
                sc.false_stops += 1
                sc.false_ids.append(run.id)
            continue
        sc.bad += 1
        lo, hi = run.window
        if stop is not None and lo <= stop <= hi:
            sc.caught += 1
            continue
        first = int(run.rows[0]["step"])
        if (run.capped and warn is not None and lo <= warn <= hi and stop is not None
                and stop <= first + PATIENCE - 1):  # fmt: skip
            sc.caught += 1
            sc.by_cap_rule += 1
            continue
        sc.uncaught_ids.append(run.id)
        if stop is None:
            sc.missed += 1
        elif stop < lo:
            sc.premature += 1
        else:
            sc.late += 1
            sc.lateness += stop - hi
    return sc


HEAD = [
    "| policy | healthy runs stopped | dead/degenerate caught in window (of them by the cap "
    "rule) | premature | late | missed | healthy runs warned |",
    "|---|---|---|---|---|---|---|",
]


def row(s: Score, name: str | None = None) -> str:
    pct = f" ({100 * s.caught / s.bad:.0f}%)" if s.bad else ""
    return (
        f"| {name or s.policy} | {s.false_stops} of {s.healthy} | {s.caught} of {s.bad}{pct} "
        f"({s.by_cap_rule}) | {s.premature} | {s.late} | {s.missed} | {s.healthy_warned} |"
    )


def by_kind(
    runs: list[Run], stops: Stops, why: dict[str, str], warns: Stops | None = None
) -> list[str]:
    """gapwatch's defaults by kind of run: the reader, the trainer (and whose names were
    read), and the rule that stopped it ("-": none); each kind's runs scored alike."""
    out = ["| kind | value | runs | healthy stopped | dead/degenerate caught | premature | late "
           "| missed |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for kind, of in (("reader", lambda r: r.reader), ("trainer", lambda r: r.trainer),
                     ("rule", lambda r: why.get(r.id, "-"))):  # fmt: skip
        for value in sorted({of(r) for r in runs}):
            group = [r for r in runs if of(r) == value]
            sc = score(value, stops, group, warns)
            out.append(f"| {kind} | {value} | {len(group)} | {sc.false_stops} of {sc.healthy} "
                       f"| {sc.caught} of {sc.bad} | {sc.premature} | {sc.late} | {sc.missed} |")  # fmt: skip
    return out


def calibrate(cal: list[Run]) -> tuple[dict[str, Any], list[str]]:
    """Per rule, the grid setting with no false or premature stop on ``cal`` that catches
    the most (then the least late); the rows of a table saying what was chosen."""
    settings: dict[str, Any] = {}
    lines = [
        "| rule | settings tried | chosen | caught (calibration) | clean settings |",
        "|---|---|---|---|---|",
    ]
    for name, grid in GRIDS.items():
        trials = []
        for values in itertools.product(*grid.values()):
            params = dict(zip(grid, values, strict=True))
            stops, _ = gapwatch(rules.build({name: params}).select([name]), cal)
            trials.append((params, score(name, stops, cal)))
        clean = [(p, s) for p, s in trials if s.false_stops == 0 and s.premature == 0]
        best = min(clean, key=lambda t: t[1].key()) if clean else None
        if best is None or best[1].caught == 0:
            settings[name] = {"enabled": False}
            lines.append(f"| {name} | {len(trials)} | none catches without a false or "
                         f"premature stop (off) | - | {len(clean)} |")  # fmt: skip
            continue
        settings[name] = best[0]
        lines.append(f"| {name} | {len(trials)} | {', '.join(f'{k}={v}' for k, v in best[0].items())} "
                     f"| {best[1].caught} of {best[1].bad} | {len(clean)} |")  # fmt: skip
    return settings, lines


def per_run(
    runs: list[Run], columns: list[tuple[str, Stops]], why: dict[str, str], why_cal: dict[str, str]
) -> list[str]:
    """The per-run table; each gapwatch cell names the rule that stopped (defaults: ``why``,
    the calibrated rules: ``why_cal``)."""
    lines = [
        "| run | label (signal) | window | logged every | "
        + " | ".join(n for n, _ in columns)
        + " |",
        "|---|---|---|---|" + "---|" * len(columns),
    ]
    for run in sorted(runs, key=lambda r: (r.label, r.id)):
        cells = []
        for name, stops in columns:
            s = stops.get(run.id)
            cell = "-" if s is None else str(s)
            reasons = why_cal if "calibrated" in name else why
            if name.startswith("gapwatch") and s is not None and run.id in reasons:
                cell += f" ({reasons[run.id]})"
            cells.append(cell)
        win = "-" if run.window is None else f"{run.window[0]}-{run.window[1]}"
        sig = f" ({run.signal})" if run.signal and run.signal != "None" else ""
        lines.append(
            f"| {run.id} | {run.label}{sig} | {win} | {run.interval} | " + " | ".join(cells) + " |"
        )
    return lines


FALLBACK_GRID = {"frac": [0.8, 0.9], "window_without_fraction": [10, 20],
                 "k_without_fraction": [1, 5, 10, 20]}  # fmt: skip
"""The settings of ``constant_advantage`` on logs without a zero-advantage fraction
(one group per step: each step all-equal or not) tried in the trade-off table."""


def fallback_tradeoff(runs: list[Run]) -> list[str]:
    """For each fallback setting of ``constant_advantage`` alone (its streak only, the
    dead-share test off), over the whole corpus: the dead runs it catches (and when) and
    the healthy runs it stops; last, the defaults, the criterion's dead-share test on.
    Shows whether any setting catches every dead run without stopping a healthy one."""
    dead = sorted(r.id for r in runs if r.label == "dead")
    lines = [
        "| frac, window, k (trainer steps) | " + " | ".join(dead) + " | healthy runs stopped |",
        "|---|" + "---|" * len(dead) + "---|",
    ]
    grid: list[tuple[str, dict[str, Any]]] = [
        (", ".join(map(str, values)), {**dict(zip(FALLBACK_GRID, values, strict=True)),
                                       "dead_share": None})
        for values in itertools.product(*FALLBACK_GRID.values())
    ]  # fmt: skip
    grid.append(("the defaults, with the dead-share test (80% of the first 20 steps)", {}))
    for label, params in grid:
        ruleset = rules.build({"constant_advantage": params}).select(["constant_advantage"])
        stops, _ = gapwatch(ruleset, runs)
        cells = []
        for rid in dead:
            run = next(r for r in runs if r.id == rid)
            at = stops.get(rid)
            assert run.window is not None
            cells.append(
                "missed" if at is None else f"{at} ({'caught' if at <= run.window[1] else 'late'})"
            )
        false = sorted(r.id for r in runs if r.window is None and r.id in stops)
        lines.append(f"| {label} | " + " | ".join(cells)
                     + f" | {len(false)}: {', '.join(f'{i} ({stops[i]})' for i in false) or '-'} |")  # fmt: skip
    return lines


CAP_STEPS = 20
"""The first trainer steps ``length_at_cap`` judges (its default ``window``)."""


def at_cap(rows: list[Row]) -> tuple[str, float] | None:
    """(what the cap was read from, the share of steps at it) where a run is at the length
    cap on at least 80% of its first ``CAP_STEPS`` trainer steps, else None. At the cap:
    clip ratio >= 0.5 where it is logged, else mean length within 5% of the largest mean
    length of those same steps (the manifest criterion's fallback, made causal)."""
    first = int(rows[0]["step"])
    head = [x for x in rows if int(x["step"]) < first + CAP_STEPS]
    clips = [float(x[N.CLIP_RATIO]) for x in head if x.get(N.CLIP_RATIO) is not None]
    lens = [float(x[N.RESPONSE_LENGTH_MEAN]) for x in head
            if x.get(N.RESPONSE_LENGTH_MEAN) is not None]  # fmt: skip
    if clips:
        how, share = "clip ratio", sum(c >= 0.5 for c in clips) / len(clips)
    elif len(lens) >= CAP_STEPS // 2:
        how, share = "mean length", sum(x >= 0.95 * max(lens) for x in lens) / len(lens)
    else:
        return None
    return (how, share) if share >= 0.8 else None


def at_cap_from_start(
    runs: list[Run], held: list[Run], stops: Stops, warns: Stops, why: dict[str, str]
) -> list[str]:
    """The runs that look alike at step ``CAP_STEPS``: at the length cap on >= 80% of their
    first steps and not learning there (gain of the second half's mean score over the
    first's <= 0.25 of the widest batch spread, ``length_at_cap``'s defaults). At the cap:
    clip ratio >= 0.5 where it is logged, else mean length within 5% of the largest mean
    length of those same steps (the manifest criterion's fallback, made causal). Each with
    its label, decided by the criterion over the whole run: the later steps are what tell
    a run that learns after step 20 from one that never does. With gapwatch's defaults'
    first warning and stop (and the rule that stopped it)."""
    held_ids = {r.id for r in held}
    lines = [
        "| run | part | label | certain | cap read from | steps at the cap | gain (spreads) "
        "| warned at | stopped at |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    counts = {"healthy": 0, "dead/degenerate": 0}
    for r in sorted(runs, key=lambda r: (r.label != "healthy", r.id)):
        first = int(r.rows[0]["step"])
        rows = [x for x in r.rows if int(x["step"]) < first + CAP_STEPS]
        scores = [float(x[N.SCORE_MEAN]) for x in rows if x.get(N.SCORE_MEAN) is not None]
        spreads = [float(x[N.SCORE_STD]) for x in rows if x.get(N.SCORE_STD) is not None]
        cap = at_cap(r.rows)
        if cap is None or len(scores) < 4:
            continue
        how, share = cap
        half = len(scores) // 2
        gain = sum(scores[half:]) / (len(scores) - half) - sum(scores[:half]) / half
        widest = max(spreads, default=0.0)
        if widest > 0 and gain > 0.25 * widest:
            continue
        counts["healthy" if r.label == "healthy" else "dead/degenerate"] += 1
        stop = f"{stops[r.id]} ({why[r.id]})" if r.id in stops else "-"
        lines.append(f"| {r.id} | {'held out' if r.id in held_ids else 'calibration'} | "
                     f"{r.label} | {'no' if r.uncertain else 'yes'} | {how} | {share:.0%} | "
                     f"{f'{gain / widest:+.2f}' if widest > 0 else 'no spread logged'} | "
                     f"{warns.get(r.id, '-')} | {stop} |")  # fmt: skip
    lines += ["", f"Alike at step {CAP_STEPS}: {counts['healthy']} healthy, "
              f"{counts['dead/degenerate']} dead/degenerate."]  # fmt: skip
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--no-rlwatch", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.perf_counter()
    runs, problems = load(args.corpus)
    cal, held = split(runs)
    chosen, cal_lines = calibrate(cal)
    best_std = min(PLATEAU_STDS, key=lambda sd: (
        (s := score("p", plateau(cal, sd), cal)).false_stops + s.premature > 0, s.key()))  # fmt: skip
    defaults, why, warns = gapwatch_fires(rules.build(), runs)
    calibrated, why_cal, warns_cal = gapwatch_fires(rules.build(chosen), runs)
    policies: list[tuple[str, Stops | None, Stops | None]] = [
        ("gapwatch: default rules", defaults, warns),
        ("gapwatch: rules calibrated on the calibration part", calibrated, warns_cal),
        ("rlwatch 0.5.1 (first critical alert)",
         None if args.no_rlwatch else db.rlwatch(runs), None),
        ("Ray Tune TrialPlateauStopper (std 0.01, 4 results)", plateau(runs), None),
        (f"Ray Tune TrialPlateauStopper (std {best_std:g}, chosen on the calibration part)",
         plateau(runs, best_std), None),
    ]  # fmt: skip
    table = [*HEAD]
    for sure, label in ((True, "certain labels"), (False, "uncertain labels")):
        for part, part_runs in (("held out", held), ("calibration", cal), ("all", runs)):
            group = [r for r in part_runs if r.uncertain != sure]
            for name, stops, fired in policies:
                if stops is not None:
                    table.append(row(score(name, stops, group, fired), f"{name}, {part}, {label}"))
    certain = [r for r in held if not r.uncertain]
    d_held = score("d", defaults, certain, warns)
    not_caught = [r for r in held if r.id in score("d", defaults, held, warns).uncaught_ids]
    target = (
        not problems and d_held.false_stops == 0 and d_held.premature == 0
        and d_held.caught >= 0.85 * d_held.bad
    )  # fmt: skip
    wall = time.perf_counter() - t0
    labels = {lab: sum(r.label == lab for r in runs) for lab in ("healthy", "dead", "degenerate")}
    sure = {lab: sum(r.label == lab and not r.uncertain for r in runs)
            for lab in ("healthy", "dead", "degenerate")}  # fmt: skip
    lines = [
        "## Do the stops hold on real runs? (bench/real_runs_bench.py)",
        "",
        f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `python bench/real_runs_bench.py` ({wall:.0f} s)",
        f"- corpus: `{db.rel(args.corpus)}/manifest.yaml`: {len(runs)} runs read as their "
        f"trainers wrote them ({labels['healthy']} healthy, {labels['dead']} dead, "
        f"{labels['degenerate']} degenerate; certain labels: {sure['healthy']} healthy, "
        f"{sure['dead']} dead, {sure['degenerate']} degenerate); "
        + (f"not read: {'; '.join(problems)}" if problems else "every file read"),
        f"- split: by sha256 of the run id within each label; calibration {len(cal)} runs, "
        f"held out {len(held)} runs",
        "",
        "### Outcomes (certain labels first, uncertain labels apart)",
        "",
        "A run at the length cap from its start (at least 80% of its first 20 steps) and "
        "labelled dead or degenerate is also caught by a warning inside its window and a stop "
        f"by trainer step {PATIENCE} (the cap rule, issue 37); the count in brackets. Healthy "
        "runs warned are counted apart (a warning is allowed).",
        "",
        *table,
        "",
        "Target on the held-out part, certain labels (gapwatch's defaults): every file read, "
        "0 healthy runs stopped, >= 85% of dead/degenerate runs caught (by the cap rule for "
        f"runs at the cap from the start), none premature: {'met' if target else 'NOT met'} "
        f"({d_held.false_stops} of {d_held.healthy} healthy stopped, {d_held.caught} of "
        f"{d_held.bad} caught, {d_held.premature} premature).",
        "",
        "Held-out dead/degenerate runs the defaults miss or stop late: "
        + (
            ", ".join(
                f"{r.id} ({'uncertain' if r.uncertain else 'certain'} label)" for r in not_caught
            )
            or "none"
        )  # fmt: skip
        + ". "
        "The manifest flags a label uncertain where it rests on a noisy or flat reward, a "
        "short run, few generations per prompt or a judgement about the cap.",
        "",
        "### By kind: reader, trainer, rule (gapwatch's defaults, held out, certain labels)",
        "",
        *by_kind(certain, defaults, why, warns),
        "",
        "### By kind: held out, uncertain labels",
        "",
        *by_kind([r for r in held if r.uncertain], defaults, why, warns),
        "",
        "### By kind, the whole corpus (all labels)",
        "",
        *by_kind(runs, defaults, why, warns),
        "",
        "### Thresholds chosen on the calibration part (each rule alone)",
        "",
        *cal_lines,
        "",
        f"Chosen: `{chosen}`.",
        "",
        "### Dead runs without a zero-advantage fraction: the trade-off",
        "",
        "`constant_advantage` alone, over the whole corpus, on logs that give only a step's",
        "reward std (Unsloth's notebooks: one group per step): the window's share of",
        "all-equal steps (`frac`), its length and the streak (`k`), in trainer steps, the",
        "dead-share test off; last row, the defaults with it.",
        "",
        *fallback_tradeoff(runs),
        "",
        f"### At the cap from the start: what a rule sees at step {CAP_STEPS}",
        "",
        "Runs at the length cap on at least 80% of their first 20 steps and not learning",
        "there. The manifest labels a run by its whole curve, so one that learns after",
        "step 20 is healthy and one that never does is degenerate with the window 1-20:",
        "no rule that reads only these steps can stop the second kind in its window and",
        "spare the first.",
        "",
        *at_cap_from_start(runs, held, defaults, warns, why),
        "",
        "### Every run: the step each policy stops it at",
        "",
        *per_run(runs, [(n, s) for n, s, _ in policies if s is not None], why, why_cal),
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
