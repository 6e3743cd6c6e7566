"""The built-in name maps of slime, SkyRL, NeMo-RL, ROLL, OpenRLHF and AReaL
(``correction.name_maps``): each trainer's rows, as its default logger names them, are told
apart from every other trainer's, their key figures land on the right gapwatch names, and
the counts and percentages that pose as fractions are left unmapped. The earlier
detections (TRL, verl, prime-rl, Tinker, gapwatch's own) stand.

Key sets are copied from each trainer's source at the commits in ``name_maps``'s docstring
(and ``FRAMEWORK_NAMES.md``)."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest

from gapwatch.correction import name_maps
from gapwatch.correction import names as N
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.watch.logs import NameMapper, gapwatch_names
from tests.orchestrator.grid_slice import bench_module

# slime: a trainer dict (model.py, ``train/*``), the Megatron-side rollout dict and the
# rollout-side perf dict (rollout_metrics.py); one step's worth, merged.
SLIME = {
    "train/loss": 0.01, "train/pg_loss": 0.012, "train/entropy_loss": 0.61,
    "train/pg_clipfrac": 0.003, "train/ppo_kl": 1e-5, "train/kl_loss": 0.002,
    "train/train_rollout_logprob_abs_diff": 0.031, "train/grad_norm": 0.4,
    "train/lr-pg_0": 1e-6, "train/global_batch_size": 256.0,
    "rollout/raw_reward": 0.44, "rollout/rewards": 0.0, "rollout/response_lengths": 905.0,
    "rollout/truncated": 0.05, "rollout/log_probs": -0.3, "rollout/rollout_log_probs": -0.31,
    "rollout/advantages": 0.0, "rollout/response_len/mean": 901.0,
    "rollout/response_len/median": 840.0, "rollout/response_len/max": 4096.0,
    "rollout/response_len/min": 12.0, "rollout/zero_std/count_0.0": 9,
    "rollout/zero_std/count_1.0": 4, "rollout/repetition_frac": 0.01,
    "rollout/truncated_ratio": 0.05, "perf/rollout_time": 93.0,
}  # fmt: skip
SKYRL = {
    "trainer/global_step": 3, "trainer/epoch": 0, "reward/avg_pass_at_4": 0.6,
    "reward/avg_raw_reward": 0.38, "reward/mean_positive_reward": 1.0,
    "reward/num_zero_variance_filtered": 7, "generate/min_num_tokens": 30,
    "generate/max_num_tokens": 3000, "generate/avg_num_tokens": 640.0,
    "generate/std_num_tokens": 300.0, "policy/policy_loss": 0.02, "policy/final_loss": 0.021,
    "policy/policy_entropy": 0.7, "policy/response_length": 2048, "policy/policy_lr": 1e-6,
    "policy/loss_metrics/clip_ratio": 0.002, "policy/policy_kl": 0.001,
    "policy/grad_norm": 0.25, "policy/rollout_train_logprobs_abs_diff_mean": 0.02,
    "policy/rollout_train_logprobs_abs_diff_max": 3.1,
    "policy/rollout_train_logprobs_abs_diff_min": 0.0,
    "policy/rollout_train_logprobs_abs_diff_std": 0.05,
    "policy/minibatch_rollout_logprobs_abs_diff_mean": 0.03,
    "loss/avg_final_rewards": 0.38,
}  # fmt: skip
NEMO_RL = {
    "train/loss": 0.03, "train/grad_norm": 0.5, "train/reward": 0.27,
    "train/mean_prompt_length": 180.0, "train/total_num_tokens": 9e5,
    "train/advantages/mean": 0.0, "train/probs_ratio": 1.0, "train/probs_ratio_clamped": 1.0,
    "train/kl_penalty": 0.0004, "train/token_mult_prob_error": 1.02,
    "train/gen_kl_error": 0.0011, "train/policy_kl_error": 0.0012,
    "train/js_divergence_error": 0.0003, "train/sampling_importance_ratio": 1.0,
    "train/approx_entropy": 0.55, "train/baseline_reward/pct_0": 40.0,
    "train/baseline_reward/pct_1": 12.5, "train/baseline_reward/pct_mixed": 47.5,
    "train/max_seq_mult_prob_error": 1.8, "train/is_oob_ratio": 0.01,
    "train/mean_gen_tokens_per_sample": 700.0, "train/max_gen_tokens_per_sample": 2048.0,
    "train/truncation_rate": 0.08, "train/avg_turns_per_sample": 1.0,
    "train/natural_termination_rate": 0.92,
}  # fmt: skip
ROLL_RLVR = {
    "system/global_step": 3, "system/batch_size": 128, "time/step_total": 80.0,
    "token/response_length/mean": 512.0, "token/response_length/max": 4096.0,
    "token/total_response_length/clip": 6, "critic/entropy/mean": 0.4,
    "critic/correct/mean": 0.35, "critic/score/mean": 0.35, "critic/score/max": 1.0,
    "critic/score/min": 0.0, "critic/rewards/mean": 0.1,
    "group/all_correct_groups_ratio": 0.1, "group/all_incorrect_groups_ratio": 0.4,
    "group/mixed_groups_ratio": 0.5, "actor/pg_loss": 0.01, "actor/kl_loss": 0.002,
    "actor/total_loss": 0.012, "actor/approxkl": 1e-5, "actor/policykl": -1e-5,
    "actor/ppo_ratio_clipfrac": 0.004, "actor/clipfrac": 0.002, "actor/ratio_mean": 1.0,
    "actor_train/grad_norm": 0.3, "actor/train_infer_ratio_token_mean": 1.01,
    "actor/train_infer_diff_token_mean": 0.0002, "actor/is_weight_clipfrac": 0.003,
    "actor/train_infer_final_mask_mean": 0.98,
}  # fmt: skip
ROLL_AGENTIC = {
    "critic/score/mean": 0.6, "critic/score/max": 1.0, "critic/score/min": 0.0,
    "critic/rewards/mean": 0.6, "tokens/response_length/mean": 1400.0,
    "tokens/response_length/max": 6000.0, "rollout/score/mean": 0.58,
    "env/FrozenLake/success": 0.6, "env/FrozenLake/num_actions": 4.5,
    "env/response_length": 1300.0, "critic/entropy/mean": 0.5, "actor/pg_loss": 0.02,
    "actor/kl_loss": 0.001, "actor/ppo_ratio_clipfrac": 0.01, "actor_train/grad_norm": 0.2,
    "actor/max_len_mask_ratio": 1.0, "system/tps": 3000.0,
}  # fmt: skip
OPENRLHF = {
    "train/policy_loss": 0.05, "train/actor_lr": 5e-7, "train/actor_grad_norm": 0.9,
    "train/reward": 0.41, "train/return": 0.4, "train/response_length": 812.0,
    "train/total_length": 1000.0, "train/truncated": 0.03, "train/response_clip_ratio": 0.02,
    "train/kl": 0.0008, "train/logprobs_diff": 0.001, "train/ppo_clip_ratio": 0.01,
    "train/ppo_kl": 2e-5, "train/group_reward_std": 0.31,
    "train/timing/make_experience": 40.0, "train/global_step": 3,
}  # fmt: skip
AREAL = {
    "ppo_actor/task_reward/avg": 0.52, "ppo_actor/task_reward/min": 0.0,
    "ppo_actor/task_reward/max": 1.0, "ppo_actor/seq_len/avg": 900.0,
    "ppo_actor/prompt_len/avg": 150.0, "ppo_actor/no_eos_ratios/avg": 0.06,
    "ppo_actor/kl_rewards/avg": 0.0, "ppo_actor/advantages/avg": 0.0,
    "ppo_actor/update/entropy/avg": 0.66, "ppo_actor/update/actor_loss/avg": 0.01,
    "ppo_actor/update/clip_ratio/avg": 0.002, "ppo_actor/update/approx_kl/avg": 1e-5,
    "ppo_actor/update/importance_weight/avg": 1.0, "ppo_actor/update/grad_norm": 0.35,
    "ppo_actor/update/grad_norm__count": 4,
    "ppo_actor/update/compute_logp/kl_div_direct/avg": 0.0009,
    "ppo_actor/update/compute_logp/kl_div_dual/avg": 0.0007,
    "ppo_actor/update/compute_logp/kl_div_dual/max": 2.5,
    "ppo_actor/update/compute_logp/kl_div_taylor/avg": 0.0008,
    "rollout/reward": 0.5, "rollout/reward__count": 512,
}  # fmt: skip

# Oat (sail-sg/oat @ c1a074c3): one logging event's ``logs_dict`` of the math RL example
# with the PPO learner: ``train/*`` (algorithms/ppo.py learning_step), ``actor/*``
# (experiment/run_math_rl.py), ``misc/*`` (learners/base.py eval_and_log)
OAT = {
    "train/learning_round": 1.0, "train/learn_batch_time": 3.1, "train/pg_loss": 0.012,
    "train/entropy": 0.41, "train/kl3": 2.7, "train/reg_loss": 0.0, "train/policy_grad_norm": 0.38,
    "train/logprobs_diff_max": 0.9, "train/logprobs_diff_min": -1.1,
    "train/sampler_learner_prob_diff_max": 0.21, "train/sampler_learner_prob_diff_min": -0.34,
    "train/zero_pg_loss_count": 0.0, "train/pg_clipfrac": 0.004, "train/adv_mean": 0.0,
    "train/all_zero_rewards_count": 5.0, "train/all_one_rewards_count": 3.0,
    "train/kl_sample_train_v1": 0.0011, "train/kl_sample_train_v2": 0.0006,
    "actor/verify_time": 0.8, "actor/rewards": 0.43, "actor/no_eos_count": 16.0,
    "actor/num_data": 512.0, "actor/response_tok_len": 1450.0,
    "actor/sampling_max_tokens": 3000.0, "actor/sampling_temperature": 1.0,
    "misc/global_step": 12.0, "misc/policy_sgd_step": 12.0, "misc/lr": 1e-6,
    "misc/query_step": 1536.0, "misc/prompt_consumed": 1536.0,
}  # fmt: skip

ROWS: dict[str, dict[str, Any]] = {
    "slime": SLIME, "skyrl": SKYRL, "nemo-rl": NEMO_RL, "roll": ROLL_RLVR,
    "openrlhf": OPENRLHF, "areal": AREAL, "oat": OAT,
}  # fmt: skip
CASES = [*ROWS.items(), ("roll", ROLL_AGENTIC)]

# foreign name -> the gapwatch name it must feed (score, length, entropy, KL, grad norm, the
# mismatch figures)
EXPECTED: dict[str, dict[str, str]] = {
    "slime": {
        "rollout/raw_reward": N.SCORE_MEAN, "rollout/response_len/mean": N.RESPONSE_LENGTH_MEAN,
        "rollout/response_len/max": N.RESPONSE_LENGTH_MAX,
        "rollout/truncated_ratio": N.CLIP_RATIO, "train/entropy_loss": N.ENTROPY,
        "train/kl_loss": N.KL_TO_REF, "train/grad_norm": N.GRAD_NORM,
        "train/pg_loss": N.PG_LOSS, "train/pg_clipfrac": N.PG_CLIPFRAC,
        "train/ppo_kl": N.PPO_KL, "train/train_rollout_logprob_abs_diff": N.ABS_LOG_RATIO_MEAN,
        "train/tis": N.RAW_RATIO_MEAN, "train/mis_kl": N.KL, "train/mis_k3_kl": N.K3_KL,
    },
    "skyrl": {
        "reward/avg_raw_reward": N.SCORE_MEAN, "generate/avg_num_tokens": N.RESPONSE_LENGTH_MEAN,
        "generate/max_num_tokens": N.RESPONSE_LENGTH_MAX, "policy/policy_entropy": N.ENTROPY,
        "policy/policy_kl": N.KL_TO_REF, "policy/grad_norm": N.GRAD_NORM,
        "policy/policy_loss": N.PG_LOSS, "policy/loss_metrics/clip_ratio": N.PG_CLIPFRAC,
        "policy/rollout_train_logprobs_abs_diff_mean": N.ABS_LOG_RATIO_MEAN,
        "policy/rollout_train_logprobs_abs_diff_max": N.ABS_LOG_RATIO_MAX,
        "policy/loss_metrics/is_ratio_mean": N.RAW_RATIO_MEAN,
        "policy/loss_metrics/token_mask_ratio": N.MASKED_FRACTION,
    },
    "nemo-rl": {
        "train/reward": N.SCORE_MEAN, "train/mean_gen_tokens_per_sample": N.RESPONSE_LENGTH_MEAN,
        "train/max_gen_tokens_per_sample": N.RESPONSE_LENGTH_MAX,
        "train/truncation_rate": N.CLIP_RATIO, "train/avg_turns_per_sample": N.NUM_TURNS,
        "train/approx_entropy": N.ENTROPY, "train/kl_penalty": N.KL_TO_REF,
        "train/grad_norm": N.GRAD_NORM, "train/loss": N.PG_LOSS,
        "train/gen_kl_error": N.K3_KL, "train/sampling_importance_ratio": N.IS_MEAN,
    },
    "roll": {
        "critic/entropy/mean": N.ENTROPY, "critic/correct/mean": N.SUCCESS_RATE,
        "token/response_length/mean": N.RESPONSE_LENGTH_MEAN,
        "tokens/response_length/mean": N.RESPONSE_LENGTH_MEAN,
        "actor/kl_loss": N.KL_TO_REF, "actor_train/grad_norm": N.GRAD_NORM,
        "actor/ppo_ratio_clipfrac": N.PG_CLIPFRAC,
        "actor/train_infer_ratio_token_mean": N.RAW_RATIO_MEAN,
        "actor/is_weight_clipfrac": N.IS_RATIO_FRACTION_HIGH,
        "env/FrozenLake/success": N.SUCCESS_RATE, "env/webshop/num_actions": N.NUM_TURNS,
    },
    "openrlhf": {
        "train/reward": N.SCORE_MEAN, "train/response_length": N.RESPONSE_LENGTH_MEAN,
        "train/truncated": N.CLIP_RATIO, "train/entropy_loss": N.ENTROPY,
        "train/kl": N.KL_TO_REF, "train/actor_grad_norm": N.GRAD_NORM,
        "train/policy_loss": N.PG_LOSS, "train/ppo_clip_ratio": N.PG_CLIPFRAC,
        "train/ppo_kl": N.PPO_KL, "train/vllm_kl": N.KL,
        # the console dict's names, without the W&B prefix
        "reward": N.SCORE_MEAN, "actor_grad_norm": N.GRAD_NORM,
    },
    "areal": {
        "ppo_actor/task_reward/avg": N.SCORE_MEAN, "ppo_actor/task_reward/max": N.SCORE_MAX,
        "ppo_actor/update/entropy/avg": N.ENTROPY, "ppo_actor/update/grad_norm": N.GRAD_NORM,
        "ppo_actor/update/actor_loss/avg": N.PG_LOSS,
        "ppo_actor/update/clip_ratio/avg": N.PG_CLIPFRAC, "rollout/num_turns": N.NUM_TURNS,
        "ppo_actor/update/compute_logp/kl_div_direct/avg": N.KL,
        "ppo_actor/update/compute_logp/kl_div_dual/avg": N.K3_KL,
        "ppo_actor/update/compute_logp/kl_div_taylor/avg": N.K2_KL,
        "ppo_actor/update/behave_imp_weight/avg": N.IS_MEAN,
    },
    "oat": {
        "actor/rewards": N.SCORE_MEAN, "actor/response_tok_len": N.RESPONSE_LENGTH_MEAN,
        "actor/sampling_max_tokens": N.RESPONSE_BUDGET, "train/entropy": N.ENTROPY,
        "train/policy_grad_norm": N.GRAD_NORM, "train/pg_loss": N.PG_LOSS,
        "train/pg_clipfrac": N.PG_CLIPFRAC, "train/kl_sample_train_v1": N.KL,
        "train/kl_sample_train_v2": N.K2_KL,
    },
}  # fmt: skip

# counts, percentages, complements, signs and look-alikes that must not feed any name
TRAPS: dict[str, tuple[str, ...]] = {
    "slime": ("rollout/zero_std/count_0.0", "rollout/zero_std/count_1.0", "rollout/rewards",
              "train/tis_clipfrac", "train/ois"),
    "skyrl": ("reward/num_zero_variance_filtered", "reward/avg_pass_at_4",
              "policy/minibatch_rollout_logprobs_abs_diff_mean",
              "policy/loss_metrics/is_ratio_min"),
    "nemo-rl": ("train/baseline_reward/pct_0", "train/baseline_reward/pct_1",
                "train/baseline_reward/pct_mixed", "train/token_mult_prob_error",
                "train/is_oob_ratio", "train/max_seq_mult_prob_error", "train/probs_ratio"),
    "roll": ("token/total_response_length/clip", "group/all_correct_groups_ratio",
             "group/all_incorrect_groups_ratio", "actor/train_infer_final_mask_mean",
             "actor/max_len_mask_ratio", "actor/train_infer_diff_token_mean",
             "actor/approxkl", "actor/policykl"),
    "openrlhf": ("train/response_clip_ratio", "train/score", "train/logprobs_diff"),
    "areal": ("ppo_actor/no_eos_ratios/avg", "ppo_actor/kl_rewards/avg",
              "ppo_actor/update/approx_kl/avg", "ppo_actor/update/rs_filtered_fraction",
              "ppo_actor/seq_len/avg"),
    "oat": ("train/kl3", "train/all_zero_rewards_count", "train/all_one_rewards_count",
            "actor/no_eos_count", "train/logprobs_diff_max", "train/logprobs_diff_min",
            "train/sampler_learner_prob_diff_max", "train/sampler_learner_prob_diff_min"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("source", "row"),
    CASES,
    ids=["slime", "skyrl", "nemo-rl", "roll-rlvr", "openrlhf", "areal", "oat", "roll-agentic"],
)
def test_a_trainers_own_row_is_told_as_that_trainer(source: str, row: dict[str, Any]) -> None:
    assert name_maps.detect(row) == source
    # as ``replay`` reads it: transformers' ``train/`` prefix taken off where it can be
    mapper = NameMapper()
    out = mapper({"step": 1, **row})
    assert mapper.source == source
    for theirs, ours in EXPECTED[source].items():
        if theirs in row:
            assert out[ours] == row[theirs], theirs
    assert all(out[k] == v for k, v in row.items())  # the trainer's own names kept


@pytest.mark.parametrize("source", list(EXPECTED))
def test_key_figures_map_onto_the_right_gapwatch_names(source: Any) -> None:
    for theirs, ours in EXPECTED[source].items():
        m = name_maps.lookup(source, theirs)
        assert m is not None and m.name == ours, theirs


@pytest.mark.parametrize("source", list(TRAPS))
def test_counts_percentages_and_look_alikes_are_left_unmapped(source: Any) -> None:
    for name in TRAPS[source]:
        assert name_maps.lookup(source, name) is None, name
    out = NameMapper(source)({"step": 1, **{n: 40.0 for n in TRAPS[source]}})
    derived = {d.name for d in name_maps.DERIVED.get(source, ())}
    assert set(out) - derived == {"step", *TRAPS[source]}  # nothing mapped


def test_a_within_group_std_is_not_the_batch_std() -> None:
    m = name_maps.lookup("openrlhf", "train/group_reward_std")
    assert m is not None and m.name == N.SCORE_GROUP_STD
    for table in name_maps.MAPS.values():
        for theirs, meaning in table.items():
            if "group" in theirs:
                assert meaning.name != N.SCORE_STD, theirs


def test_percent_of_groups_never_reaches_a_fraction() -> None:
    """NeMo-RL's pct_0 + pct_1 is the zero-advantage share in percent: 52.5 read as a
    fraction would be 52 times the whole batch."""
    out = NameMapper()({"step": 1, **NEMO_RL})
    assert N.ZERO_ADV_FRAC not in out
    fractions = {N.ZERO_ADV_FRAC, N.CLIP_RATIO, N.MASKED_FRACTION, N.SUCCESS_RATE,
                 N.PG_CLIPFRAC, N.IS_RATIO_FRACTION_HIGH}  # fmt: skip
    for source, row in CASES:
        mapped = NameMapper(source)({"step": 1, **row})
        for name in fractions & set(mapped):
            assert 0.0 <= mapped[name] <= 1.0, (source, name)


def test_every_map_names_a_gapwatch_figure_and_every_source_has_a_map() -> None:
    ours = gapwatch_names()
    assert set(name_maps.MAPS) == set(name_maps.SOURCES)
    assert set(typing.get_args(name_maps.Source)) == set(name_maps.SOURCES)
    for source, table in name_maps.MAPS.items():
        for theirs, m in table.items():
            assert m.name in ours, (source, theirs)
            assert m.note, (source, theirs)
    for source, patterns in name_maps.PATTERNS.items():
        assert source in name_maps.SOURCES
        assert all(m.name in ours for _, m in patterns)


def test_one_of_a_steps_several_rows_is_told_alone() -> None:
    """slime, NeMo-RL and OpenRLHF log one step in more than one call (the trainer's dict,
    the rollout's); the mapper tells the source from the first row with a mark, so each
    part must carry one."""
    slime_train = {k: v for k, v in SLIME.items() if k.startswith("train/")}
    slime_rollout = {k: v for k, v in SLIME.items() if k.startswith(("rollout/", "perf/"))}
    slime_no_mismatch = {k: v for k, v in slime_train.items() if "rollout" not in k}
    nemo_rollout = {f"train/{k}": 1.0 for k in ("total_turns", "avg_turns_per_sample",
                    "natural_termination_rate", "truncation_rate",
                    "mean_gen_tokens_per_sample", "max_gen_tokens_per_sample")}  # fmt: skip
    openrlhf_console = {k.removeprefix("train/"): v for k, v in OPENRLHF.items()}
    for row, source in ((slime_train, "slime"), (slime_rollout, "slime"),
                        (slime_no_mismatch, "slime"), (nemo_rollout, "nemo-rl"),
                        (openrlhf_console, "openrlhf")):  # fmt: skip
        assert name_maps.detect(row) == source
        mapper = NameMapper()
        mapper({"step": 1, **row})
        assert mapper.source == source
    assert NameMapper()({"step": 1, **openrlhf_console})[N.SCORE_MEAN] == 0.41


def test_the_earlier_detections_stand() -> None:
    trl = {"loss", "grad_norm", "learning_rate", "reward", "reward_std",
           "frac_reward_zero_std", "completions/mean_length", "kl", "entropy",
           "clip_ratio/region_mean", "num_tokens"}  # fmt: skip
    assert name_maps.detect(trl) == "trl"
    assert name_maps.detect({"loss", "reward", "reward_std", "kl", "completion_length"}) == "trl"
    # a TRL row with the Post-Training Toolkit's group_reward_std is still TRL's
    assert name_maps.detect(trl | {"group_reward_std"}) == "trl"
    verl = {"critic/score/mean", "critic/score/max", "actor/pg_loss", "actor/entropy",
            "actor/kl_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm",
            "response_length/mean", "response_length/clip_ratio", "timing_s/step",
            "training/rollout_probs_diff_mean", "rollout_corr/k3_kl"}  # fmt: skip
    assert name_maps.detect(verl) == "verl"
    assert name_maps.detect({"mismatch_kl/all/mean", "loss/mean", "optim/grad_norm"}) == "prime-rl"
    assert name_maps.detect({"train/agg/effective/agent/reward/mean"}) == "prime-rl"
    assert name_maps.detect({"optim/kl_sample_train_v1", "env/all/reward/total"}) == "tinker"
    assert name_maps.detect({N.SCORE_MEAN, N.PG_LOSS, N.ENTROPY, N.K3_KL}) == "gapwatch"
    assert name_maps.detect({"time/step", "perf/mfu"}) == "gapwatch"


def test_each_source_is_accepted_where_names_are_chosen() -> None:
    from gapwatch.orchestrator.cli import NAMES_HELP
    from gapwatch.orchestrator.sweep.command import CommandWorker

    for source in name_maps.SOURCES:
        assert source in NAMES_HELP
        assert CommandWorker(command=["train"], names=source).names == source
        assert NameMapper(source).source == source


TINKER_LOG = (
    Path(__file__).parents[1] / "fixtures" / "logs" / "tinker" / "arithmetic_metrics.head30.jsonl"
)


def test_tinkers_zero_advantage_share_is_one_minus_its_mixed_share_on_a_real_log() -> None:
    """The Tinker cookbook logs no zero-advantage share, only ``by_group/frac_mixed`` (the
    share of groups whose total rewards are not all the same): its complement is exactly
    the share with zero advantage, so ``constant_advantage`` reads Tinker logs. A real
    run (tests/fixtures/logs/README.md): its reward rises from 0.68 to 1.0 in 4 steps and
    every group is then solved: saturated, so it is spared; the same rows with the score
    held at its first value (no rise: a run stuck, not solved) are stopped."""
    rows = [json.loads(line) for line in TINKER_LOG.read_text().splitlines()]
    mapper = NameMapper()
    mapped = [mapper(r) for r in rows]
    assert mapper.source == "tinker"
    for r, m in zip(rows, mapped, strict=True):
        assert m[N.ZERO_ADV_FRAC] == pytest.approx(1.0 - r["env/all/by_group/frac_mixed"])
        assert m[N.ZERO_ADV_FRAC] == pytest.approx(
            r["env/all/by_group/frac_all_good"] + r["env/all/by_group/frac_all_bad"]
        )
    assert mapper.used["1 - env/all/by_group/frac_mixed"] == N.ZERO_ADV_FRAC
    assert "env/all/by_group/frac_mixed" in mapper.inputs
    ca = rules.build().select(["constant_advantage"])
    w = ca.watch()
    assert not [d for m in mapped for d in w.step(m) if d.action == "stop"]  # saturated
    stuck = [{**m, N.SCORE_MEAN: mapped[0][N.SCORE_MEAN]} for m in mapped]
    w = ca.watch()
    stops = [d for m in stuck for d in w.step(m) if d.action == "stop"]
    assert stops and stops[0].step == 5 and stops[0].evidence["zero_group_frac"] >= 0.9


def test_rolls_zero_advantage_share_is_at_most_the_true_one() -> None:
    """ROLL counts a group all at 0.5 as mixed: all-correct + all-incorrect is a lower
    bound of the zero-advantage share, which can make ``constant_advantage`` later, never
    earlier. Only where both inputs are numbers."""
    out = NameMapper("roll")({"step": 1, **ROLL_RLVR})
    assert out[N.ZERO_ADV_FRAC] == pytest.approx(0.5)
    assert "group/mixed_groups_ratio" in out  # the trainer's own kept
    half = {k: v for k, v in ROLL_RLVR.items() if k != "group/all_incorrect_groups_ratio"}
    assert N.ZERO_ADV_FRAC not in NameMapper("roll")({"step": 1, **half})
    nan = {**ROLL_RLVR, "group/all_incorrect_groups_ratio": "n/a"}
    assert N.ZERO_ADV_FRAC not in NameMapper("roll")({"step": 1, **nan})
    for source, derived in name_maps.DERIVED.items():
        assert source in name_maps.SOURCES
        for d in derived:
            assert d.name in gapwatch_names() and all(
                name_maps.lookup(source, k) is None for k in d.of
            )


def test_oats_clip_ratio_and_largest_prob_diff_are_derived_from_its_counts_and_extremes() -> None:
    """Oat logs the responses cut at max_tokens as a count beside the responses' number,
    and the mismatch's signed extremes (p_sampler - p_learner): the clip ratio is their
    quotient, the largest |dp| the larger of max and -min."""
    mapper = NameMapper()
    out = mapper({"step": 1, **OAT})
    assert mapper.source == "oat"
    assert out[N.CLIP_RATIO] == pytest.approx(16 / 512)
    assert out[N.PROBS_DIFF_MAX] == pytest.approx(0.34)
    assert out[N.KL] == 0.0011 and out[N.RESPONSE_BUDGET] == 3000.0
    assert {"actor/no_eos_count", "train/sampler_learner_prob_diff_min"} <= mapper.inputs
    # no responses (a zero count of data): no ratio rather than a division by zero
    assert N.CLIP_RATIO not in NameMapper("oat")({"step": 1, **OAT, "actor/num_data": 0.0})
    # as transformers' reporters would strip "train/": read all the same
    bare = {k.removeprefix("train/"): v for k, v in OAT.items()}
    assert NameMapper("oat")({"step": 1, **bare})[N.PROBS_DIFF_MAX] == pytest.approx(0.34)


# --- names with any separator, an exporter's prefix (issue 37) ---------------------------

VERL_CSV = (
    Path(__file__).parents[1] / "fixtures" / "logs" / "verl_csv" / "aopd-i80f2v90.head30.flat.csv"
)
locate = bench_module("real_corpus").locate  # a corpus file, shipped or fetched


def test_a_name_matches_whatever_its_separator_and_an_exporters_prefix() -> None:
    for written in ("critic/score/mean", "critic_score_mean", "critic.score.mean",
                    "critic-score-mean", "charts/critic_score_mean", "train/critic.score.mean"):  # fmt: skip
        m = name_maps.resolve(written, "verl")
        assert m is not None and m.name == N.SCORE_MEAN, written
        assert (m.how == "exact") == (written == N.SCORE_MEAN), (written, m.how)
    # a foreign trainer's own name too, matched to the form it writes
    m = name_maps.resolve("completions_clipped_ratio", "trl")
    assert m is not None and (m.name, m.how) == ("completions/clipped_ratio", "separators")
    # eval/ only when asked (the caller checks the row has no training figure of it)
    assert name_maps.resolve("eval/critic_score_mean", "verl") is None
    m = name_maps.resolve("eval/critic_score_mean", "verl", eval_prefix=True)
    assert m is not None and m.name == N.SCORE_MEAN
    assert name_maps.resolve("critic_score_median", "verl") is None  # no such figure


def test_eval_figures_are_read_only_where_the_row_has_no_training_one() -> None:
    both = NameMapper()({"step": 1, "critic/score/mean": 0.1, "eval/critic_score_mean": 0.9})
    assert both[N.SCORE_MEAN] == 0.1
    mapper = NameMapper()
    only = mapper({"step": 1, "eval/critic_score_mean": 0.9, "actor/pg_loss": 0.0})
    assert only[N.SCORE_MEAN] == 0.9
    assert mapper.matched == {"eval/critic_score_mean": "prefix eval/ and separators"}


def test_flattened_verl_names_are_not_taken_for_another_trainer() -> None:
    """Issue 37: a verl run exported with ``_`` for ``/`` was taken for OpenRLHF (its
    console's ``actor_grad_norm`` is verl's ``actor/grad_norm`` flattened); only the
    gradient norm was mapped. Counting the names each trainer explains tells it."""
    flattened = {"critic_score_mean", "critic_score_max", "critic_score_min",
                 "response_length_mean", "response_length_clip_ratio", "actor_entropy",
                 "actor_grad_norm", "actor_pg_clipfrac", "timing_s_step"}  # fmt: skip
    assert name_maps.detect(flattened) == "verl"
    # OpenRLHF's own console names (train/ taken off) are still OpenRLHF's
    assert name_maps.detect({k.removeprefix("train/") for k in OPENRLHF}) == "openrlhf"
    mapper = NameMapper()
    row = mapper({"step": 1, **{k: 0.5 for k in flattened}})
    assert mapper.source == "verl"
    for ours in (N.SCORE_MEAN, N.SCORE_MIN, N.SCORE_MAX, N.RESPONSE_LENGTH_MEAN, N.CLIP_RATIO,
                 N.ENTROPY, N.GRAD_NORM, N.STEP_TIME):  # fmt: skip
        assert ours in row, ours
    assert mapper.matched["critic_score_mean"] == "separators"


def _slashed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each column's own verl name back (as the console wrote it)."""
    out = []
    for r in rows:
        back = {}
        for k, v in r.items():
            m = name_maps.resolve(k, "verl")
            back[m.name if m is not None else k] = v
        out.append(back)
    return out


def test_a_real_verl_log_exported_flat_is_judged_as_written() -> None:
    """``tests/fixtures/logs/verl_csv/``: the first 30 steps of a real verl run (the corpus
    run aopd-i80f2v90, its completions collapsing from about 1,800 tokens to under 100)
    exported as CSV with ``_`` for every ``/``. gapwatch reads it as verl's, maps its
    score, lengths and actor figures, and stops it where it stops the same steps under
    their own names, as it stops the original console log (shipped in the corpus)."""
    from gapwatch.orchestrator import rules
    from gapwatch.orchestrator.watch.logs import read_log
    from gapwatch.orchestrator.watch.replay import replay

    log = read_log(VERL_CSV)
    assert log.format == "csv"
    mapper = NameMapper()
    flat_rows = [mapper(r) for r in log.rows]
    assert mapper.source == "verl"
    assert {mapper.matched[k] for k in ("critic_score_mean", "response_length_mean")} == {
        "separators"
    }
    stop = replay(flat_rows, None, rules.build()).stop
    slash = NameMapper()
    named = replay([slash(r) for r in _slashed(log.rows)], None, rules.build()).stop
    assert stop is not None and named is not None
    assert (stop.rule, stop.step) == (named.rule, named.step)
    original = locate("aopd-i80f2v90/output.log")  # shipped (Apache-2.0)
    assert original is not None
    whole = NameMapper()
    rows = [whole(r) for r in read_log(original).rows if r["step"] <= log.rows[-1]["step"]]
    first = replay(rows, None, rules.build()).stop
    assert first is not None and (first.rule, first.step) == (stop.rule, stop.step)
