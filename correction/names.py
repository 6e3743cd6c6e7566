"""The one dictionary of metric names gapwatch uses.

Every figure a worker reports, a rule reads, the store keeps and the UI draws is named
here, once. Where verl already names a figure we use verl's name, so a metrics log from
a verl run replays through gapwatch's rules unchanged (see DESIGN.md, "Metric names").

Per-slice variants: every gap statistic also exists per token slice (``text`` = tokens
written before any tool result is in the history, ``post_tool`` = after). The tails and
ESS have their own explicit forms (``tail/...``, ``ess/...``); every other statistic gets
its slice appended with :func:`sliced`, e.g. ``training/rollout_probs_diff_mean/post_tool``.
"""

from __future__ import annotations

import functools
from typing import Final, Literal

Slice = Literal["text", "post_tool"]
SLICES: Final[tuple[Slice, ...]] = ("text", "post_tool")
QUANTILES: Final[tuple[str, ...]] = ("p50", "p95", "p99", "max")

Ratio = Literal["mismatch", "ref_drift", "ppo"]
RATIOS: Final[tuple[Ratio, ...]] = ("mismatch", "ref_drift", "ppo")
"""The per-token ratio families whose tails, ESS and distributions are sliced:

- ``mismatch``: pi_trainer / pi_sampler, the train-inference gap (the tails' and ESS's
  unprefixed names, ``tail/abs_log_ratio/...``, ``ess/...``);
- ``ref_drift``: pi_theta / pi_ref, the policy before the step's update (trainer forward)
  against the frozen initial policy through the same forward: how far training has
  moved it (the TRL Post-Training Toolkit's post-tool drift tails);
- ``ppo``: pi_new / pi_behaviour, the ratio the PPO-clip loss sees over the update: the
  policy at each minibatch's forward over the ratio's denominator (``old_logprobs``: the
  sampler's or the trainer's log-probs before the update), pooled over the minibatches.
"""
_FAMILY: Final[dict[str, str]] = {"mismatch": "", "ref_drift": "ref_drift/", "ppo": "ppo/"}

# --- task score and advantages (verl: critic/*) ---------------------------------------
SCORE_MEAN: Final = "critic/score/mean"
SCORE_STD: Final = "critic/score/std"
SCORE_MIN: Final = "critic/score/min"
SCORE_MAX: Final = "critic/score/max"
ZERO_ADV_FRAC: Final = "critic/advantages/zero_group_frac"
"""Fraction of groups whose rewards are all equal, so every advantage in them is 0."""
SCORE_GROUP_STD: Final = "critic/score/group_std_mean"
"""Mean over groups of the std of rewards within a group (GRPO's learning signal; the
Post-Training Toolkit's ``group_reward_std``)."""

# --- lengths (verl: response_length/*) -------------------------------------------------
RESPONSE_LENGTH_MEAN: Final = "response_length/mean"
"""Tokens emitted per interaction (one action), mean over the step's rows."""
RESPONSE_LENGTH_MAX: Final = "response_length/max"
CLIP_RATIO: Final = "response_length/clip_ratio"
"""Fraction of interactions cut at the per-interaction token budget."""
POST_TOOL_TOKEN_FRAC: Final = "response_length/post_tool_token_frac"
"""Share of the step's emitted tokens written after a tool result (the post-tool slice):
how much of the batch the post-tool figures speak for."""
RESPONSE_BUDGET: Final = "response_length/budget"
"""The per-interaction token budget itself (constant per run; lets the UI draw it)."""

# --- the train-inference gap (verl: training/rollout_probs_diff_*, rollout_corr/*) -----
PROBS_DIFF_MEAN: Final = "training/rollout_probs_diff_mean"
"""Mean over emitted tokens of |pi_trainer - pi_sampler| (probability space)."""
PROBS_DIFF_MAX: Final = "training/rollout_probs_diff_max"
ABS_LOG_RATIO_MEAN: Final = "rollout_corr/abs_log_ratio_mean"
"""Mean |log pi_trainer - log pi_sampler|: the gap's log-ratio form, which has no floor."""
ABS_LOG_RATIO_MAX: Final = "rollout_corr/abs_log_ratio_max"
"""Max |log-ratio| over the step's tokens (TRL logs it; gapwatch's own tails are per slice)."""
KL: Final = "rollout_corr/kl"
"""k1 estimator of KL(sampler || trainer): mean of logp_sampler - logp_trainer."""
K3_KL: Final = "rollout_corr/k3_kl"
K2_KL: Final = "rollout_corr/k2_kl"
"""k2 estimator: 0.5 * mean((log pi_sampler - log pi_trainer)^2) (Tinker's
``optim/kl_sample_train_v2``; verl logs none)."""
LOG_PPL_DIFF: Final = "rollout_corr/log_ppl_diff"
CHI2_TOKEN: Final = "rollout_corr/chi2_token"

# --- importance weights after correction (verl: rollout_corr/rollout_is_*) -------------
IS_MEAN: Final = "rollout_corr/rollout_is_mean"
IS_STD: Final = "rollout_corr/rollout_is_std"
IS_MIN: Final = "rollout_corr/rollout_is_min"
IS_MAX: Final = "rollout_corr/rollout_is_max"
IS_ESS: Final = "rollout_corr/rollout_is_eff_sample_size"
MASKED_FRACTION: Final = "rollout_corr/masked_fraction"
"""Fraction of valid tokens whose correction weight was set to 0 (masking, rejection, veto)."""
IS_RATIO_FRACTION_HIGH: Final = "rollout_corr/rollout_is_ratio_fraction_high"
"""verl: fraction of valid tokens whose raw ratio (at the strategy's level) is above C / hi."""
IS_RATIO_FRACTION_LOW: Final = "rollout_corr/rollout_is_ratio_fraction_low"
"""verl: fraction of valid tokens whose raw ratio is below 1/C (truncate) or lo (mask)."""
RS_MASKED_FRACTION: Final = "rollout_corr/rollout_rs_masked_fraction"
"""verl's name for :data:`MASKED_FRACTION` (same value; both are reported)."""
RS_SEQ_MASKED_FRACTION: Final = "rollout_corr/rollout_rs_seq_masked_fraction"
"""verl: fraction of sequences (rows with a valid token) with at least one token masked."""
IS_VETO_FRACTION: Final = "rollout_corr/rollout_is_veto_fraction"
"""verl: fraction of sequences rejected by the veto (a token ratio below the threshold)."""
RAW_RATIO_MIN: Final = "rollout_corr/raw_ratio_min"
"""Raw importance ratio (at the strategy's level, before truncation/masking), min over tokens."""
RAW_RATIO_MEAN: Final = "rollout_corr/raw_ratio_mean"
RAW_RATIO_MAX: Final = "rollout_corr/raw_ratio_max"

# --- episode figures ------------------------------------------------------------------
NUM_TURNS: Final = "num_turns/mean"
PARSE_FAIL_FRAC: Final = "actions/parse_fail_frac"
SUCCESS_RATE: Final = "task/success_rate"
TOOL_CALLS: Final = "tool_call_counts/mean"

# --- actor ----------------------------------------------------------------------------
PG_LOSS: Final = "actor/pg_loss"
ENTROPY: Final = "actor/entropy"
GRAD_NORM: Final = "actor/grad_norm"
KL_TO_REF: Final = "actor/kl_to_ref"
PG_CLIPFRAC: Final = "actor/pg_clipfrac"
REF_LOG_RATIO_MEAN: Final = "actor/ref_log_ratio_mean"
"""Mean over emitted tokens of log pi_theta - log pi_ref (the ``ref_drift`` family; the
k1 estimate of KL(pi_theta || pi_ref) on the sampled tokens). Per slice with
:func:`sliced`. Beside it, ``actor/kl_to_ref`` is the k3 anchor's value in the loss."""
PPO_KL: Final = "actor/ppo_kl"
"""verl: mean over the update's tokens of log pi_behaviour - log pi_new (the ``ppo``
family's mean log-ratio, sign flipped as verl logs it). Per slice with :func:`sliced`."""

MEAN_OF: Final[dict[str, tuple[str, float]]] = {
    "ref_drift": (REF_LOG_RATIO_MEAN, 1.0),
    "ppo": (PPO_KL, -1.0),
}
"""Per drift family: the name of its mean figure and the sign it takes of the mean
log-ratio (the mismatch family's mean is ``rollout_corr/kl``, already reported)."""

# --- timing ---------------------------------------------------------------------------
STEP_TIME: Final = "perf/step_time_s"
TOKENS_PER_S: Final = "perf/tokens_per_s"


TURN_BUCKETS: Final[tuple[str, ...]] = ("1", "2", "3", "4", "5+")
"""Interaction-index buckets of the per-turn gap (the last one open-ended)."""
TURN_FIGURES: Final[tuple[str, ...]] = (PROBS_DIFF_MEAN, ABS_LOG_RATIO_MEAN)
"""The gap figures reported per turn."""


def turn_bucket(turn: int) -> str:
    """The bucket of a 1-based interaction index: ``"1"`` .. ``"4"``, ``"5+"``."""
    last = len(TURN_BUCKETS)
    return str(turn) if turn < last else TURN_BUCKETS[-1]


def by_turn(name: str, bucket: str) -> str:
    """``name`` over the tokens of one interaction-index bucket, verl-style:
    ``training/rollout_probs_diff_mean/turn_1`` .. ``.../turn_5+``. Users of multi-turn
    trainers ask which round diverges most; these answer it."""
    if bucket not in TURN_BUCKETS:
        raise ValueError(f"unknown turn bucket {bucket!r}; valid: {', '.join(TURN_BUCKETS)}")
    return f"{name}/turn_{bucket}"


def sliced(name: str, slice_: Slice) -> str:
    """``name`` restricted to one token slice: ``f"{name}/{slice_}"``."""
    return f"{name}/{slice_}"


def _family(ratio: str) -> str:
    if ratio not in _FAMILY:
        raise ValueError(f"unknown ratio {ratio!r}; valid: {', '.join(RATIOS)}")
    return _FAMILY[ratio]


def tail(slice_: Slice, q: str, ratio: Ratio = "mismatch") -> str:
    """Quantile ``q`` (p50, p95, p99, max) of |log-ratio| of family ``ratio`` on ``slice_``:
    ``tail/abs_log_ratio/post_tool/p95`` (mismatch), ``tail/ref_drift/abs_log_ratio/...``,
    ``tail/ppo/abs_log_ratio/...``."""
    if q not in QUANTILES:
        raise ValueError(f"unknown quantile {q!r}; valid: {', '.join(QUANTILES)}")
    return f"tail/{_family(ratio)}abs_log_ratio/{slice_}/{q}"


def ess(slice_: Slice, ratio: Ratio = "mismatch") -> str:
    """Effective sample size (a fraction in (0, 1]) of the ratios of family ``ratio`` on
    ``slice_``: ``ess/post_tool`` (mismatch: the importance weights), ``ess/ref_drift/...``,
    ``ess/ppo/...``."""
    return f"ess/{_family(ratio)}{slice_}"


def dist(slice_: Slice, ratio: Ratio = "mismatch") -> str:
    """Name of the stored histogram of |log-ratio| of family ``ratio`` on ``slice_`` (for
    ECDFs): ``dist/abs_log_ratio/post_tool``, ``dist/ref_drift/abs_log_ratio/...``."""
    return f"dist/{_family(ratio)}abs_log_ratio/{slice_}"


@functools.cache
def all_names() -> frozenset[str]:
    """Every metric name gapwatch knows: the constants above and the per-slice,
    per-quantile, per-ratio and per-turn names built from them."""
    base = {v for k, v in globals().items() if k.isupper() and isinstance(v, str) and "/" in v}
    out = set(base)
    for sl in SLICES:
        for r in RATIOS:
            out.update(tail(sl, q, r) for q in QUANTILES)
            out.add(ess(sl, r))
        out.update(sliced(n, sl) for n in base)
    for fig in TURN_FIGURES:
        out.update(by_turn(fig, b) for b in TURN_BUCKETS)
    return frozenset(out)
