"""``gapwatch names LOG``: how gapwatch reads a log, before any rule runs.

It says what was read (the format, the steps, where the steps came from), which of the
log's names were mapped onto gapwatch's and to what (the built-in maps of
``correction.name_maps``, told from the log, or ``--names``), and which of them matched
only with an exporter's prefix taken off or another separator (``critic_score_mean`` for
``critic/score/mean``), which rules can and cannot decide on it and why, and drafts a
names file for the keys left unmapped that look like a reward, a length or a mismatch: a
YAML the user checks and passes back with ``--names``. A draft keeps to a figure's
family: a clip fraction of the policy loss is not a length clip ratio.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gapwatch.correction import names as N
from gapwatch.orchestrator import rules as R
from gapwatch.orchestrator.readers.base import STEP_ALIASES
from gapwatch.orchestrator.watch.logs import NameMapper, ReadOptions, gapwatch_names, open_log

_LENGTH = r"(len|length|response|completion|output|eos|max_?tokens)"
"""Words of a length's family (a clip among them is a cut at the length cap)."""

# (pattern on a foreign name, the gapwatch name it may be): first match wins; a guess
GUESSES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.I), n)
    for p, n in (
        (r"mismatch|logp?_?diff|prob_?diff|sample_?train|train_?infer|rollout.*kl", N.KL),
        (r"masked", N.MASKED_FRACTION),
        # a length cut at the cap: a truncation, or a clip beside a length's word
        (rf"truncat|(?=.*clip)(?=.*{_LENGTH})", N.CLIP_RATIO),
        # any other clip: the policy loss's (PPO's ratio clipped), never a length's
        (r"clip", N.PG_CLIPFRAC),
        (r"(reward|score|return)s?([_/](mean|avg|total))?$", N.SCORE_MEAN),
        (r"(reward|score|return)s?[_/]std", N.SCORE_STD),
        (r"(completion|response|output|gen)[_/]?(len|length|tokens)|tokens?_per", N.RESPONSE_LENGTH_MEAN),
        (r"entropy", N.ENTROPY),
        (r"grad_?norm", N.GRAD_NORM),
        (r"(^|/)kl(_|/|$)|kl_?(div|loss|ref)", N.KL_TO_REF),
    )
)  # fmt: skip
"""Name shapes of a reward, a length, a mismatch and the actor's figures, for the draft;
each within its family (issue 37: ``actor_pg_clipfrac`` was drafted as the length clip
ratio)."""


def guess(name: str) -> str | None:
    """The gapwatch name an unmapped foreign ``name`` looks like, or None."""
    return next((ours for pattern, ours in GUESSES if pattern.search(name)), None)


def names_report(
    log: Path, *, fmt: str = "auto", names: str = "auto", options: ReadOptions | None = None
) -> dict[str, Any]:
    """What :func:`print_report` prints, as data."""
    stream = open_log(log, fmt, options)
    mapper = NameMapper(names)
    have: set[str] = set()
    for row in stream:
        have.update(mapper(row))
    have.difference_update(STEP_ALIASES)  # the step, whatever its name
    rep = stream.report
    ours = gapwatch_names()
    rs = R.build({})
    unfed = rs.unfed(have, None)
    foreign = sorted(
        n for n in have if n not in ours and n not in mapper.used and n not in mapper.inputs
    )
    draft = {n: g for n in foreign if (g := guess(n)) is not None and g not in have}
    return {
        "path": str(log), "format": rep.format, "steps": rep.steps,
        "first_step": rep.first_step, "last_step": rep.last_step, "notes": list(rep.notes),
        "source": mapper.source, "mapped": dict(mapper.used), "matched": dict(mapper.matched),
        "rules_can": [n for n in rs.names() if n not in unfed], "rules_cannot": unfed,
        "rules_caveats": rs.caveats(have),
        "unmapped": foreign, "draft": draft,
    }  # fmt: skip


def print_report(r: dict[str, Any]) -> None:
    from gapwatch.orchestrator.console import console, plain

    con = console()
    out = con.print
    out(plain(f"{r['path']}: {r['format']}, {r['steps']} steps ({r['first_step']}..{r['last_step']})"),
        markup=False, highlight=False)  # fmt: skip
    for note in r["notes"]:
        out(plain(f"  read: {note}"), markup=False, highlight=False)
    out(plain(f"names: {r['source']}"), markup=False, highlight=False)
    for theirs, ours in r["mapped"].items():
        how = r["matched"].get(theirs)
        note = f"   (matched by {how}: check it is this figure)" if how else ""
        out(plain(f"  {theirs} -> {ours}{note}"), markup=False, highlight=False)
    out(plain(f"rules that can decide: {', '.join(r['rules_can']) or 'none'}"), markup=False)
    for rule, why in r["rules_cannot"].items():
        out(plain(f"  cannot: {rule}: {why}"), markup=False, highlight=False)
    for rule, why in r["rules_caveats"].items():
        out(plain(f"  alone: {rule}: {why}"), markup=False, highlight=False)
    if r["draft"]:
        out("a names file for the keys left unmapped (check each meaning, then --names FILE):",
            markup=False)  # fmt: skip
        for theirs, ours in r["draft"].items():
            out(plain(f'"{theirs}": "{ours}"   # a guess from the name'), markup=False)
    elif r["unmapped"]:
        out(plain(f"unmapped, no guess: {', '.join(r['unmapped'][:20])}"), markup=False)
