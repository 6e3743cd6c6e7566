"""Other trainers' metric names, mapped onto gapwatch's (``correction.names``).

gapwatch's names are verl's where verl has one, so most of a verl log needs no map; TRL
names its figures its own way. Each entry says what the foreign figure is, in gapwatch's
terms, and any difference in meaning (the unit, what it is computed over). A mapped log
keeps both names: the original (as the trainer wrote it) and gapwatch's (what the rules
read), so nothing the trainer logged is renamed away.

Read off TRL 1.16.0 (``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._generate_and_score``
and ``_compute_loss``) and verl 0.9 (``verl/trainer/ppo/metric_utils.py``,
``verl/trainer/ppo/rollout_corr_helper.py``); prime-rl and the Tinker cookbook from the
survey of their source in ``FRAMEWORK_NAMES.md`` (prime-rl @ 559b4477, 2026-08-21:
``orchestrator/metrics.py``, ``trainer/rl/train.py`` and ``loss.py``; tinker-cookbook @
9dfcc3a2, 2026-08-19: ``rl/metric_util.py`` and ``rl/metrics.py``). Both log the mismatch
by default, every step, to a ``metrics.jsonl`` of ``{"step": n, ...}`` rows.

Some names hold a data-dependent segment (prime-rl's agent name in
``train/agg/effective/<agent>/reward/mean``): :data:`PATTERNS` match those, tried after the
exact names. Figures that are sums or complements of others (prime-rl's
``solved_none + solved_all``, Tinker's ``1 - frac_mixed`` for the zero-advantage share)
and Tinker's ``kl_policy_base`` (a negative KL estimate) are left unmapped.

Call :func:`detect` (which trainer wrote these names), :func:`lookup` (one name's meaning
for a source), :func:`mapped` (a row with gapwatch's names added), :data:`MAPS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from correction import names as N

Source = Literal["gapwatch", "verl", "trl", "prime-rl", "tinker"]
SOURCES: Final[tuple[Source, ...]] = ("gapwatch", "verl", "trl", "prime-rl", "tinker")


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

PRIME_RL: Final[dict[str, Meaning]] = {
    "mismatch_kl/all/mean": Meaning(
        N.K3_KL,
        "mean over tokens of exp(lr) - lr - 1, lr = logp_train - logp_infer: the k3 estimator "
        "of the trainer/inference mismatch",
    ),
    "is_masked/mean": Meaning(
        N.MASKED_FRACTION,
        "share of tokens the default (DPPO) loss masks: |p_train - p_infer| > 0.2, one-sided "
        "by the advantage's sign",
    ),
    "entropy/all/mean": Meaning(N.ENTROPY, "mean token entropy of the trainer"),
    "optim/grad_norm": Meaning(N.GRAD_NORM, "gradient norm (logged when optim.max_norm is set)"),
    "loss/mean": Meaning(N.PG_LOSS, "total loss (DPPO plus its kl_tau term)"),
    "ref_kl/mean": Meaning(N.KL_TO_REF, "KL to the reference (OPD/OPSD losses only)"),
    "train/agg/effective/num_output_tokens/mean": Meaning(
        N.RESPONSE_LENGTH_MEAN, "output tokens per episode (not per turn)"
    ),
    "train/agg/effective/num_output_tokens/max": Meaning(
        N.RESPONSE_LENGTH_MAX, "most output tokens of an episode"
    ),
    "train/agg/effective/num_turns/mean": Meaning(N.NUM_TURNS, "turns per episode"),
}
"""prime-rl's names (its ``metrics.jsonl``: trainer and orchestrator rows of one step)."""

TINKER: Final[dict[str, Meaning]] = {
    "env/all/reward/total": Meaning(N.SCORE_MEAN, "mean total reward per episode"),
    "env/all/ac_tokens_per_turn": Meaning(N.RESPONSE_LENGTH_MEAN, "action tokens per turn"),
    "env/all/turns_per_episode": Meaning(N.NUM_TURNS, "turns per episode"),
    "env/all/correct": Meaning(N.SUCCESS_RATE, "share of episodes graded correct (ProblemEnv)"),
    "optim/entropy": Meaning(
        N.ENTROPY, "-mean(sampling logprob): an estimate of the sampler's entropy"
    ),
    "optim/kl_sample_train_v1": Meaning(
        N.KL, "mean(logp_sampler - logp_train) over action tokens: the k1 estimator"
    ),
    "optim/kl_sample_train_v2": Meaning(
        N.K2_KL, "0.5 * mean((logp_sampler - logp_train)^2): the k2 estimator, not k3"
    ),
}
"""The Tinker cookbook's names (its ``metrics.jsonl``)."""

MAPS: Final[dict[Source, dict[str, Meaning]]] = {
    "gapwatch": {}, "verl": VERL, "trl": TRL, "prime-rl": PRIME_RL, "tinker": TINKER,
}  # fmt: skip

PATTERNS: Final[dict[Source, tuple[tuple[re.Pattern[str], Meaning], ...]]] = {
    "prime-rl": (
        (re.compile(r"(?:train/)?agg/effective/[^/]+/reward/mean"),
         Meaning(N.SCORE_MEAN, "mean reward of the effective (trained-on) traces of an agent")),
        (re.compile(r"(?:train/)?agg/effective/[^/]+/reward/max"),
         Meaning(N.SCORE_MAX, "highest reward of an agent's effective traces")),
        (re.compile(r"(?:train/)?agg/effective/[^/]+/reward/min"),
         Meaning(N.SCORE_MIN, "lowest reward of an agent's effective traces")),
        (re.compile(r"(?:train/)?agg/effective/[^/]+/is_truncated/mean"),
         Meaning(N.CLIP_RATIO, "share of an agent's traces cut at the token limit")),
    ),
}  # fmt: skip
"""Names with a data-dependent segment (the agent's name), per source; a name may also
come with transformers' ``train/`` prefix taken off (``orchestrator.logs``)."""

_TRL_MARKS = frozenset({"reward", "frac_reward_zero_std", "completions/mean_length"})
_VERL_MARKS = frozenset({"critic/score/mean", "timing_s/step", "actor/pg_loss"})
_PRIME_MARKS = frozenset({"mismatch_kl/all/mean", "entropy/all/mean", "is_masked/mean"})
_TINKER_MARKS = frozenset({"optim/kl_sample_train_v1", "env/all/reward/total"})


def detect(names: Iterable[str]) -> Source:
    """Which trainer wrote a row with these names: ``trl`` where TRL's own names appear,
    ``verl`` where verl's do, ``prime-rl`` or ``tinker`` where theirs do, else
    ``gapwatch``."""
    have = set(names)
    if have & _TRL_MARKS:
        return "trl"
    if have & _VERL_MARKS and have & set(VERL):
        return "verl"
    if have & _PRIME_MARKS or any(PATTERNS["prime-rl"][0][0].fullmatch(n) for n in have):
        return "prime-rl"
    if have & _TINKER_MARKS:
        return "tinker"
    return "gapwatch"


def lookup(source: Source, name: str) -> Meaning | None:
    """The meaning of ``name`` as ``source`` writes it: its exact entry (with or without
    transformers' ``train/`` prefix), else the first pattern it matches; None where it
    has none."""
    table = MAPS[source]
    bare = name.removeprefix("train/")
    for candidate in (name, bare, "train/" + bare):
        m = table.get(candidate)
        if m is not None:
            return m
    for pattern, meaning in PATTERNS.get(source, ()):
        if pattern.fullmatch(name):
            return meaning
    return None


def mapped(row: Mapping[str, Any], source: Source) -> dict[str, Any]:
    """``row`` with gapwatch's name added beside each foreign one (the original kept; a
    figure the row already has under gapwatch's name is not overwritten)."""
    out = dict(row)
    for name, v in row.items():
        m = lookup(source, name)
        if m is not None and m.name not in out:
            out[m.name] = v
    return out
