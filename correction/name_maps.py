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
by default, every step, to a ``metrics.jsonl`` of ``{"step": n, ...}`` rows. The six
below were read in their source at the commit named (and surveyed in
``FRAMEWORK_NAMES.md``); none writes a metrics file by default (W&B, TensorBoard or a
console dict are their sinks):

- slime (THUDM/slime @ 624b824a, 2026-08-21): ``backends/megatron_utils/loss.py`` and
  ``model.py`` (``train/*``), ``observability/rollout_metrics.py`` and
  ``train_metric_utils.py`` (``rollout/*``, ``multi_turn/*``), and the opt-in
  ``examples/train_infer_mismatch_helper/mis.py`` (``train/mis_*``, verl's rollout_corr
  figures with a ``mis_`` prefix);
- SkyRL (NovaSky-AI/SkyRL @ a9564572, 2026-08-21): ``skyrl/train/trainer.py``,
  ``train/generators/utils.py``, ``backends/skyrl_train/workers/worker.py`` and
  ``utils/off_policy_correction_utils.py``;
- NeMo-RL (NVIDIA-NeMo/RL @ 7ea279ab, 2026-08-22): ``nemo_rl/algorithms/grpo.py``,
  ``algorithms/loss/loss_functions.py`` and ``experience/rollouts.py`` (``train/*``);
- ROLL (alibaba/ROLL @ 8eb27cc2, 2026-08-19), both pipelines: RLVR
  (``roll/utils/metrics/metrics_manager.py``, ``pipeline/rlvr/actor_pg_worker.py``) and
  agentic (``pipeline/agentic/agentic_pipeline.py``, ``env_manager/traj_env_manager.py``),
  with ``roll/utils/train_infer_corrections.py``; its trackers strip the ``@sum``
  reducer tags, so the names here are without them. Its ``critic/score/*`` and
  ``actor/pg_loss`` are gapwatch's names already;
- OpenRLHF (OpenRLHF/OpenRLHF @ 3c3be623, 2026-08-13): ``trainer/ray/ppo_actor.py``,
  ``trainer/ppo_utils/experience_maker.py`` and ``samples_generator.py``, ``models/loss.py``
  (``train/*`` in W&B and TensorBoard; the console dict has them without ``train/``);
- AReaL (inclusionAI/AReaL @ 4aef98d8, 2026-05-21): ``areal/trainer/ppo/actor.py``
  (``ppo_actor/*``, ``stats_tracker`` names ``<scope>/<name>/avg|min|max``) and
  ``areal/workflow/multi_turn.py`` (``rollout/*``);
- Oat (sail-sg/oat @ c1a074c3, 2025-10-31): ``oat/algorithms/ppo.py`` (the learner's
  ``train/*``, the actor's ``actor/*``) and ``oat/learners/base.py`` (``misc/*``; one dict
  per ``logging_steps``, pretty-printed on the console and sent to W&B with ``--use-wb``).
  Its PPO learner logs the mismatch by default: ``train/kl_sample_train_v1`` (k1) and the
  signed extremes of p_sampler - p_learner;
- XTuner (InternLM/xtuner @ 2b6bb99d, 2026-02-04): ``xtuner/v1/train/rl_trainer.py``
  (``_log_step``: the rollout's ``rewards/*`` and ``response_len/*``),
  ``xtuner/v1/rl/base/worker.py`` (``fit``: the trainer's and the sampler's entropy, the
  KL to the reference, the inner optimizer steps' ``grad_norm`` and losses) and
  ``xtuner/v1/rl/base/rollout_is.py`` (the ``mismatch/*`` figures, modified from verl's
  rollout correction: the same estimators); read from its console log by
  ``orchestrator.readers.xtuner``.

Some names hold a data-dependent segment (prime-rl's agent name in
``train/agg/effective/<agent>/reward/mean``, ROLL's env tag in ``env/<tag>/success``):
:data:`PATTERNS` match those, tried after the exact names. Left unmapped on purpose:

- sums and complements of others, except those in :data:`DERIVED` (Tinker's and ROLL's
  zero-advantage share): prime-rl's ``solved_none + solved_all`` (its names hold the
  agent's), ROLL's ``actor/train_infer_final_mask_mean`` and ``actor/max_len_mask_ratio``
  (the shares *kept*, 1.0 when the mask is off) and Tinker's ``kl_policy_base`` (a
  negative KL);
- counts and percentages posing as fractions: slime's ``rollout/zero_std/count_<r>``,
  SkyRL's ``reward/num_zero_variance_filtered``, ROLL's
  ``token/total_response_length/clip`` (counts), NeMo-RL's ``baseline_reward/pct_0`` and
  ``pct_1`` (percent, 0-100);
- figures whose meaning changes with a setting: NeMo-RL's ``is_oob_ratio`` and slime's
  ``tis_clipfrac`` (tokens clamped or tokens zeroed, by the truncation mode), AReaL's
  ``rs_filtered_fraction`` (the same);
- a different sign or estimator than gapwatch's name: AReaL's ``update/approx_kl`` and
  ROLL's ``actor/policykl`` (log pi_new - log pi_old, the opposite of ``actor/ppo_kl``),
  ROLL's ``actor/approxkl`` (k2); signed means that cancel (ROLL's
  ``actor/train_infer_diff_token_mean``, p_old - p_infer, not |dp|); NeMo-RL's
  ``token_mult_prob_error`` (mean exp|dlogp|, about 1 with no mismatch; its
  ``gen_kl_error`` is mapped instead);
- look-alikes: AReaL's ``no_eos_ratios`` (sequences as long as the padded batch, so the
  longest always counts), slime's ``rollout/rewards`` (group-normalised, about 0 for
  GRPO), SkyRL's ``minibatch_rollout_logprobs_abs_diff_*`` (the update's own drift
  included).

**Any separator, an exporter's prefix** (issue 37). A log exported from TensorBoard or
W&B to CSV often writes ``critic_score_mean`` for verl's ``critic/score/mean``, and a
tracker may file the figures under ``train/`` or ``charts/``. :func:`resolve` takes a
name that is not one a source writes to the one it stands for: its prefix (``train/``,
``charts/``) taken off, then its separators (``/ _ . -``) read as one, where that
names exactly one figure the source (or gapwatch) writes; ``eval/`` last, and only where
the row has that figure nowhere else (an evaluation figure is not the training one).
:func:`detect` counts, per source, the names of a row it explains that way, so a row of
flattened verl names is not taken for OpenRLHF (whose ``actor_grad_norm`` is also verl's
``actor/grad_norm`` flattened).

Call :func:`detect` (which trainer wrote these names), :func:`lookup` (one name's meaning
for a source), :func:`resolve` (the name a foreign one stands for, and how it matched),
:func:`mapped` (a row with gapwatch's names added), :data:`MAPS`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from gapwatch.correction import names as N

Source = Literal[
    "gapwatch", "verl", "trl", "prime-rl", "tinker",
    "slime", "skyrl", "nemo-rl", "roll", "openrlhf", "areal", "oat", "xtuner",
]  # fmt: skip
SOURCES: Final[tuple[Source, ...]] = (
    "gapwatch", "verl", "trl", "prime-rl", "tinker",
    "slime", "skyrl", "nemo-rl", "roll", "openrlhf", "areal", "oat", "xtuner",
)  # fmt: skip


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

SLIME: Final[dict[str, Meaning]] = {
    "rollout/raw_reward": Meaning(
        N.SCORE_MEAN,
        "mean raw reward per sample, before slime's post-processing (its rollout/rewards is "
        "group-normalised for GRPO-like estimators, so about 0)",
    ),
    "rollout/response_len/mean": Meaning(
        N.RESPONSE_LENGTH_MEAN,
        "loss-mask tokens per sample (a multi-turn sample's tool tokens not counted), over "
        "all turns of the sample",
    ),
    "rollout/response_len/max": Meaning(N.RESPONSE_LENGTH_MAX, "longest sample, loss-mask tokens"),
    "rollout/truncated_ratio": Meaning(
        N.CLIP_RATIO, "fraction of samples whose generation stopped at the length limit"
    ),
    "multi_turn/multi_turn_metric/round_number_mean": Meaning(
        N.NUM_TURNS, "rounds per sample (logged with --log-multi-turn)"
    ),
    "train/entropy_loss": Meaning(
        N.ENTROPY,
        "token entropy of the trainer, mean per sample then over samples: the entropy itself, "
        "despite the name",
    ),
    "train/kl_loss": Meaning(
        N.KL_TO_REF, "KL to the reference (--use-kl-loss); estimator --kl-loss-type, k1 by default"
    ),
    "train/grad_norm": Meaning(N.GRAD_NORM, "Megatron's gradient norm of the step"),
    "train/pg_loss": Meaning(N.PG_LOSS, "policy-gradient loss"),
    "train/pg_clipfrac": Meaning(N.PG_CLIPFRAC, "fraction of tokens where PPO's clip was active"),
    "train/ppo_kl": Meaning(
        N.PPO_KL, "mean log pi_old - log pi_new over the update (verl's sign; GSPO: per sequence)"
    ),
    "train/train_rollout_logprob_abs_diff": Meaning(
        N.ABS_LOG_RATIO_MEAN,
        "mean |log pi_train - log pi_rollout|, averaged per sample and then over samples (not "
        "pooled over tokens); logged by default, SGLang returning the rollout's logprobs",
    ),
    "train/tis": Meaning(
        N.RAW_RATIO_MEAN,
        "mean pi_old/pi_rollout per token before truncation or masking (--use-tis or "
        "--get-mismatch-metrics): the raw ratio, not the weight applied",
    ),
    "train/mis_kl": Meaning(
        N.KL,
        "mean(logp_rollout - logp_train): k1, verl's rollout_corr/kl (opt-in mis.py helper)",
    ),
    "train/mis_k3_kl": Meaning(
        N.K3_KL, "mean of exp(lr) - lr - 1, lr = logp_train - logp_rollout (opt-in mis.py helper)"
    ),
    "train/mis_log_ppl_diff": Meaning(
        N.LOG_PPL_DIFF, "per-sequence log-perplexity difference (opt-in mis.py helper)"
    ),
    "train/mis_chi2_token": Meaning(
        N.CHI2_TOKEN, "E[rho^2] - 1 of the token ratio (opt-in mis.py helper)"
    ),
}
"""slime's names (W&B/TensorBoard, or its console's ``step N: {...}`` dicts)."""

SKYRL: Final[dict[str, Meaning]] = {
    "reward/avg_raw_reward": Meaning(
        N.SCORE_MEAN, "mean raw reward per trajectory (before any KL shaping)"
    ),
    "generate/avg_num_tokens": Meaning(
        N.RESPONSE_LENGTH_MEAN,
        "response tokens per trajectory: all its turns, and the environment's tokens in the "
        "response, counted",
    ),
    "generate/max_num_tokens": Meaning(N.RESPONSE_LENGTH_MAX, "longest trajectory's response"),
    "policy/policy_entropy": Meaning(N.ENTROPY, "token entropy of the trainer over the update"),
    "policy/policy_kl": Meaning(
        N.KL_TO_REF, "KL to the reference (use_kl_loss); estimator kl_estimator_type, k3 default"
    ),
    "policy/grad_norm": Meaning(N.GRAD_NORM, "gradient norm, mean over the step's mini-batches"),
    "policy/policy_loss": Meaning(
        N.PG_LOSS, "policy loss (micro-batches summed, mini-batches averaged)"
    ),
    "policy/loss_metrics/clip_ratio": Meaning(
        N.PG_CLIPFRAC, "fraction of tokens where PPO's clip was active"
    ),
    "policy/rollout_train_logprobs_abs_diff_mean": Meaning(
        N.ABS_LOG_RATIO_MEAN,
        "mean |log pi_rollout - log pi_train| over response tokens, the trainer's forward "
        "pass before the update; logged by default (the generator returns logprobs)",
    ),
    "policy/rollout_train_logprobs_abs_diff_max": Meaning(
        N.ABS_LOG_RATIO_MAX, "max |log-ratio| over the step's response tokens"
    ),
    "policy/loss_metrics/is_ratio_mean": Meaning(
        N.RAW_RATIO_MEAN,
        "mean pi_old/pi_rollout per token before truncation or masking (off_policy_correction)",
    ),
    "policy/loss_metrics/is_ratio_max": Meaning(
        N.RAW_RATIO_MAX, "max pi_old/pi_rollout per token (off_policy_correction)"
    ),
    "policy/loss_metrics/token_mask_ratio": Meaning(
        N.MASKED_FRACTION,
        "fraction of valid tokens the token mask (token_mask_is_threshold_low/high) zeroes",
    ),
}
"""SkyRL's names (its tracker's, W&B by default; the console logger prints the same dict)."""

NEMO_RL: Final[dict[str, Meaning]] = {
    "train/reward": Meaning(N.SCORE_MEAN, "mean total reward per sample"),
    "train/mean_gen_tokens_per_sample": Meaning(
        N.RESPONSE_LENGTH_MEAN,
        "generated tokens per sample, summed over its turns; environment tokens not counted",
    ),
    "train/max_gen_tokens_per_sample": Meaning(
        N.RESPONSE_LENGTH_MAX, "most generated tokens of a sample"
    ),
    "train/truncation_rate": Meaning(N.CLIP_RATIO, "fraction of samples truncated"),
    "train/avg_turns_per_sample": Meaning(N.NUM_TURNS, "turns per sample"),
    "train/approx_entropy": Meaning(
        N.ENTROPY,
        "-mean((pi_train/pi_gen) * log pi_train) over the sampled tokens: an importance-"
        "weighted estimate of the trainer's entropy",
    ),
    "train/kl_penalty": Meaning(
        N.KL_TO_REF,
        "KL to the reference per token (reference_policy_kl_type, k3 by default); 0 when the "
        "penalty is off",
    ),
    "train/grad_norm": Meaning(N.GRAD_NORM, "gradient norm"),
    "train/loss": Meaning(N.PG_LOSS, "total loss: the clipped policy loss plus the KL penalty"),
    "train/gen_kl_error": Meaning(
        N.K3_KL,
        "mean over tokens of exp(lr) - lr - 1, lr = logp_train - logp_gen: k3 of KL(gen || "
        "train) under the default reference_policy_kl_type (another setting changes the "
        "estimator); logged every step",
    ),
    "train/sampling_importance_ratio": Meaning(
        N.IS_MEAN,
        "mean pi_train/pi_gen after NeMo-RL's truncation (tis, icepop, seq-mask-tis) if set; "
        "per token, or per sequence with sequence_level_importance_ratios",
    ),
}
"""NeMo-RL's GRPO names (logged with ``prefix="train"``; the console prints a few)."""

ROLL: Final[dict[str, Meaning]] = {
    "critic/entropy/mean": Meaning(
        N.ENTROPY,
        "token entropy of the trainer's old-log-prob pass (token mean); 0 where old log-probs "
        "are not recomputed",
    ),
    "critic/correct/mean": Meaning(N.SUCCESS_RATE, "share of samples scoring 1 (RLVR)"),
    "token/response_length/mean": Meaning(
        N.RESPONSE_LENGTH_MEAN, "response tokens per sample (RLVR)"
    ),
    "token/response_length/max": Meaning(N.RESPONSE_LENGTH_MAX, "longest response (RLVR)"),
    "tokens/response_length/mean": Meaning(
        N.RESPONSE_LENGTH_MEAN,
        "response-mask tokens per training sample (agentic: a whole trajectory, or one step "
        "in step-wise mode)",
    ),
    "tokens/response_length/max": Meaning(
        N.RESPONSE_LENGTH_MAX, "longest training sample's response (agentic)"
    ),
    "actor/kl_loss": Meaning(
        N.KL_TO_REF, "k3 KL to the reference per token (in the loss only with use_kl_loss)"
    ),
    "actor_train/grad_norm": Meaning(N.GRAD_NORM, "the training worker's gradient norm"),
    "actor/ppo_ratio_clipfrac": Meaning(
        N.PG_CLIPFRAC,
        "fraction of tokens whose PPO ratio left [1 - clip_low, 1 + clip_high], whether or "
        "not the clip was active for the advantage's sign",
    ),
    "actor/train_infer_ratio_token_mean": Meaning(
        N.RAW_RATIO_MEAN,
        "mean p_old/p_infer per token before any cap, per sequence then over sequences "
        "(logged when old log-probs are recomputed)",
    ),
    "actor/is_weight_clipfrac": Meaning(
        N.IS_RATIO_FRACTION_HIGH,
        "fraction of tokens whose IS weight (at is_weight.weight_type's level) exceeds its "
        "upper bound, before it is capped",
    ),
}
"""ROLL's names, RLVR and agentic pipelines both (TensorBoard by default, or its stdout
tracker's ``{"step": n, "metrics": {...}}``)."""

OPENRLHF: Final[dict[str, Meaning]] = {
    "train/reward": Meaning(
        N.SCORE_MEAN, "mean reward per sample (after DAPO/ProRL length penalties, if set)"
    ),
    "train/group_reward_std": Meaning(
        N.SCORE_GROUP_STD,
        "mean over samples of their group's reward std (n - 1): a within-group std, not the "
        "batch's (n_samples_per_prompt > 1)",
    ),
    "train/response_length": Meaning(
        N.RESPONSE_LENGTH_MEAN,
        "tokens from a sample's first to its last action token (multi-turn: the environment "
        "tokens between them counted)",
    ),
    "train/truncated": Meaning(
        N.CLIP_RATIO, "fraction of samples whose generation hit max tokens (finish_reason length)"
    ),
    "train/entropy_loss": Meaning(
        N.ENTROPY, "token entropy of the trainer (logged with --actor.entropy_coef set)"
    ),
    "train/kl": Meaning(
        N.KL_TO_REF, "KL to the reference per token; estimator --algo.kl.estimator, k1 default"
    ),
    "train/actor_grad_norm": Meaning(N.GRAD_NORM, "gradient norm of the step's last update"),
    "train/policy_loss": Meaning(N.PG_LOSS, "policy loss"),
    "train/ppo_clip_ratio": Meaning(
        N.PG_CLIPFRAC, "fraction of tokens where PPO's clip was active"
    ),
    "train/ppo_kl": Meaning(N.PPO_KL, "mean log pi_old - log pi_new over the update (verl's sign)"),
    "train/vllm_kl": Meaning(
        N.KL,
        "mean(logp_rollout - logp_old) over action tokens: k1 (with "
        "--algo.advantage.is_correction_enable, off by default)",
    ),
}
"""OpenRLHF's PPO/GRPO names (W&B and TensorBoard write ``train/``; its console dict, the
same names without it)."""

AREAL: Final[dict[str, Meaning]] = {
    "ppo_actor/task_reward/avg": Meaning(N.SCORE_MEAN, "mean task reward per sequence trained on"),
    "ppo_actor/task_reward/min": Meaning(N.SCORE_MIN, "lowest task reward of a sequence"),
    "ppo_actor/task_reward/max": Meaning(N.SCORE_MAX, "highest task reward of a sequence"),
    "ppo_actor/update/entropy/avg": Meaning(N.ENTROPY, "token entropy over the update"),
    "ppo_actor/update/actor_loss/avg": Meaning(N.PG_LOSS, "policy loss per token"),
    "ppo_actor/update/clip_ratio/avg": Meaning(
        N.PG_CLIPFRAC, "fraction of tokens where PPO's clip was active"
    ),
    "ppo_actor/update/grad_norm": Meaning(N.GRAD_NORM, "gradient norm, mean over minibatches"),
    "rollout/num_turns": Meaning(N.NUM_TURNS, "turns per episode (multi-turn workflow)"),
    "ppo_actor/update/compute_logp/kl_div_direct/avg": Meaning(
        N.KL,
        "mean(logp_old - logp_train): k1. logp_old is the inference engine's unless "
        "recompute_logprob is on without the decoupled loss (then the trainer's own), and "
        "logp_train is taken during the update, so later minibatches add its drift; logged "
        "where per-token versions are known",
    ),
    "ppo_actor/update/compute_logp/kl_div_dual/avg": Meaning(
        N.K3_KL, "mean of exp(lr) - lr - 1, lr = logp_train - logp_old: k3 (as kl_div_direct)"
    ),
    "ppo_actor/update/compute_logp/kl_div_taylor/avg": Meaning(
        N.K2_KL, "mean of lr^2 / 2, lr = logp_train - logp_old: k2 (as kl_div_direct)"
    ),
    "ppo_actor/update/behave_imp_weight/avg": Meaning(
        N.IS_MEAN,
        "mean pi_prox/pi_behave over the tokens the behaviour cap keeps (use_decoupled_loss)",
    ),
    "ppo_actor/update/behave_imp_weight/min": Meaning(
        N.IS_MIN, "min pi_prox/pi_behave over the kept tokens (use_decoupled_loss)"
    ),
    "ppo_actor/update/behave_imp_weight/max": Meaning(
        N.IS_MAX, "max pi_prox/pi_behave over the kept tokens (use_decoupled_loss)"
    ),
}
"""AReaL's names (``StatsLogger``: W&B, SwanLab, trackio, TensorBoard, and its console
table)."""

OAT: Final[dict[str, Meaning]] = {
    "actor/rewards": Meaning(N.SCORE_MEAN, "mean reward of the actor's responses"),
    "actor/response_tok_len": Meaning(N.RESPONSE_LENGTH_MEAN, "mean response tokens"),
    "actor/sampling_max_tokens": Meaning(N.RESPONSE_BUDGET, "the sampler's max_tokens"),
    "train/entropy": Meaning(
        N.ENTROPY, "mean token entropy of the learner (the round's last minibatch)"
    ),
    "train/policy_grad_norm": Meaning(N.GRAD_NORM, "largest gradient norm of the round"),
    "train/pg_loss": Meaning(N.PG_LOSS, "policy-gradient loss (the round's last minibatch)"),
    "train/pg_clipfrac": Meaning(N.PG_CLIPFRAC, "share of tokens clipped, the round's mean"),
    "train/kl_sample_train_v1": Meaning(
        N.KL, "mean(logp_sampler - logp_learner) over response tokens: the k1 estimator"
    ),
    "train/kl_sample_train_v2": Meaning(
        N.K2_KL, "0.5 * mean((logp_sampler - logp_learner)^2): the k2 estimator, not k3"
    ),
}
"""Oat's names (its console dict and W&B; the math RL example and the PPO learner). Left
unmapped: ``train/kl3`` (the k3 KL to the reference summed over each sequence, not a
per-token mean), ``train/all_zero_rewards_count`` and ``all_one_rewards_count`` (counts
of groups, with no group count logged beside them), ``train/logprobs_diff_max|min``
(new vs old policy: the update's own drift, not the mismatch); ``actor/no_eos_count``
and the prob-diff extremes are read into :data:`DERIVED` figures."""

XTUNER: Final[dict[str, Meaning]] = {
    "rewards/mean": Meaning(
        N.SCORE_MEAN, "mean reward of the rollout's samples trained on (per session in later "
        "versions)",
    ),
    "rewards/min": Meaning(N.SCORE_MIN, "lowest reward of the rollout's samples"),
    "rewards/max": Meaning(N.SCORE_MAX, "highest reward of the rollout's samples"),
    "response_len/mean": Meaning(N.RESPONSE_LENGTH_MEAN, "response tokens per sample"),
    "response_len/max": Meaning(N.RESPONSE_LENGTH_MAX, "longest response of the rollout"),
    "avg entropy": Meaning(
        N.ENTROPY,
        "-mean log pi_train of the sampled tokens over the rollout's trained tokens: the "
        "trainer's entropy estimate (its console; its tracker's entropy/train)",
    ),
    "avg KL divergence": Meaning(
        N.KL_TO_REF, "k3 (low_var_kl) KL of the trainer to the reference per token; logged "
        "only with a reference model",
    ),
    "mismatch/mismatch_kl": Meaning(
        N.KL, "mean(logp_rollout - logp_train) over response tokens: k1, verl's rollout_corr/kl"
    ),
    "mismatch/mismatch_k3_kl": Meaning(
        N.K3_KL, "mean of exp(lr) - lr - 1, lr = logp_train - logp_rollout: k3"
    ),
    "mismatch/mismatch_log_ppl_diff": Meaning(
        N.LOG_PPL_DIFF, "mean over sequences of log ppl_train - log ppl_rollout"
    ),
    "mismatch/mismatch_logprob_abs_diff": Meaning(
        N.ABS_LOG_RATIO_MEAN, "mean |logp_train - logp_rollout| over response tokens"
    ),
    "mismatch/rollout_is_mean": Meaning(N.IS_MEAN, "mean importance weight, as verl's"),
    "mismatch/rollout_is_std": Meaning(N.IS_STD, "std of the (clamped) importance weights"),
    "mismatch/rollout_is_min": Meaning(N.IS_MIN, "smallest importance weight, as verl's"),
    "mismatch/rollout_is_max": Meaning(N.IS_MAX, "largest importance weight, as verl's"),
    "mismatch/rollout_is_eff_sample_size": Meaning(
        N.IS_ESS, "1 / mean of the squared normalised (clamped) weights: the ESS fraction"
    ),
    "mismatch/rollout_is_ratio_fraction_high": Meaning(
        N.IS_RATIO_FRACTION_HIGH, "share of tokens whose ratio is above the upper threshold"
    ),
    "mismatch/rollout_is_ratio_fraction_low": Meaning(
        N.IS_RATIO_FRACTION_LOW, "share of tokens whose ratio is below the lower threshold"
    ),
    "mismatch/rollout_is_masked_fraction": Meaning(
        N.MASKED_FRACTION, "share of tokens the mask mode zeroes"
    ),
    "mismatch/rollout_is_seq_masked_fraction": Meaning(
        N.RS_SEQ_MASKED_FRACTION, "share of sequences with a masked token"
    ),
    "mismatch/rollout_is_veto_fraction": Meaning(
        N.IS_VETO_FRACTION, "share of sequences the veto rejects"
    ),
    "grad_norm": Meaning(
        N.GRAD_NORM, "gradient norm, the mean over the rollout's inner optimizer steps"
    ),
    "reduced_llm_loss": Meaning(
        N.PG_LOSS, "the policy loss reduced over ranks, the mean over the inner steps"
    ),
}  # fmt: skip
"""XTuner's RL names as its console prints them (``orchestrator.readers.xtuner``). Left
unmapped: ``mismatch/mismatch_training_ppl`` and ``mismatch_rollout_ppl`` (perplexities:
no gapwatch figure), ``max_ratio`` (the PPO ratio's largest value over the update: the
update's own drift, not the mismatch), ``avg rollout entropy`` (the sampler's)."""

MAPS: Final[dict[Source, dict[str, Meaning]]] = {
    "gapwatch": {}, "verl": VERL, "trl": TRL, "prime-rl": PRIME_RL, "tinker": TINKER,
    "slime": SLIME, "skyrl": SKYRL, "nemo-rl": NEMO_RL, "roll": ROLL, "openrlhf": OPENRLHF,
    "areal": AREAL, "oat": OAT, "xtuner": XTUNER,
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
    "roll": (
        (re.compile(r"env/[^/]+/success"),
         Meaning(N.SUCCESS_RATE, "share of an env tag's episodes that succeeded (env-defined)")),
        (re.compile(r"env/[^/]+/num_actions"),
         Meaning(N.NUM_TURNS, "actions (env steps) per episode of an env tag (agentic)")),
    ),
}  # fmt: skip
"""Names with a data-dependent segment (prime-rl's agent name, ROLL's env tag), per source;
a name may also come with transformers' ``train/`` prefix taken off
(``orchestrator.watch.logs``)."""


@dataclass(frozen=True)
class Derived:
    """A gapwatch figure a trainer logs only as a sum or complement of its own figures."""

    name: str
    """gapwatch's name."""
    of: tuple[str, ...]
    """The trainer's names it is computed from (each must be in the row)."""
    how: Callable[[tuple[float, ...]], float]
    """The figure from their values, in ``of``'s order."""
    formula: str
    """How, in the trainer's names (what ``gapwatch names`` and replay print)."""
    note: str
    """What it is, and how it differs from gapwatch's, if it does."""


DERIVED: Final[dict[Source, tuple[Derived, ...]]] = {
    "tinker": (
        Derived(
            N.ZERO_ADV_FRAC, ("env/all/by_group/frac_mixed",), lambda v: 1.0 - v[0],
            "1 - env/all/by_group/frac_mixed",
            "share of groups whose total rewards are all the same (all good or all bad: "
            "rl/metric_util.py _compute_by_group_metrics), the groups with zero advantage",
        ),
    ),
    "oat": (
        Derived(
            N.CLIP_RATIO, ("actor/no_eos_count", "actor/num_data"),
            lambda v: v[0] / v[1] if v[1] > 0 else math.nan,
            "actor/no_eos_count / actor/num_data",
            "share of responses cut at max_tokens without an end-of-sequence token "
            "(both averaged over the actors alike, so the ratio is the batch's)",
        ),
        Derived(
            N.PROBS_DIFF_MAX,
            ("train/sampler_learner_prob_diff_max", "train/sampler_learner_prob_diff_min"),
            lambda v: max(v[0], -v[1]),
            "max(train/sampler_learner_prob_diff_max, -train/sampler_learner_prob_diff_min)",
            "largest |p_sampler - p_learner| over the round's response tokens (Oat logs the "
            "signed extremes; masked tokens count as 0, so max >= 0 >= min)",
        ),
    ),
    "roll": (
        Derived(
            N.ZERO_ADV_FRAC,
            ("group/all_correct_groups_ratio", "group/all_incorrect_groups_ratio"), sum,
            "group/all_correct_groups_ratio + group/all_incorrect_groups_ratio",
            "share of groups all correct or all incorrect (metrics_manager.py "
            "add_group_metrics): at most the zero-advantage share, as a group whose "
            "rewards are all the same but neither 0 nor 1 counts as mixed",
        ),
    ),
}  # fmt: skip
"""Per source, the figures computed from others: each only where all its inputs are
numbers in the row, and never over a figure the row has under gapwatch's name. A share
that can only be smaller than gapwatch's (ROLL's) makes ``constant_advantage`` later,
never earlier."""


def derive(row: Mapping[str, Any], source: Source) -> list[tuple[Derived, float, tuple[str, ...]]]:
    """The :data:`DERIVED` figures of ``source`` that ``row`` has every input of (each
    input under its name or without transformers' ``train/`` prefix): (figure, value, the
    names read)."""
    out = []
    for d in DERIVED.get(source, ()):
        keys = tuple(k if k in row else k.removeprefix("train/") for k in d.of)
        vals = tuple(row.get(k) for k in keys)
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals):
            v = float(d.how(vals))  # type: ignore[arg-type]
            if math.isfinite(v):
                out.append((d, v, keys))
    return out


_TRL_MARKS = frozenset({"reward", "frac_reward_zero_std", "completions/mean_length"})
_TRL_OWN_MARKS = frozenset({"frac_reward_zero_std", "completions/mean_length"})
"""TRL's names no other trainer writes (``reward`` is also NeMo-RL's and OpenRLHF's,
``train/`` taken off)."""
_VERL_MARKS = frozenset({"critic/score/mean", "timing_s/step", "actor/pg_loss"})
_PRIME_MARKS = frozenset({"mismatch_kl/all/mean", "entropy/all/mean", "is_masked/mean"})
_TINKER_MARKS = frozenset({"optim/kl_sample_train_v1", "env/all/reward/total"})
_OAT_MARKS = frozenset({
    "actor/response_tok_len", "actor/sampling_max_tokens", "misc/global_step",
    "train/sampler_learner_prob_diff_max",
})  # fmt: skip
_NEMO_RL_MARKS = frozenset({
    "train/gen_kl_error", "train/token_mult_prob_error", "train/approx_entropy",
    "train/mean_gen_tokens_per_sample", "train/natural_termination_rate",
})  # fmt: skip
_OPENRLHF_MARKS = frozenset({
    "train/actor_grad_norm", "train/ppo_clip_ratio", "train/response_clip_ratio",
})  # fmt: skip
_SLIME_MARKS = frozenset({
    "train/train_rollout_logprob_abs_diff", "train/pg_clipfrac", "rollout/raw_reward",
    "rollout/response_len/mean", "rollout/truncated_ratio",
})  # fmt: skip
_SKYRL_MARKS = frozenset({
    "policy/policy_loss", "policy/policy_entropy", "reward/avg_raw_reward",
    "generate/avg_num_tokens", "trainer/global_step",
})  # fmt: skip
_AREAL_MARKS = frozenset({
    "ppo_actor/task_reward/avg", "ppo_actor/update/actor_loss/avg",
    "ppo_actor/update/entropy/avg", "ppo_actor/update/grad_norm",
})  # fmt: skip
_ROLL_MARKS = frozenset({
    "actor_train/grad_norm", "critic/entropy/mean", "critic/correct/mean",
    "actor/ppo_ratio_clipfrac", "token/response_length/mean", "tokens/response_length/mean",
})  # fmt: skip
_XTUNER_MARKS = frozenset({
    "mismatch/mismatch_kl", "mismatch/mismatch_k3_kl", "mismatch/mismatch_training_ppl",
    "mismatch/rollout_is_eff_sample_size", "avg entropy", "response_len/mean",
})  # fmt: skip
_OWN_MARKS: Final[tuple[tuple[Source, frozenset[str]], ...]] = (
    ("xtuner", _XTUNER_MARKS),
    ("oat", _OAT_MARKS), ("nemo-rl", _NEMO_RL_MARKS), ("openrlhf", _OPENRLHF_MARKS),
    ("slime", _SLIME_MARKS), ("skyrl", _SKYRL_MARKS), ("areal", _AREAL_MARKS),
    ("roll", _ROLL_MARKS),
)  # fmt: skip
"""Names only that trainer writes, told before TRL's ``reward`` and verl's names (NeMo-RL
and OpenRLHF log a ``reward``; ROLL logs verl's ``critic/score/mean`` and
``actor/kl_loss``); Oat's first, as it also logs slime's ``train/pg_clipfrac``. A mark
may come with its ``train/`` prefix taken off."""


def _marked(have: set[str], marks: frozenset[str]) -> bool:
    return any(m in have or m.removeprefix("train/") in have for m in marks)


def _detect_exact(have: set[str]) -> Source:
    """:func:`detect` on the names as written (no separator or prefix matching)."""
    if have & _TRL_OWN_MARKS:
        return "trl"
    for source, marks in _OWN_MARKS:
        if _marked(have, marks):
            return source
    if have & _TRL_MARKS:
        return "trl"
    if have & _VERL_MARKS and have & set(VERL):
        return "verl"
    if have & _PRIME_MARKS or any(PATTERNS["prime-rl"][0][0].fullmatch(n) for n in have):
        return "prime-rl"
    if have & _TINKER_MARKS:
        return "tinker"
    return "gapwatch"


def detect(names: Iterable[str]) -> Source:
    """Which trainer wrote a row with these names: ``trl`` where TRL's own names appear;
    slime, SkyRL, NeMo-RL, ROLL, OpenRLHF or AReaL where one of theirs does (with or
    without a ``train/`` prefix); else ``trl`` on its ``reward``, ``verl`` where verl's
    names are, ``prime-rl`` or ``tinker`` where theirs are, else ``gapwatch``. Where some
    names are known only through :func:`resolve` (another separator or an exporter's
    prefix), the source that explains the most of the row's names wins, the one told
    from the names as written keeping a tie."""
    have = set(names)
    told = _detect_exact(have | {n.removeprefix("train/") for n in have})
    matched = {n for n in have if n not in _KNOWN and _matches_any(n)}
    if not matched:
        return told
    votes = {src: sum(_explains(n, src) for n in have) for src in SOURCES}
    # a tie keeps the source told from the names as written; verl's names are gapwatch's,
    # and verl's map reads a few more (its actor/kl_loss, timing_s/step)
    best = max(votes, key=lambda src: (votes[src], src == told != "gapwatch", src == "verl"))
    return best if votes[best] > votes[told] or told == "gapwatch" else told


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


EXPORT_PREFIXES: Final[tuple[str, ...]] = ("train/", "charts/")
"""Prefixes a tracker or an exporter files training figures under: transformers' reporters
(``train/``) and TensorBoard/W&B charts exported to CSV (``charts/``)."""
EVAL_PREFIX: Final = "eval/"
"""Taken off last, and only where the row has the figure nowhere else."""
SEPARATORS: Final = re.compile(r"[/_.\-]+")
"""The separators a name may come with, read as one (``critic/score/mean``,
``critic_score_mean``, ``critic.score.mean`` and ``critic-score-mean`` alike)."""


def flat(name: str) -> str:
    """``name`` with every run of separators as one ``_`` (and none at its ends)."""
    return SEPARATORS.sub("_", name).strip("_")


@dataclass(frozen=True)
class NameMatch:
    """What a foreign name stands for: a name ``source`` writes (or gapwatch's), and how."""

    name: str
    """The name as the source writes it (a key of its map, a derived figure's input, a
    mark), or gapwatch's own (``correction.names``)."""
    how: str
    """``exact``, or how it was matched: ``prefix train/``, ``separators``, ``prefix
    charts/ and separators``, ``prefix eval/`` ..."""


def _forms(name: str) -> set[str]:
    bare = name.removeprefix("train/")
    return {name, bare, "train/" + bare}


@functools.cache
def vocabulary(source: Source, *, own: bool = False) -> frozenset[str]:
    """The names ``source`` writes that gapwatch reads: its map's keys (with and without
    transformers' ``train/``), its derived figures' inputs and its marks; gapwatch's own
    names (verl's) too, as every log may carry them, unless ``own`` (what tells a source
    apart: verl's and gapwatch's own are theirs)."""
    out: set[str] = set(N.all_names()) if not own or source in ("verl", "gapwatch") else set()
    for key in MAPS[source]:
        out |= _forms(key)
    for d in DERIVED.get(source, ()):
        for key in d.of:
            out |= _forms(key)
    marks = dict(_OWN_MARKS).get(source, frozenset())
    marks |= {"trl": _TRL_MARKS, "verl": _VERL_MARKS, "prime-rl": _PRIME_MARKS,
              "tinker": _TINKER_MARKS}.get(source, frozenset())  # fmt: skip
    for key in marks:
        out |= _forms(key)
    return frozenset(out)


@functools.cache
def _flat_index(source: Source) -> dict[str, frozenset[str]]:
    index: dict[str, set[str]] = {}
    for name in vocabulary(source):
        index.setdefault(flat(name), set()).add(name)
    return {k: frozenset(v) for k, v in index.items()}


@functools.cache
def _known() -> frozenset[str]:
    return frozenset().union(*(vocabulary(src) for src in SOURCES))


_KNOWN = _known()
"""Every name any source writes as gapwatch reads it."""


@functools.cache
def _own_flat(source: Source) -> frozenset[str]:
    return frozenset(flat(n) for n in vocabulary(source, own=True))


@functools.cache
def _explains(name: str, source: Source) -> bool:
    """Whether ``name`` is one of ``source``'s own names, as written or matched."""
    own = vocabulary(source, own=True)
    if name in own:
        return True
    rest = name
    for p in EXPORT_PREFIXES:
        if name.startswith(p):
            rest = name[len(p) :]
            if rest in own:
                return True
    return flat(rest) in _own_flat(source)


@functools.cache
def _matches_any(name: str) -> bool:
    return any(resolve(name, src) is not None for src in SOURCES)


@functools.cache
def resolve(name: str, source: Source, *, eval_prefix: bool = False) -> NameMatch | None:
    """The name ``source`` writes (or gapwatch's) that ``name`` stands for: itself, or
    with an exporter's prefix (:data:`EXPORT_PREFIXES`) taken off, or with its separators
    read as one where that matches exactly one known name; ``eval_prefix``: also with
    ``eval/`` taken off (the caller checks the row has the figure nowhere else). None:
    it stands for none."""
    vocab = vocabulary(source)
    if name in vocab:
        return NameMatch(name, "exact")
    bases = [("", name)] + [(p, name[len(p) :]) for p in EXPORT_PREFIXES if name.startswith(p)]
    if eval_prefix and name.startswith(EVAL_PREFIX):
        bases.append((EVAL_PREFIX, name[len(EVAL_PREFIX) :]))
    for prefix, rest in bases:
        how = f"prefix {prefix}" if prefix else ""
        if prefix and rest in vocab:
            return NameMatch(rest, how)
        hits = _flat_index(source).get(flat(rest), frozenset())
        # one figure: several names that differ only by train/ are one (OpenRLHF's)
        figures = {h.removeprefix("train/") for h in hits}
        if len(figures) == 1:
            (figure,) = figures
            pick = figure if figure in vocab else min(hits, key=len)
            return NameMatch(pick, f"{how} and separators" if how else "separators")
    return None


def mapped(row: Mapping[str, Any], source: Source) -> dict[str, Any]:
    """``row`` with gapwatch's name added beside each foreign one (the original kept; a
    figure the row already has under gapwatch's name is not overwritten)."""
    out = dict(row)
    for name, v in row.items():
        m = lookup(source, name)
        if m is not None and m.name not in out:
            out[m.name] = v
    for d, v, _ in derive(row, source):
        out.setdefault(d.name, v)
    return out
