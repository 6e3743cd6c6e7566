"""XTuner's RL console log (``orchestrator.readers.xtuner``): one step per rollout, its
figures gathered from every block XTuner prints for it, its names mapped
(``correction.name_maps.XTUNER``), and the rules judging it; bad input in one line.

The fixture ``tests/fixtures/logs/xtuner/rl_console.log`` is re-created from XTuner's
printing code at a recorded commit (its README and ``make_xtuner_log.py``): the lines as
XTuner writes them, the figures synthetic."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gapwatch.correction import names as N
from gapwatch.orchestrator import rules
from gapwatch.orchestrator.readers import LogError
from gapwatch.orchestrator.watch.follow import LogFollower
from gapwatch.orchestrator.watch.logs import NameMapper, read_log
from gapwatch.orchestrator.watch.replay import replay

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "fixtures" / "logs" / "xtuner" / "rl_console.log"
BREAK = 16
"""The fixture's rollout from which its mismatch grows and its reward and entropy fall."""


def _inner(rollout: int, name: str) -> list[float]:
    """A figure's values on the rollout's inner step lines, every rank, read by a regex."""
    pat = re.compile(rf"Rank\d+ Rollout {rollout} Step \d+: .*\b{name}=([-\d.]+)")
    return [float(m.group(1)) for ln in LOG.read_text().splitlines() if (m := pat.search(ln))]


def test_a_rollouts_blocks_are_one_step() -> None:
    log = read_log(LOG)
    assert log.format == "xtuner" and log.report is not None and log.report.skipped == 0
    assert [r["step"] for r in log.rows] == list(range(1, 41))
    row = log.rows[BREAK]
    # the title's "- name : value" lines, the timing section under its own prefix
    assert {"rewards/mean", "response_len/mean", "batch_size", "time/training"} <= set(row)
    # the worker's pairs and both JSON blocks
    assert {"avg entropy", "avg rollout entropy", "avg KL divergence"} <= set(row)
    assert {"mismatch/mismatch_kl", "mismatch/mismatch_training_ppl",
            "mismatch/rollout_is_eff_sample_size", "mismatch/rollout_is_max"} <= set(row)  # fmt: skip
    # the inner optimizer steps of every rank, summarised: a mean, a max for a max
    step = row["step"]
    assert row["grad_norm"] == pytest.approx(sum(_inner(step, "grad_norm")) / 4)
    assert row["max_ratio"] == max(_inner(step, "max_ratio"))
    assert len(_inner(step, "grad_norm")) == 4  # two ranks, two inner steps


def test_its_names_feed_the_rules() -> None:
    mapper = NameMapper()
    rows = [mapper(r) for r in read_log(LOG).rows]
    assert mapper.source == "xtuner"
    have = set().union(*rows)
    for ours in (N.SCORE_MEAN, N.SCORE_MIN, N.SCORE_MAX, N.RESPONSE_LENGTH_MEAN, N.ENTROPY,
                 N.KL_TO_REF, N.KL, N.K3_KL, N.IS_ESS, N.IS_MAX, N.IS_MIN, N.GRAD_NORM,
                 N.PG_LOSS, N.ABS_LOG_RATIO_MEAN):  # fmt: skip
        assert ours in have, ours
    unfed = rules.build().unfed(have, None)
    for rule in ("mismatch_growth", "entropy_collapse", "score_collapse", "ess_collapse"):
        assert rule not in unfed, rule


def test_a_run_whose_mismatch_grows_as_it_degrades_is_stopped_after_it_breaks() -> None:
    """Issue 37: a run whose mismatch KL grew many-fold while its entropy and reward fell
    was not stopped (gapwatch read a few rows of one stray dict). Read as XTuner wrote it,
    it is stopped after the rollout it breaks at, and its rollouts before are not."""
    mapper = NameMapper()
    rows = [mapper(r) for r in read_log(LOG).rows]
    stop = replay(rows, None, rules.build()).stop
    assert stop is not None and stop.step > BREAK
    assert stop.rule in {"mismatch_growth", "entropy_collapse", "score_collapse", "ess_collapse"}
    healthy = replay(rows[:BREAK], None, rules.build())
    assert healthy.stop is None


def test_followed_as_it_grows_it_reads_the_same(tmp_path: Path) -> None:
    lines = LOG.read_text().splitlines(keepends=True)
    path = tmp_path / "console.log"
    path.write_text("")
    f = LogFollower(path, "xtuner")
    got = []
    for i in range(0, len(lines), 97):  # the file grows by chunks that cut blocks apart
        with path.open("a") as fh:
            fh.write("".join(lines[i : i + 97]))
        got += f.poll()
    got += f.close()
    whole = read_log(LOG).rows
    assert [s.step for s in got if not s.addition] == [r["step"] for r in whole]


def test_later_and_earlier_titles_and_prefixes(tmp_path: Path) -> None:
    """XTuner's later trainer titles its blocks ``Train step N ...``; its file sink adds
    ``[RANK 0]`` and the module; the worker's inner lines may lack ``RankR``."""
    text = "\n".join([
        "[XTuner][RANK 0][2026-08-01 10:00:00][INFO][TrainingWorker] Rollout 7: avg entropy: 0.5000",
        "[XTuner][RANK 0][2026-08-01 10:00:01][INFO][TrainingWorker] Rollout 7 Step 0: grad_norm=0.2000",
        "[XTuner][2026-08-01 10:00:02][INFO] Train step 7 finished and timing listed:",
        " - step                     : 90.00s",
        "Train step 7 data statistics:",
        "- rewards/mean             : 0.2500",
        "- response_len/mean        : 100.0000",
        "\x1b[32m[XTuner][2026-08-01 10:02:00][INFO]\x1b[0m Rollout 8: avg entropy: 0.4000",
    ]) + "\n"  # fmt: skip
    p = tmp_path / "train.log"
    p.write_text(text)
    log = read_log(p)
    assert log.format == "xtuner"
    assert log.rows[0] == {"step": 7, "avg entropy": 0.5, "grad_norm": 0.2, "time/step": 90.0,
                           "rewards/mean": 0.25, "response_len/mean": 100.0}  # fmt: skip
    assert log.rows[1] == {"step": 8, "avg entropy": 0.4}


def test_a_broken_block_fails_in_one_line_and_nan_is_kept(tmp_path: Path) -> None:
    head = "[XTuner][2026-02-04 10:00:00][INFO] Rollout 1: avg entropy: 0.5000\n"
    broken = head + ' rollout mismatch metrics:\n{\n    "mismatch/mismatch_kl": 0.1,,\n}\n'
    p = tmp_path / "broken.log"
    p.write_text(broken)
    with pytest.raises(LogError, match="does not parse") as info:
        read_log(p)
    text = str(info.value)
    assert "\n" not in text and "line 2" in text  # where the block began
    gapwatch = str(Path(sys.executable).with_name("gapwatch"))
    res = subprocess.run([gapwatch, "replay", str(p)], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "does not parse" in res.stderr
    # a block cut by the file's end (the trainer still printing it): the steps before read
    cut = tmp_path / "cut.log"
    cut.write_text(head + 'Rollout 2: avg entropy: 0.4\n rollout mismatch metrics:\n{\n    "a": 1')
    assert [r["step"] for r in read_log(cut).rows] == [1, 2]
    # NaN, as json.dumps and the inner lines print it, is kept: the non_finite rule's
    nan = tmp_path / "nan.log"
    nan.write_text(head + " rollout mismatch metrics:\n{\n    \"mismatch/mismatch_kl\": NaN\n}\n"
                   "Rank0 Rollout 1 Step 0: reduced_llm_loss=nan, grad_norm=0.3000\n"
                   "Rollout 1 data statistics:\n- rewards/mean : 0.5000\n")  # fmt: skip
    (row,) = read_log(nan).rows
    assert math.isnan(row["mismatch/mismatch_kl"]) and math.isnan(row["reduced_llm_loss"])
    stop = replay([NameMapper()(row)], None, rules.build()).stop
    assert stop is not None and stop.rule == "non_finite"
