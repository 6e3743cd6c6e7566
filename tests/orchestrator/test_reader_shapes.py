"""The hand-written trainers' shapes of issue 28 (item 1), each read as written and the way
its steps were found said in the report: a JSONL with header or event records, per-metric
arrays whose position is the step, a wide CSV whose step column is ``iteration``,
``Step N:`` console lines, ``Epoch:[1/1](i/n), Reward: ...`` lines (no longer taken
for a long CSV), and the Tinker cookbook's per-step tables. Shapes as the issue describes them; the 26 logs it was found on are kept
apart from the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from gapwatch.correction import names as N
from gapwatch.orchestrator.watch.logs import NameMapper, read_log


@pytest.mark.parametrize(
    ("name", "text", "fmt", "steps", "note"),
    [
        (
            "a.jsonl",
            '{"type": "config", "lr": 1e-06, "model": "q"}\n'
            '{"step": 1, "reward": 0.1}\n{"event": "eval", "acc": 0.3}\n'
            '{"step": 2, "reward": 0.2}\n',
            "jsonl", [1, 2], "skipped 2 header or event line(s) without a step",
        ),
        (
            "b.jsonl",
            '{"iteration": 5, "reward": 0.1}\n{"iteration": 6, "reward": 0.2}\n',
            "jsonl", [5, 6], "steps: the 'iteration' field",
        ),
        (
            "c.json",
            '{\n  "rewards_avg": [0.1, 0.2, 0.3],\n  "kl_avg": [0.0, 0.01, null]\n}\n',
            "json_history", [0, 1, 2], "steps: the array position",
        ),
        (
            "d.csv",
            "iteration,reward,kl\n1,0.1,0.0\n2,0.2,0.01\n3,0.3,0.02\n",
            "csv", [1, 2, 3], "steps: the 'iteration' column",
        ),
        (
            "e.log",
            "Step 12: reward=-0.15 kl=0.001\nStep 13: reward=-0.10 kl=0.002\n",
            "keyvalue", [12, 13], "steps: the 'Step N' each line opens with",
        ),
        (
            "f.log",
            "Epoch:[1/1](12/500), Reward: 0.38, KL: 0.01\nEpoch:[1/1](13/500), Reward: 0.40, KL: 0.02\n",
            "keyvalue", [12, 13], "steps: the n/N progress counter",
        ),
        (
            # the Tinker cookbook's console log: a titled table per step (ml_log), after
            # log lines that print a dict of paths (not a row of figures)
            "tinker.log",
            "ml_log:81 [INFO] Saved checkpoints: {'state_path': 'tinker://x/000020'}\n"
            "ml_log:195 [INFO] \n                    Step 0                    \n"
            "\u250f\u2501\u2501\u2533\u2501\u2501\u2513\n"
            "\u2503 Metric                   \u2503 Value     \u2503\n"
            "\u2502 env/all/reward/total     \u2502 -0.892578 \u2502\n"
            "\u2502 optim/kl_sample_train_v1 \u2502 0.000374  \u2502\n"
            "\u2514\u2500\u2500\u2534\u2500\u2500\u2518\n"
            "****** trajectory idx=0, reward=-2 ******\n  win_minus_loss: -1.0\n"
            "                    Step 1                    \n"
            "\u2502 env/all/reward/total     \u2502 -0.75 \u2502\n"
            "\u2502 optim/kl_sample_train_v1 \u2502 0.0004 \u2502\n",
            "keyvalue", [0, 1], "steps: the 'Step N' title above each table",
        ),
    ],
)  # fmt: skip
def test_each_shape_is_read_with_its_step_source_said(
    tmp_path: Path, name: str, text: str, fmt: str, steps: list[int], note: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    log = read_log(path)
    assert log.format == fmt and log.report is not None
    assert [r["step"] for r in log.rows] == steps
    assert any(note in n for n in log.report.notes), log.report.notes
    assert all(len(r) > 1 for r in log.rows)  # every step has figures


def test_a_data_line_without_a_step_is_still_an_error(tmp_path: Path) -> None:
    from gapwatch.orchestrator.watch.logs import LogError

    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "reward": 0.1}\n{"reward": 0.2}\n')
    with pytest.raises(LogError, match='line 2: no "step" key'):
        read_log(path)


def test_arrays_of_other_lengths_or_text_are_not_a_history(tmp_path: Path) -> None:
    from gapwatch.orchestrator.watch.logs import LogError

    path = tmp_path / "cfg.json"
    path.write_text('{"layers": [1, 2, 3], "names": ["a", "b", "c"]}')
    with pytest.raises(LogError, match='no "step" key'):  # read as JSON lines, one line
        read_log(path)


def _buffered_trl_console(path: Path, summary: bool) -> None:
    """TRL's console with stdout buffered: the training bar runs to 50/50 first, then the
    50 dicts (logging_steps=1, epoch 0.02 a step) come, then (maybe) the closing summary."""
    lines = [f"{2 * i}%|{'#' * (i // 5)}| {i}/50 [00:{i:02d}<00:30, 1.6it/s]" for i in range(51)]
    lines += [
        f"{{'loss': '0.1', 'reward': '{0.1 + i / 1000:.3f}', 'epoch': '{i * 0.02:.2f}'}}"
        for i in range(1, 51)
    ]
    if summary:
        lines.append("{'train_runtime': '30.1', 'train_steps_per_second': '1.6', 'epoch': '1.0'}")
    path.write_text("\n".join(lines) + "\n")


def test_dicts_printed_after_a_finished_bar_take_their_steps_from_the_epochs(
    tmp_path: Path,
) -> None:
    from gapwatch.orchestrator.watch.follow import LogFollower

    path = tmp_path / "console.log"
    _buffered_trl_console(path, summary=False)
    # followed as it grows (watch): no summary to size the run yet
    follower = LogFollower(path, "console_dicts")
    steps = [s.step for s in follower.poll() + follower.close()]
    assert steps == list(range(1, 51))  # not 50..99 from the finished bar's count
    notes = [n for n in follower.report.notes if n.startswith("steps:")]
    assert len(notes) == 1 and "epoch fraction" in notes[0], notes  # one source, said
    _buffered_trl_console(path, summary=True)  # read whole (replay)
    log = read_log(path)
    assert [r["step"] for r in log.rows] == list(range(1, 51))


def test_gapwatch_names_says_what_was_read_mapped_and_decidable_and_drafts_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import yaml

    from gapwatch.correction import names as N
    from gapwatch.orchestrator.watch.names_report import names_report, print_report

    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "train/agg/effective/agent/reward/mean": 0.3, "mismatch_kl/all/mean": 1e-3,
             "gen_len": 300.0, "logprob_diff": 0.01, "lr": 1e-6} for s in (1, 2)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = names_report(path)
    assert (r["format"], r["steps"], r["source"]) == ("jsonl", 2, "prime-rl")
    assert r["mapped"]["mismatch_kl/all/mean"] == N.K3_KL
    assert "mismatch_growth" in r["rules_can"] and "score_collapse" in r["rules_can"]
    assert "length_collapse" in r["rules_cannot"]  # no length under a name it knows
    assert r["draft"] == {"gen_len": N.RESPONSE_LENGTH_MEAN, "logprob_diff": N.KL}
    print_report(r)
    out = capsys.readouterr().out
    draft = "\n".join(ln for ln in out.splitlines() if ln.startswith('"'))
    assert yaml.safe_load(draft) == r["draft"]  # the draft is a names file as printed


def test_gapwatch_names_says_a_name_matched_by_its_separators_and_keeps_drafts_in_family(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 37: a real verl run exported with ``_`` for ``/`` (tests/fixtures/logs/
    verl_csv/) is read as verl's, each name matched that way is said so, and a draft
    never offers a clip of the policy loss as the length clip ratio."""
    from gapwatch.correction import names as N
    from gapwatch.orchestrator.watch.names_report import guess, names_report, print_report

    fixture = Path(__file__).parents[1] / "fixtures" / "logs" / "verl_csv"
    r = names_report(fixture / "aopd-i80f2v90.head30.flat.csv")
    assert r["source"] == "verl"
    assert r["mapped"]["critic_score_mean"] == N.SCORE_MEAN
    assert r["matched"]["critic_score_mean"] == "separators"
    assert {"constant_advantage", "score_collapse", "length_collapse"} <= set(r["rules_can"])
    assert N.CLIP_RATIO not in r["draft"].values()
    print_report(r)
    out = capsys.readouterr().out
    assert "critic_score_mean -> critic/score/mean   (matched by separators" in out
    # the families of the draft: a length's cut, the policy loss's clip
    assert guess("actor_pg_clipfrac") == N.PG_CLIPFRAC
    assert guess("ppo_clip_ratio") == guess("clip_ratio/region_mean") == N.PG_CLIPFRAC
    assert guess("response_clip_ratio") == guess("gen/truncated_share") == N.CLIP_RATIO


def _oat_console(steps: range) -> str:
    """Oat's learner console: ``strategy.pprint(logs_dict)`` (a blank line, the dict
    pretty-printed one key a line, a blank line) every logging step, a sampled response
    printed between (``strategy.print``). Keys as Oat's source names them."""
    import io
    from contextlib import redirect_stdout
    from pprint import pprint

    out = io.StringIO()
    with redirect_stdout(out):
        for s in steps:
            print("\n")
            print("{'prompt': 'What is 2+3?', 'response': 'The answer is {5}.'}")
            print("\n")
            print("\n")
            pprint({"train/pg_loss": 0.01, "train/kl_sample_train_v1": 0.001 * s,
                    "train/sampler_learner_prob_diff_max": 0.2,
                    "train/sampler_learner_prob_diff_min": -0.3,
                    "actor/rewards": 0.3 + s / 100, "actor/no_eos_count": 4.0,
                    "actor/num_data": 128.0, "actor/response_tok_len": 700.0,
                    "actor/sampling_max_tokens": 2048.0, "misc/global_step": float(s),
                    "misc/lr": 1e-6})  # fmt: skip
            print("\n")
    return out.getvalue()


def test_dicts_pretty_printed_over_several_lines_are_read_whole_and_followed(
    tmp_path: Path,
) -> None:
    """Oat prints each step's dict with ``pprint``: one key a line. Each is joined and
    read as one entry, its step from ``misc/global_step``; a dict cut by the file's end
    (the trainer still printing it) comes once its last line has."""
    from gapwatch.orchestrator.watch.follow import LogFollower

    path = tmp_path / "oat.log"
    text = _oat_console(range(1, 13))
    path.write_text(text)
    log = read_log(path)
    assert log.format == "console_dicts" and log.report is not None
    assert [r["step"] for r in log.rows] == list(range(1, 13))
    assert any("misc/global_step" in n for n in log.report.notes), log.report.notes
    assert log.rows[-1]["train/kl_sample_train_v1"] == pytest.approx(0.012)
    mapper = NameMapper()
    rows = [mapper(r) for r in log.rows]
    assert mapper.source == "oat" and rows[-1][N.KL] == pytest.approx(0.012)
    assert rows[0][N.CLIP_RATIO] == pytest.approx(4 / 128)
    # followed while written: cut inside the 3rd dict, then the rest
    cut = text.index("'misc/global_step': 3.0")
    path.write_text(text[:cut])
    follower = LogFollower(path, "console_dicts")
    assert [s.step for s in follower.poll()] == [1, 2]
    with path.open("a") as fh:
        fh.write(text[cut:])
    assert [s.step for s in follower.poll() + follower.close()] == list(range(3, 13))
