"""Which signal warns first? Lead time of every rule and every raw signal before collapse.

    .venv/bin/python bench/lead_time_bench.py [--truth DIR] [--quantile Q] [--quick]

Ground truth, labels and the rules' replay as ``bench/detection_bench.py`` gives them
(``load``, ``gapwatch``): runs trained to the end with stopping off; a run is collapsed
when its last-5-step mean score is below ``ground_truth.COLLAPSED_BELOW``, its onset the
first step from which the score stays below that. Split by seed as
``bench/calibrate_rules.py`` splits it: thresholds and settings are chosen on seeds 0-1
(calibration) and reported on the other seeds (held out).

**Signals.** Each figure a rule reads (and a few it could), per step, in three forms: its
level; its growth over the run's early level (the value over the median of its first
``EARLY`` steps, judged from the step after); and, for the score, its distance below the
paired control at the same step and below its own early level, in batch-score spreads.
A signal **fires** at the first step its value crosses a threshold. The threshold fixes
its false-fire rate on healthy runs: the ``--quantile`` (default 0.95) quantile, over the
healthy calibration runs (dense controls and treatments that did not collapse), of each
run's most extreme value (its max for a signal that rises, min for one that falls). So
about 5% of the healthy calibration runs fire; the held-out rate is measured.

**Rules.** Each rule alone with its defaults; a rule fires at its first warning or stop.
Then two sets: the **stop set** (today's defaults, tuned for no false stop) and a **warn
set** tuned on the calibration seeds for lead: per rule, the setting of a grid that
fires before onset on the most collapsed runs with no dense control and at most
``--warn-false`` of the healthy treatments fired; then rules added greedily while the set
as a whole keeps that budget. The ``warn`` rules preset is the set chosen on the full
ground truth, with ``action: warn``; its row is measured too.

Per signal or rule, over collapsed held-out runs: how many fire, the lead (first fire -
onset, negative = before onset) median and worst, the fraction firing before onset, and
false fires on held-out controls and healthy treatments.

Writes bench/results/lead_time_bench.md.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _machine, detection_bench, also when imported

import calibrate_rules  # noqa: E402
import detection_bench as db  # noqa: E402
from _machine import machine  # noqa: E402

from gapwatch.correction import names as N  # noqa: E402
from gapwatch.orchestrator import rules  # noqa: E402
from gapwatch.orchestrator.rules.library import spread  # noqa: E402

OUT = ROOT / "bench" / "results" / "lead_time_bench.md"
EARLY = 3
"""Steps whose median is a run's early level (the rules' ``baseline_steps`` default)."""
FROM_START = EARLY + 1
"""A fire by this step (the first a growth signal or a rule with a 3-step grace can judge)
comes from how the run looked from its start (the codec's gap at step 1, which
``gap_vs_control`` already warns about), not from a change seen coming."""
MIN_LEVEL = 0.01
"""Early levels are floored at this before a growth is taken (``post_tool_tail_growth``'s
``min_tail``: a dense fp32 sampler's tails are exactly 0)."""

TOP = 8
"""Signals listed in the by-strength table (the first by lead, as sorted), besides the
post-tool tails (the issue's question) and the rules."""

POST_TOOL_TAILS = (N.tail("post_tool", "p95").rsplit("/", 1)[0], "post-tool")
"""Name prefixes of the post-tool tail signals."""

Series = list[tuple[int, float]]
"""(step, value) of one signal over one run."""


@dataclass(frozen=True)
class Signal:
    """One raw figure (or a figure derived from a run's rows) a warning could watch."""

    name: str
    up: bool
    """True: fires above its threshold; False: below."""
    values: Callable[[db.Run, dict[int, db.Row]], Series]
    """The run's series, given its paired control's rows by step (empty for a control)."""


def level(metric: str) -> Callable[[db.Run, dict[int, db.Row]], Series]:
    def f(run: db.Run, ctl: dict[int, db.Row]) -> Series:
        return [(int(r["step"]), v) for r in run.rows if (v := rules.value(r, metric)) is not None]

    return f


def growth(metric: str) -> Callable[[db.Run, dict[int, db.Row]], Series]:
    """The value over the median of the first :data:`EARLY` steps, from the step after."""

    def f(run: db.Run, ctl: dict[int, db.Row]) -> Series:
        s = level(metric)(run, ctl)
        if len(s) <= EARLY:
            return []
        early = max(statistics.median(v for _, v in s[:EARLY]), MIN_LEVEL)
        return [(st, max(v, MIN_LEVEL) / early) for st, v in s[EARLY:]]

    return f


def ratio(num: str, den: str) -> Callable[[db.Run, dict[int, db.Row]], Series]:
    def f(run: db.Run, ctl: dict[int, db.Row]) -> Series:
        out = []
        for r in run.rows:
            a, b = rules.value(r, num), rules.value(r, den)
            if a is not None and b:
                out.append((int(r["step"]), a / b))
        return out

    return f


def excess_tail_growth(
    ratio_: N.Ratio = "mismatch",
) -> Callable[[db.Run, dict[int, db.Row]], Series]:
    """Post-tool p95 growth over the text slice's (``post_tool_tail_growth``'s excess)."""

    def f(run: db.Run, ctl: dict[int, db.Row]) -> Series:
        post = dict(growth(N.tail("post_tool", "p95", ratio_))(run, ctl))
        text = dict(growth(N.tail("text", "p95", ratio_))(run, ctl))
        return [(s, post[s] / max(text[s], 1.0)) for s in post if s in text]

    return f


def below_control(run: db.Run, ctl: dict[int, db.Row]) -> Series:
    """(control score - score) / the larger batch spread, at the same step."""
    out = []
    for r in run.rows:
        c = ctl.get(int(r["step"]))
        s = rules.value(r, N.SCORE_MEAN)
        cs = None if c is None else rules.value(c, N.SCORE_MEAN)
        units = [u for u in (None if c is None else spread(c), spread(r)) if u]
        if s is not None and cs is not None and units:
            out.append((int(r["step"]), (cs - s) / max(units)))
    return out


def below_early(run: db.Run, ctl: dict[int, db.Row]) -> Series:
    """(early median score - score) / the early batch spread (rms), from step EARLY + 1."""
    rows = [r for r in run.rows if rules.value(r, N.SCORE_MEAN) is not None]
    if len(rows) <= EARLY:
        return []
    early = statistics.median(float(r[N.SCORE_MEAN]) for r in rows[:EARLY])
    sp = [u for r in rows[:EARLY] if (u := spread(r)) is not None]
    unit = math.sqrt(statistics.fmean(u * u for u in sp)) if sp else 0.0
    if unit <= 0:
        return []
    return [(int(r["step"]), (early - float(r[N.SCORE_MEAN])) / unit) for r in rows[EARLY:]]


def drift_signals(ratio_: N.Ratio) -> list[Signal]:
    """The same views of the policy-vs-reference (``ref_drift``) or PPO-ratio (``ppo``)
    log-ratio as of the mismatch: per-slice tails and their growth, the post-tool excess
    growth, per-slice ESS and its fall, and the mean log-ratio per slice."""
    return [
        *(Signal(N.tail(sl, q, ratio_), True, level(N.tail(sl, q, ratio_)))
          for sl in ("post_tool", "text") for q in ("p95", "p99")),
        *(Signal(f"{N.tail(sl, 'p95', ratio_)} growth", True, growth(N.tail(sl, "p95", ratio_)))
          for sl in ("post_tool", "text")),
        Signal(f"{ratio_}: post-tool p95 growth / text p95 growth", True,
               excess_tail_growth(ratio_)),
        *(Signal(N.ess(sl, ratio_), False, level(N.ess(sl, ratio_))) for sl in N.SLICES),
        Signal(f"{N.ess('post_tool', ratio_)} growth", False, growth(N.ess("post_tool", ratio_))),
    ]  # fmt: skip


DRIFT_SIGNALS: list[Signal] = [
    *drift_signals("ref_drift"),
    *(Signal(N.sliced(N.REF_LOG_RATIO_MEAN, sl), True, level(N.sliced(N.REF_LOG_RATIO_MEAN, sl)))
      for sl in N.SLICES),
    *drift_signals("ppo"),
]  # fmt: skip
"""The drift families (issue 20): the policy against its frozen reference, the TRL
diagnostics' ``|log pi_theta / pi_ref|`` tails, and the PPO ratio over the update."""

SIGNALS: list[Signal] = [
    *(Signal(f"{N.tail(sl, q)}", True, level(N.tail(sl, q)))
      for sl in ("post_tool", "text") for q in ("p95", "p99")),
    *(Signal(f"{N.tail(sl, q)} growth", True, growth(N.tail(sl, q)))
      for sl in ("post_tool", "text") for q in ("p95", "p99")),
    Signal("post-tool p95 growth / text p95 growth", True, excess_tail_growth()),
    Signal(N.sliced(N.ABS_LOG_RATIO_MEAN, "post_tool"), True,
           level(N.sliced(N.ABS_LOG_RATIO_MEAN, "post_tool"))),
    Signal(N.ABS_LOG_RATIO_MEAN, True, level(N.ABS_LOG_RATIO_MEAN)),
    Signal(N.PROBS_DIFF_MEAN, True, level(N.PROBS_DIFF_MEAN)),
    Signal(N.sliced(N.K3_KL, "post_tool"), True, level(N.sliced(N.K3_KL, "post_tool"))),
    Signal(N.CHI2_TOKEN, True, level(N.CHI2_TOKEN)),
    Signal(N.ess("post_tool"), False, level(N.ess("post_tool"))),
    Signal(f"{N.ess('post_tool')} growth", False, growth(N.ess("post_tool"))),
    Signal(N.ess("text"), False, level(N.ess("text"))),
    Signal(N.IS_ESS, False, level(N.IS_ESS)),
    Signal(N.MASKED_FRACTION, True, level(N.MASKED_FRACTION)),
    Signal(N.ZERO_ADV_FRAC, True, level(N.ZERO_ADV_FRAC)),
    Signal(N.SCORE_GROUP_STD, False, level(N.SCORE_GROUP_STD)),
    Signal(N.CLIP_RATIO, True, level(N.CLIP_RATIO)),
    Signal(f"{N.RESPONSE_LENGTH_MEAN} / budget", True,
           ratio(N.RESPONSE_LENGTH_MEAN, N.RESPONSE_BUDGET)),
    Signal(f"{N.RESPONSE_LENGTH_MEAN} growth", True, growth(N.RESPONSE_LENGTH_MEAN)),
    Signal(N.PARSE_FAIL_FRAC, True, level(N.PARSE_FAIL_FRAC)),
    Signal(N.TOOL_CALLS, False, level(N.TOOL_CALLS)),
    Signal(N.SUCCESS_RATE, False, level(N.SUCCESS_RATE)),
    Signal(f"{N.ENTROPY} growth (falls)", False, growth(N.ENTROPY)),
    Signal(f"{N.ENTROPY} growth (rises)", True, growth(N.ENTROPY)),
    Signal(f"{N.GRAD_NORM} growth", True, growth(N.GRAD_NORM)),
    Signal(N.KL_TO_REF, True, level(N.KL_TO_REF)),
    Signal(N.PG_CLIPFRAC, True, level(N.PG_CLIPFRAC)),
    Signal("score below control (spreads)", True, below_control),
    Signal("score below own early level (spreads)", True, below_early),
    *DRIFT_SIGNALS,
]  # fmt: skip
"""The signals measured: metric names from ``correction.names`` the ground truth logs. A
signal whose figures a ground truth lacks (the drift families before they were logged)
has no threshold there and is left out of its tables."""


# --- firing and scoring ------------------------------------------------------------------


def controls_by_step(runs: list[db.Run]) -> dict[str, dict[int, db.Row]]:
    """Run key -> its paired control's rows by step (empty for a control)."""
    by_key = {r.key: r for r in runs}
    return {
        r.key: {int(c["step"]): c for c in by_key[r.control].rows}
        if r.control in by_key else {}
        for r in runs
    }  # fmt: skip


def sustained(series: Series, hold: int, up: bool) -> Series:
    """The value held over the latest ``hold`` logged steps, at each step from the
    ``hold``-th: their min for a rising signal, max for a falling one (it crosses a line
    only where all ``hold`` steps do, as a rule with ``k=hold`` requires)."""
    pick = min if up else max
    return [(series[i][0], pick(v for _, v in series[i - hold + 1 : i + 1]))
            for i in range(hold - 1, len(series))]  # fmt: skip


def extreme(series: Series, up: bool) -> float | None:
    vals = [v for _, v in series]
    return (max(vals) if up else min(vals)) if vals else None


def quantile(vals: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of a non-empty list."""
    s = sorted(vals)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def threshold(sig: Signal, healthy: list[db.Run], ctl: dict[str, dict[int, db.Row]],
              q: float, hold: int) -> float | None:  # fmt: skip
    """The ``q`` quantile of the healthy runs' extremes (max rising, min falling) of the
    value held ``hold`` steps."""
    ext = [e for r in healthy
           if (e := extreme(sustained(sig.values(r, ctl[r.key]), hold, sig.up), sig.up))
           is not None]  # fmt: skip
    if not ext:
        return None
    return quantile(ext, q) if sig.up else quantile(ext, 1 - q)


def first_fire(series: Series, thr: float, up: bool) -> int | None:
    for step, v in series:
        if (v > thr) if up else (v < thr):
            return step
    return None


def unique_healthy(runs: Iterable[db.Run]) -> list[db.Run]:
    """Healthy runs, each dense control once (every sweep holds a copy of it)."""
    seen: set[str] = set()
    out = []
    for r in runs:
        if r.collapsed:
            continue
        ident = r.key.split("/", 1)[1] if r.role == "control" else r.key
        if ident not in seen:
            seen.add(ident)
            out.append(r)
    return out


@dataclass
class Lead:
    """One signal's or rule's first fires, scored."""

    name: str
    detail: str = ""
    leads: list[int] = field(default_factory=list)
    """first fire - onset, per collapsed run that fired."""
    fired_at: list[int] = field(default_factory=list)
    """The step of each of those fires."""
    by_sweep: dict[str, list[int]] = field(default_factory=dict)
    """Codec strength -> its collapsed runs' leads (None-free; misses not listed)."""
    collapses_by_sweep: dict[str, int] = field(default_factory=dict)
    collapses: int = 0
    false_controls: int = 0
    controls: int = 0
    false_treatments: int = 0
    treatments: int = 0

    @property
    def before(self) -> int:
        """Collapsed runs fired before onset."""
        return sum(d < 0 for d in self.leads)

    @property
    def change_before(self) -> int:
        """Collapsed runs fired before onset but not from the start (after step
        :data:`FROM_START`): a change seen coming, not the codec's gap from step 1."""
        pairs = zip(self.leads, self.fired_at, strict=True)
        return sum(d < 0 and s > FROM_START for d, s in pairs)

    def row(self) -> str:
        med = f"{statistics.median(self.leads):+g}" if self.leads else "-"
        worst = f"{max(self.leads):+d}" if self.leads else "-"
        frac = f"{self.before / self.collapses:.0%}" if self.collapses else "-"
        change = f"{self.change_before / self.collapses:.0%}" if self.collapses else "-"
        start = sum(s <= FROM_START for s in self.fired_at)
        fc = f"{self.false_controls} of {self.controls}"
        ft = f"{self.false_treatments} of {self.treatments}"
        return (
            f"| {self.name} | {self.detail} | {len(self.leads)} of {self.collapses} | {med} | "
            f"{worst} | {frac} | {start} | {change} | {fc} | {ft} |"
        )

    def sweep_cells(self, sweeps: list[str]) -> str:
        cells = []
        for sw in sweeps:
            ds, n = self.by_sweep.get(sw, []), self.collapses_by_sweep.get(sw, 0)
            med = f", median {statistics.median(ds):+g}" if ds else ""
            cells.append(f"{len(ds)} of {n}, {sum(d < 0 for d in ds)} before{med}")
        return f"| {self.name} | " + " | ".join(cells) + " |"

    def sort_key(self) -> tuple[int, int, float]:
        med = statistics.median(self.leads) if self.leads else math.inf
        return (-self.change_before, -self.before, med)


HEAD = [
    "| signal or rule | fires when | collapses fired | lead median | lead worst | "
    f"fired before onset | fired by step {FROM_START} (from the start) | fired before onset "
    f"after step {FROM_START} | false fires: controls | false fires: healthy treatments |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def lead(name: str, detail: str, fires: dict[str, int], runs: list[db.Run]) -> Lead:
    """Score first fires (run key -> step) over ``runs``: collapsed ones' leads, healthy
    ones' false fires (each control once)."""
    out = Lead(name, detail)
    for r in runs:
        if r.collapsed and r.onset is not None:
            out.collapses += 1
            out.collapses_by_sweep[r.sweep] = out.collapses_by_sweep.get(r.sweep, 0) + 1
            if r.key in fires:
                out.leads.append(fires[r.key] - r.onset)
                out.fired_at.append(fires[r.key])
                out.by_sweep.setdefault(r.sweep, []).append(fires[r.key] - r.onset)
    for r in unique_healthy(runs):
        fired = r.key in fires
        if r.role == "control":
            out.controls += 1
            out.false_controls += fired
        else:
            out.treatments += 1
            out.false_treatments += fired
    return out


def signal_leads(cal: list[db.Run], held: list[db.Run], q: float, hold: int) -> list[Lead]:
    ctl = controls_by_step(cal + held)
    healthy = unique_healthy(cal)
    out = []
    for sig in SIGNALS:
        thr = threshold(sig, healthy, ctl, q, hold)
        if thr is None:
            continue
        fires = {}
        for r in held:
            s = first_fire(sustained(sig.values(r, ctl[r.key]), hold, sig.up), thr, sig.up)
            if s is not None:
                fires[r.key] = s
        out.append(lead(sig.name, f"{'>' if sig.up else '<'} {thr:.3g}", fires, held))
    return out


def rule_leads(runs: list[db.Run]) -> list[Lead]:
    out = []
    for name in rules.names():
        fires = db.gapwatch(rules.build().select([name]), runs, fires=True)
        out.append(lead(f"rule {name}", "its defaults", fires, runs))
    return out


# --- the warn set --------------------------------------------------------------------------

WARN_GRIDS: dict[str, dict[str, list[Any]]] = {
    "score_collapse": {
        "drop": [None, 0.25, 0.5, 1.0, 1.5],
        "control_margin": [None, 0.5, 0.8, 1.2],
        "k": [1, 2],
        "window": [1, 5],
        "baseline_steps": [3, 10],
    },
    "constant_advantage": {"frac": [0.5, 0.6, 0.7, 0.8, 0.9], "k": [1, 2],
                           "saturation": [None, 0.5]},
    "post_tool_tail_growth": {"factor": [1.25, 1.5, 2.0, 3.0], "k": [1, 2], "window": [1, 3],
                              "ratio": list(N.RATIOS)},
    "ess_collapse": {"floor": [0.05, 0.1, 0.2, 0.3, 0.5], "k": [1, 2],
                     "baseline_steps": [None, 3], "ratio": list(N.RATIOS)},
    "length_runaway": {"clip_level": [None, 0.1, 0.2, 0.3], "budget_frac": [0.5, 0.7, 0.9],
                       "k": [1, 2]},
    "entropy_collapse": {"frac": [0.2, 0.3, 0.5], "k": [1, 2]},
    "kl_blowup": {"factor": [2.0, 5.0, 10.0], "min_kl": [0.05, 0.1, 0.5], "k": [1, 2]},
    "grad_norm_blowup": {"factor": [2.0, 3.0, 5.0], "window": [1, 5],
                         "baseline_steps": [3, 10], "k": [1, 2]},
}  # fmt: skip
"""The settings tried per rule for the warn set: wider and more sensitive than
calibrate_rules.GRIDS (k=1, lower factors, higher ESS floors) and, for the tail and ESS
rules, each ratio family (a family a ground truth does not log never fires there, and
the mismatch, listed first, wins ties); the rest keep defaults."""


@dataclass
class Choice:
    rule: str
    params: dict[str, Any]
    fires: dict[str, int]
    lead: Lead

    def key(self) -> tuple[int, int, float]:
        return self.lead.sort_key()


def within(lead_: Lead, budget: float) -> bool:
    """No dense control fired; healthy treatments fired at most ``budget`` of them."""
    return lead_.false_controls == 0 and lead_.false_treatments <= budget * lead_.treatments


def tune_rule(name: str, cal: list[db.Run], budget: float) -> Choice | None:
    grid = WARN_GRIDS[name]
    best: Choice | None = None
    for values in itertools.product(*grid.values()):
        params = dict(zip(grid, values, strict=True))
        fires = db.gapwatch(rules.build({name: params}).select([name]), cal, fires=True)
        c = Choice(name, params, fires, lead(name, "", fires, cal))
        if (
            within(c.lead, budget)
            and c.lead.change_before
            and (best is None or c.key() < best.key())
        ):
            best = c
    return best


def merged(choices: list[Choice]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in choices:
        for k, s in c.fires.items():
            out[k] = min(s, out.get(k, s))
    return out


def warn_set(cal: list[db.Run], budget: float) -> list[Choice]:
    """Per rule the best lead within the budget (most collapsed runs fired before onset
    after the first steps, then before onset at all, then the smallest median lead), then
    added greedily, best first, while the set stays within the budget on ``cal`` and fires
    more runs before onset."""
    cands = [c for n in WARN_GRIDS if (c := tune_rule(n, cal, budget)) is not None]
    chosen: list[Choice] = []
    while True:
        cur = lead("", "", merged(chosen), cal).sort_key()
        best: tuple[tuple[int, int, float], Choice] | None = None
        for c in cands:
            if c in chosen:
                continue
            trial = lead("", "", merged([*chosen, c]), cal)
            if within(trial, budget) and (best is None or trial.sort_key() < best[0]):
                best = (trial.sort_key(), c)
        if best is None or best[0][:2] >= cur[:2]:
            return chosen  # no rule left fires more runs before onset within the budget
        chosen.append(best[1])


def settings_of(choices: list[Choice]) -> dict[str, dict[str, Any]]:
    """The warn set as a ``rules:`` section (rules not chosen disabled)."""
    picked = {c.rule: c.params for c in choices}
    return {n: picked.get(n, {"enabled": False}) for n in rules.names()}


def fmt_params(p: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", type=Path, default=db.TRUTH)
    ap.add_argument("--quantile", type=float, default=0.95,
                    help="healthy runs' quantile a signal's threshold sits at")  # fmt: skip
    ap.add_argument("--hold", type=int, default=2,
                    help="steps in a row a signal must cross (the rules' k)")  # fmt: skip
    ap.add_argument("--warn-false", type=float, default=0.2,
                    help="share of healthy calibration treatments the warn set may fire on")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="seeds 0 and 1 only (split 0 / 1)")
    ap.add_argument("--out", type=Path, default=None,
                    help="default: bench/results/lead_time_bench.md; with another --truth "
                    "lead_time_bench-<its folder>.md")  # fmt: skip
    args = ap.parse_args()
    other = db.other_grid(args.truth)
    args.out = args.out or db.fragment(OUT, args.truth)
    if not (args.truth / "index.json").is_file():
        ap.error(f"{args.truth} holds no index.json; pass a grid bench/ground_truth.py wrote")
    if not 0.5 < args.quantile < 1:
        ap.error(f"--quantile must be in (0.5, 1), got {args.quantile}")
    if args.hold < 1:
        ap.error(f"--hold must be at least 1, got {args.hold}")
    if not 0 <= args.warn_false < 1:
        ap.error(f"--warn-false must be in [0, 1), got {args.warn_false}")
    t0 = time.perf_counter()
    runs = db.load(args.truth, args.quick)
    if args.quick:
        cal = [r for r in runs if r.seed == 0]
        held = [r for r in runs if r.seed != 0]
    else:
        cal, held = calibrate_rules.split(runs)
    sig = signal_leads(cal, held, args.quantile, args.hold)
    sig.sort(key=Lead.sort_key)
    per_rule = rule_leads(held)
    chosen = warn_set(cal, args.warn_false)
    stop = db.gapwatch(rules.build(), held, fires=False)
    warn = db.gapwatch(rules.build(settings_of(chosen)), held, fires=True) if chosen else {}
    preset = db.gapwatch(rules.build({"preset": "warn"}), held, fires=True)
    sets = [
        lead("stop set (today's defaults; first stop)", "tuned for no false stop", stop, held),
        lead("warn set (first warning)", "tuned for lead, calibration seeds", warn, held),
        lead("warn set, calibration seeds", "in-sample", merged(chosen), cal),
        lead("`rules: {preset: warn}` (first warning)", "the shipped warn preset", preset, held),
    ]
    wall = time.perf_counter() - t0
    sweeps = sorted({r.sweep for r in runs})
    post_tool = [x for x in sig if x.name.startswith(POST_TOOL_TAILS) and x not in sig[:TOP]]
    by_strength = [*sig[:TOP], *post_tool, *per_rule, sets[0], sets[1], sets[3]]
    held_seeds = sorted({r.seed for r in held if r.role == "treatment"})
    cal_seeds = sorted({r.seed for r in cal if r.role == "treatment"})
    n_healthy = unique_healthy(cal)
    cmd = "python bench/lead_time_bench.py" + (" --quick" if args.quick else "")
    if other:
        cmd += f" --truth {db.rel(args.truth)}"
    if args.quantile != 0.95:
        cmd += f" --quantile {args.quantile:g}"
    if args.hold != 2:
        cmd += f" --hold {args.hold}"
    if args.warn_false != 0.2:
        cmd += f" --warn-false {args.warn_false:g}"
    lines = [
        "## Which signal warns first? (bench/lead_time_bench.py)"
        + (f": {other} grid" if other else ""),
        "",
        f"- machine: {machine()}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- command: `{cmd}` ({wall:.0f} s)",
        f"- ground truth: `{db.rel(args.truth)}`; thresholds and settings from the "
        f"calibration seeds {cal_seeds} ({len(n_healthy)} healthy runs: "
        f"{sum(r.role == 'control' for r in n_healthy)} dense controls, "
        f"{sum(r.role != 'control' for r in n_healthy)} treatments that did not collapse); "
        f"every figure below on the held-out seeds {held_seeds} (controls of the other "
        "seeds), each dense control counted once",
        "- lead = first fire - onset in steps (negative: before onset); worst = latest; "
        "a run that never fires counts in 'collapses fired' only",
        f"- 'from the start': fired by step {FROM_START}, the first step a growth signal or "
        "a rule with a 3-step grace can judge; such a fire reflects how the run looked from "
        "step 1 (the codec's gap, which gap_vs_control warns about at step 1), not a change "
        "seen coming",
        "- a threshold at a figure's bound (an ESS < 0, a fraction > 1) means some healthy "
        "calibration run reached that bound for the held steps: at this false-fire rate the "
        "signal cannot fire",
        "",
        f"### Raw signals (fire: held {args.hold} logged steps past a threshold, the "
        f"{args.quantile:g} quantile of the healthy calibration runs' most extreme held "
        "values)",
        "",
        *HEAD,
        *(s.row() for s in sig),
        "",
        "### Rules, each alone with its defaults (first warning or stop)",
        "",
        *HEAD,
        *(r.row() for r in per_rule),
        "",
        f"### Warn set against stop set (warn set: no control and at most "
        f"{args.warn_false:.0%} of healthy treatments fired on the calibration seeds)",
        "",
        "Warn set: "
        + ("; ".join(f"`{c.rule}` ({fmt_params(c.params)})" for c in chosen) or "none")
        + ". The `warn` rules preset (`orchestrator/rules/presets.py`) holds the set "
        "chosen on `bench/results/ground_truth/grid`, each rule with `action: warn` (it "
        "warns, never stops); its own row is last.",
        "",
        *HEAD,
        *(s.row() for s in sets),
        "",
        "### By codec strength (held out): collapses fired, of which before onset, median lead",
        "",
        "| signal or rule | " + " | ".join(sweeps) + " |",
        "|---|" + "---|" * len(sweeps),
        *(x.sweep_cells(sweeps) for x in by_strength if x.leads),
    ]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
