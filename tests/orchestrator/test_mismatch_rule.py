"""The mismatch judged by itself: prime-rl's and Tinker's own names read without a names
file (``correction.name_maps``), and ``mismatch_growth`` stopping a run whose trainer/
sampler mismatch grows against its own early level, with no control, while a mismatch high
from the first step, or one that grows but stays below its family's guard, goes on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gapwatch.correction import name_maps
from gapwatch.correction import names as N
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.watch.logs import NameMapper

# Rows as prime-rl writes them (one step: its trainer row, then its orchestrator row), keys
# from FRAMEWORK_NAMES.md (prime-rl @ 559b4477): agent "agent" as in its unit tests.
PRIME_TRAINER = {"loss/mean": 0.1, "entropy/all/mean": 0.9, "mismatch_kl/all/mean": 0.001,
                 "mismatch_kl/all/max": 0.4, "is_masked/mean": 0.0, "optim/grad_norm": 0.3}  # fmt: skip
PRIME_ORCH = {"train/agg/effective/agent/reward/mean": 0.31,
              "train/agg/effective/agent/reward/max": 1.0,
              "train/agg/effective/agent/reward/min": 0.0,
              "train/agg/effective/num_output_tokens/mean": 812.0,
              "train/agg/effective/agent/is_truncated/mean": 0.02}  # fmt: skip
TINKER = {"env/all/reward/total": 0.42, "env/all/ac_tokens_per_turn": 180.0,
          "env/all/turns_per_episode": 3.0, "env/all/correct": 0.4,
          "optim/kl_sample_train_v1": 0.0007, "optim/kl_sample_train_v2": 0.0004,
          "optim/entropy": 0.8, "env/all/by_group/frac_mixed": 0.6}  # fmt: skip


def test_prime_rl_and_tinker_rows_are_told_apart_and_mapped_without_a_names_file() -> None:
    prime = NameMapper()
    out = prime({"step": 1, **PRIME_TRAINER, **PRIME_ORCH})
    assert prime.source == "prime-rl"
    assert out[N.K3_KL] == 0.001 and out[N.MASKED_FRACTION] == 0.0
    assert out[N.SCORE_MEAN] == 0.31 and out[N.SCORE_MAX] == 1.0 and out[N.SCORE_MIN] == 0.0
    assert out[N.CLIP_RATIO] == 0.02 and out[N.RESPONSE_LENGTH_MEAN] == 812.0
    assert out["mismatch_kl/all/mean"] == 0.001  # the trainer's own name kept
    tinker = NameMapper()
    out = tinker({"step": 1, **TINKER})
    assert tinker.source == "tinker"
    assert out[N.KL] == 0.0007 and out[N.K2_KL] == 0.0004 and out[N.SCORE_MEAN] == 0.42
    assert out[N.ZERO_ADV_FRAC] == pytest.approx(0.4)  # derived: 1 - frac_mixed
    # another agent's name is matched too; a name of no trainer is left alone
    assert name_maps.lookup("prime-rl", "train/agg/effective/solver/reward/mean") is not None
    assert name_maps.lookup("prime-rl", "train/agg/effective/reward/extra/mean") is None
    assert name_maps.detect({"time/step", "perf/mfu"}) == "gapwatch"


def _run(k3: list[float], **more: Any) -> list[dict[str, Any]]:
    return [{"step": i, N.K3_KL: v, N.SCORE_MEAN: 0.5, **more} for i, v in enumerate(k3, 1)]


def _stops(rows: list[dict[str, Any]], rs: rules.RuleSet | None = None) -> list[Any]:
    w = (rs or rules.build({})).watch()
    return [d for row in rows for d in w.step(row) if d.action == "stop"]


def test_a_mismatch_that_grows_while_the_score_holds_is_stopped_with_no_control() -> None:
    # prime-rl's story: mismatch KL 0.001 -> 0.5 -> 3 while the reward still holds at 0.5
    k3 = [0.001, 0.0012, 0.001, 0.0011, 0.002, 0.004, 0.01, 0.05, 0.2, 0.5, 1.0, 3.0]
    (stop,) = _stops(_run(k3))
    assert stop.rule == "mismatch_growth" and stop.step == 9  # the 3-step median past 10x, 2 steps
    ev = stop.evidence
    assert ev["figure"] == N.K3_KL and ev["early"] == pytest.approx(0.001)
    assert ev["times_early"] >= 10 and ev["value"] >= ev["guard"] == 0.01


def test_a_masked_share_from_zero_to_27_percent_is_a_growth() -> None:
    share = [0.0, 0.0, 0.001, 0.004, 0.002, 0.01, 0.03, 0.08, 0.15, 0.27, 0.27]
    rows = [{"step": i, N.MASKED_FRACTION: v} for i, v in enumerate(share, 1)]
    (stop,) = _stops(rows)
    assert stop.rule == "mismatch_growth" and stop.evidence["figure"] == N.MASKED_FRACTION


@pytest.mark.parametrize(
    "k3",
    [
        [0.8] * 12,  # high from step 1: the codec's gap, judged by the other rules
        [1e-5, 1e-5, 1e-5, 1e-4, 1e-3, 2e-3, 3e-3, 5e-3, 5e-3, 5e-3],  # 500x, below the guard
        [0.001, 0.001, 0.001, 0.5, 0.001, 0.001, 0.5, 0.001, 0.001, 0.001],  # single spikes
    ],
)
def test_no_stop_without_a_lasting_growth_past_the_guard(k3: list[float]) -> None:
    assert _stops(_run(k3)) == []


def test_the_seed_dense_log_is_never_stopped_by_it() -> None:
    """The seed's dense run (its gap figures in verl's names, 44 steps) goes on."""
    root = Path(__file__).resolve().parents[2] / "examples" / "logs"
    rows = [json.loads(line) for line in (root / "seed_dense.jsonl").read_text().splitlines()]
    rs = rules.build({}).select(["mismatch_growth"])
    assert _stops(rows, rs) == []
