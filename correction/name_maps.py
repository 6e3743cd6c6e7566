"""Other trainers' metric names, mapped onto gapwatch's (``correction.names``).

gapwatch's names are verl's where verl has one, so most of a verl log needs no map; TRL
names its figures its own way. Each entry says what the foreign figure is, in gapwatch's
terms, and any difference in meaning (the unit, what it is computed over). A mapped log
keeps both names: the original (as the trainer wrote it) and gapwatch's (what the rules
read), so nothing the trainer logged is renamed away.

Read off TRL 1.16.0 (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._generate_and_score``
and ``_compute_loss``) and verl 0.9 (``verl/trainer/ppo/metric_utils.py``,
``verl/trainer/ppo/rollout_corr_helper.py``).

Call :func:`detect` (which trainer wrote these names), :func:`mapped` (a row with
gapwatch's names added), :data:`MAPS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from correction import names as N

Source = Literal["gapwatch", "verl", "trl"]
SOURCES: Final[tuple[Source, ...]] = ("gapwatch", "verl", "trl")


@dataclass(frozen=True)
class Meaning:
    """One foreign figure: the gapwatch name it feeds, and how they differ."""

    name: str
    """gapwatch's name (``correction.names``)."""
    note: str
    """What the foreign figure is, and how it differs from gapwatch's, if it does."""


TRL: Final[dict[str, Meaning]] = {
    "reward": Meaning(
        N.SCORE_MEAN, "mean total reward per completion (weighted sum of the reward functions)"
    ),
    "reward_std": Meaning(
        N.SCORE_STD, "std of the total reward over the whole batch (not within groups)"
    ),
    "frac_reward_zero_std": Meaning(
        N.ZERO_ADV_FRAC, "fraction of groups whose rewards all equal: their advantages are all 0"
    ),
    "completions/mean_length": Meaning(
        N.RESPONSE_LENGTH_MEAN, "tokens per completion (a completion is one generated response)"
    ),
    "completions/max_length": Meaning(N.RESPONSE_LENGTH_MAX, "longest completion, tokens"),
    "completion_length": Meaning(
        N.RESPONSE_LENGTH_MEAN,
        "tokens per completion, as TRL before 0.16 (and Unsloth's notebooks) named its mean",
    ),
    "completions/clipped_ratio": Meaning(
        N.CLIP_RATIO, "fraction of completions cut at max_completion_length (the clip ratio)"
    ),
    "sampling/sampling_logp_difference/mean": Meaning(
        N.ABS_LOG_RATIO_MEAN,
        "mean |log pi_trainer - log pi_vLLM| per completion token, tool tokens excluded: a mean "
        "|log-ratio|, not a probability gap (training/rollout_probs_diff_mean); vLLM runs only",
    ),
    "sampling/sampling_logp_difference/max": Meaning(
        N.ABS_LOG_RATIO_MAX, "max |log-ratio| over the batch's completion tokens; vLLM runs only"
    ),
    "sampling/importance_sampling_ratio/min": Meaning(
        N.IS_MIN, "min of pi_trainer/pi_vLLM after TRL's truncation or masking (its IS correction)"
    ),
    "sampling/importance_sampling_ratio/mean": Meaning(
        N.IS_MEAN, "mean of pi_trainer/pi_vLLM after TRL's truncation or masking"
    ),
    "sampling/importance_sampling_ratio/max": Meaning(
        N.IS_MAX, "max of pi_trainer/pi_vLLM after TRL's truncation or masking"
    ),
    "kl": Meaning(N.KL_TO_REF, "k3 KL to the reference model per token (logged when beta > 0)"),
    "entropy": Meaning(N.ENTROPY, "mean token entropy of the completions"),
    "grad_norm": Meaning(N.GRAD_NORM, "gradient norm before clipping (transformers.Trainer)"),
    "clip_ratio/region_mean": Meaning(
        N.PG_CLIPFRAC, "fraction of tokens whose PPO ratio was clipped (low or high)"
    ),
    "tools/call_frequency": Meaning(N.TOOL_CALLS, "tool calls per completion"),
    "step_time": Meaning(N.STEP_TIME, "seconds per optimisation step"),
}
"""TRL's ``GRPOTrainer`` figures (as ``on_log`` and ``trainer_state.json`` carry them)."""

VERL: Final[dict[str, Meaning]] = {
    "actor/kl_loss": Meaning(
        N.KL_TO_REF, "KL to the reference policy (use_kl_loss); verl's own estimator"
    ),
    "timing_s/step": Meaning(N.STEP_TIME, "seconds per training step"),
    "perf/throughput": Meaning(N.TOKENS_PER_S, "tokens per second per GPU (gapwatch's: per run)"),
}
"""verl names that differ from gapwatch's (the rest, ``critic/score/*``,
``response_length/*``, ``training/rollout_probs_diff_*``, ``rollout_corr/*``, are the
same names)."""

MAPS: Final[dict[Source, dict[str, Meaning]]] = {"gapwatch": {}, "verl": VERL, "trl": TRL}

_TRL_MARKS = frozenset({"reward", "frac_reward_zero_std", "completions/mean_length"})
_VERL_MARKS = frozenset({"critic/score/mean", "timing_s/step", "actor/pg_loss"})


def detect(names: Iterable[str]) -> Source:
    """Which trainer wrote a row with these names: ``trl`` where TRL's own names appear,
    ``verl`` where verl's do, else ``gapwatch``."""
    have = set(names)
    if have & _TRL_MARKS:
        return "trl"
    if have & _VERL_MARKS and have & set(VERL):
        return "verl"
    return "gapwatch"


def mapped(row: Mapping[str, Any], source: Source) -> dict[str, Any]:
    """``row`` with gapwatch's name added beside each foreign one (the original kept; a
    figure the row already has under gapwatch's name is not overwritten)."""
    table = MAPS[source]
    out = dict(row)
    for name, v in row.items():
        m = table.get(name)
        if m is not None and m.name not in row:
            out[m.name] = v
    return out
