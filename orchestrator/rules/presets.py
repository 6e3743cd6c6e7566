"""Named rule presets: whole ``rules:`` settings a sweep picks by name.

    rules: {preset: ranking}                       # a sweep that ranks corrections
    rules: {preset: ranking, kl_blowup: {k: 3}}    # the preset, one rule set otherwise

A preset is plain rule settings (rule name -> parameters, as ``rules.build`` takes them);
what the sweep's ``rules:`` section sets beside ``preset`` is laid over it, parameter by
parameter. Call :func:`expand`; ``build`` does. What is not here: any new rule logic (a
preset only sets the registered rules' parameters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gapwatch.workers.validation import check_name

_ALL_RULES: Final = (
    "constant_advantage",
    "entropy_collapse",
    "ess_collapse",
    "gap_vs_control",
    "grad_norm_blowup",
    "kl_blowup",
    "length_at_cap",
    "length_collapse",
    "length_runaway",
    "mismatch_growth",
    "non_finite",
    "post_tool_tail_growth",
    "score_collapse",
)
"""Every built-in rule (``tests/orchestrator/test_rules.py`` checks it against the
registry; the registry is not imported here, so presets load before the library)."""

KEY: Final = "preset"
"""The key of a ``rules:`` section that names a preset (no rule is called this)."""

PRESETS: Final[dict[str, dict[str, dict[str, Any]]]] = {
    "default": {},
    "ranking": {
        "constant_advantage": {"k": 5},
        "score_collapse": {"enabled": False},
        "post_tool_tail_growth": {"enabled": False},
        "ess_collapse": {"enabled": False},
    },
    "warn": {
        **{rule: {"enabled": False} for rule in _ALL_RULES},
        "non_finite": {"action": "warn"},
        "ess_collapse": {"floor": 0.5, "k": 1, "baseline_steps": None, "action": "warn"},
        "constant_advantage": {"frac": 0.9, "k": 2, "saturation": None, "action": "warn"},
        "length_runaway": {
            "clip_level": 0.2,
            "improving": None,
            "budget_frac": 0.7,
            "k": 1,
            "action": "warn",
        },  # fmt: skip
    },
}
"""Preset name -> rule settings.

``default``: every rule with its defaults (the stop set: no false stop on the ground
truth's dense controls, bench/results/detection_bench.md).

``ranking``: for a sweep whose point is the leaderboard of corrections. It stops only runs
that are dead (no learning signal for 5 trainer steps: ``constant_advantage`` with k=5;
NaN/inf, length at the budget, KL and gradient blow-ups as by default) and never a run
that merely stalls below its control. Why each setting (bench/results/leaderboard_bench.md,
the ground truth's 132 treatments, 11 corrections x 3 top-k strengths x 4 seeds):

- ``constant_advantage.k = 5``: a stopped run's leaderboard score is the mean of its last
  5 steps before the stop (bench/leaderboard_bench.py's final score, as ground_truth.py's
  fate reads the last 5); after 5 steps without signal those 5 are all at the dead level
  the run would end at. With k=2 the window still holds pre-collapse steps (a collapsed
  run stopped at 2 steps shows +0.06 where it ends at 0.00), and at top-k 50% dead runs
  then outrank stalls; k=3 and 4 lost rank on 1-2 of 4 seeds there, k=5 on none.
- ``score_collapse`` off: its control test stops stalls (a run at +0.06 beside a control
  at +0.70: a stall at top-k 50%, ranked, not dead; the defaults stop it at step 16 and
  its board score falls from +0.17 to +0.03).
- ``post_tool_tail_growth`` and ``ess_collapse`` off: as stops they stopped stalls too
  (2 of the defaults' 5 false stops when this preset was chosen; the tails grow more in
  runs that do not collapse, bench/results/calibrate_rules.md; the tail rule has since
  become a warning by default), and they fire before a run is dead, so its board score is
  not yet the dead level.

Cost: a dead run runs 3 steps longer than under the defaults (5 steps without signal, not
2): on the ground truth 85% of the trial-steps of running every run to the end, against
the defaults' 66%; every run it stops has collapsed (69 of 113 collapses stopped).

``warn``: warnings only, tuned for lead; nothing is stopped. Four rules, each with
``action: warn``, the others off: ``non_finite`` as by default, and three made more
sensitive: ``ess_collapse`` (the mismatch's post-tool ESS under 0.5, one step, no
early-level guard), ``constant_advantage`` (90% of groups without signal for 2 steps, no
saturation test) and ``length_runaway`` (20% of actions cut or 70% of the budget, one
step). These three are the warn set ``bench/lead_time_bench.py``
picks on the ground truth's calibration seeds 0-1 (the settings that fire before onset on
the most collapsed runs with no dense control and at most 20% of healthy treatments
fired). On held-out seeds 2-3 it warned on 56 of 56 collapses, median 2 steps before
onset, and on 1 of 6 dense controls and 3 of 7 healthy treatments
(bench/results/lead_time_bench.md): a warning asks a person to look, not a verdict. For
a sweep you watch yourself, or beside a stopping sweep's results in the UI.
"""


def names() -> list[str]:
    """Every preset name, sorted."""
    return sorted(PRESETS)


def expand(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with its ``preset`` (if any) laid under it: the preset's parameters for
    each rule, then the section's own over them. A bad preset name fails in one line
    listing the valid ones."""
    if KEY not in settings:
        return dict(settings)
    name = check_name("rules preset", settings[KEY], names())
    out: dict[str, Any] = {rule: dict(params) for rule, params in PRESETS[name].items()}
    for rule, params in settings.items():
        if rule == KEY:
            continue
        if isinstance(params, Mapping) and isinstance(out.get(rule), dict):
            out[rule] = {**out[rule], **params}
        elif params is None and rule in out:
            continue  # `rule:` with nothing after it keeps the preset's settings
        else:
            out[rule] = params  # not a mapping: build() says what is wrong with it
    return out
