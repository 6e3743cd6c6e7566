"""The log readers (``orchestrator.readers``): each format read as its writer wrote it
(the TRL fixtures under tests/fixtures/logs/trl/ are one real GRPOTrainer run, reported
every way it can report; see their README), detection by name and content, following a
growing log, name maps, and hostile input failing in one line."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from gapwatch.correction import names as N
from gapwatch.orchestrator import readers
from gapwatch.orchestrator.readers.base import LineReader, register
from gapwatch.orchestrator.sweep.command import CommandWorker
from gapwatch.orchestrator.watch.follow import LogFollower
from gapwatch.orchestrator.watch.logs import (
    LogError,
    NameMapper,
    ReadOptions,
    load_name_map,
    read_log,
)
from gapwatch.orchestrator.watch.replay import replay_cli

from .grid_slice import bench_module

ROOT = Path(__file__).resolve().parents[2]
TRL = ROOT / "tests" / "fixtures" / "logs" / "trl"
ALL = (
    "wandb", "tensorboard", "mlflow", "trackio", "trl_state", "ipynb", "json_history", "jsonl",
    "csv", "verl_console", "xtuner", "console_dicts", "keyvalue",
)  # fmt: skip


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text, encoding="utf-8")
    return p


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    assert text and "\n" not in text and "Traceback" not in text, repr(exc)
    return text


# --- the registry ------------------------------------------------------------------------


def test_registry_names_every_format_once_and_refuses_a_second_registration() -> None:
    assert sorted(readers.names()) == sorted(ALL)
    assert set(readers.DETECT_ORDER) == set(ALL)
    with pytest.raises(ValueError, match="registered twice"):
        register("csv")(type("Again", (LineReader,), {}))
    with pytest.raises(LogError, match="unknown log format 'xml'; valid: auto, .*tensorboard"):
        readers.get("xml")
    assert readers.get("trl").name == "trl_state" and readers.get("verl").name == "jsonl"


# --- one real TRL run, every way it reports ----------------------------------------------


def _trl_state_losses() -> dict[int, float]:
    doc = json.loads((TRL / "trainer_state.json").read_text())
    return {h["step"]: h["loss"] for h in doc["log_history"] if "loss" in h}


@pytest.mark.parametrize(
    ("path", "fmt", "loss"),
    [
        ("trainer_state.json", "trl_state", "loss"),
        ("console.txt", "console_dicts", "loss"),
        ("tensorboard", "tensorboard", "train/loss"),
        ("mlruns", "mlflow", "loss"),
        ("trackio", "trackio", "train/loss"),
        ("trackio/trl-fixture.db", "trackio", "train/loss"),
    ],
)
def test_a_real_trl_run_reads_the_same_in_every_format(path: str, fmt: str, loss: str) -> None:
    want = _trl_state_losses()
    assert sorted(want) == [1, 2, 3, 4, 5, 6]
    log = read_log(TRL / path)
    assert log.format == fmt
    rows = {r["step"]: r for r in log.rows if loss in r}
    assert sorted(rows) == sorted(want)
    for step, value in want.items():  # the console prints 4 significant digits
        assert math.isclose(rows[step][loss], value, rel_tol=2e-3, abs_tol=1e-7), (step, fmt)
    mapper = NameMapper()
    mapped = [mapper(r) for r in log.rows]
    assert mapper.source == "trl"
    assert any(N.SCORE_MEAN in r and N.ZERO_ADV_FRAC in r for r in mapped), fmt


def test_console_dicts_say_how_the_step_was_found(tmp_path: Path) -> None:
    log = read_log(TRL / "console.txt")
    assert log.report is not None
    assert len(log.report.notes) == 1 and "from the epoch fraction" in log.report.notes[0]
    assert [r["step"] for r in log.rows] == [1, 2, 3, 4, 5, 6]
    assert "train_runtime" not in log.names  # the closing summary is not a step
    # without the bars: the row number, or --logging-steps K
    dicts = [ln.split("\r")[-1] for ln in (TRL / "console.txt").read_text().splitlines()]
    bare = write(tmp_path, "out.txt", "\n".join(d for d in dicts if d.startswith("{'")) + "\n")
    rows = read_log(bare).rows
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    tenth = read_log(bare, options=ReadOptions(logging_steps=10))
    assert [r["step"] for r in tenth.rows] == [10, 20, 30, 40, 50, 60]
    assert tenth.report is not None and "logging-steps 10" in tenth.report.notes[0]


def test_console_dicts_among_noise_with_numbers_and_strings(tmp_path: Path) -> None:
    text = (
        "Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00]\n"
        "{'loss': 0.12, 'reward': '0.52', 'reward_std': 0.1, 'note': 'x', 'epoch': 0.01}\n"
        "\x1b[33mWARNING\x1b[0m something {not a dict}\n"
        "  3%|3   | 2/60 [00:09<04:10]{'loss': '0.2', 'reward': 0.61, 'epoch': '0.02'}\n"
        "{'eval_loss': 0.5, 'epoch': 0.02}\n"
    )
    log = read_log(write(tmp_path, "train.log", text))
    assert log.format == "console_dicts"
    assert [r["step"] for r in log.rows] == [1, 2]
    assert log.rows[0]["reward"] == 0.52 and log.rows[1]["eval_loss"] == 0.5
    assert "note" in log.ignored


# --- verl's console ----------------------------------------------------------------------


def test_verl_console_lines_with_prefixes_and_colour(tmp_path: Path) -> None:
    text = (
        "2025-06-01 12:00:01 INFO starting\n"
        "(TaskRunner pid=4242) step:1 - actor/entropy:0.91 - critic/score/mean:-0.68 - "
        "response_length/mean:312.5\n"
        "\x1b[36m(TaskRunner pid=4242)\x1b[0m step:2 - actor/entropy:0.88 - "
        "critic/score/mean:-0.61 - response_length/mean:nan\n"
    )
    log = read_log(write(tmp_path, "verl.out", text))
    assert log.format == "verl_console"
    assert log.rows[0] == {
        "step": 1, "actor/entropy": 0.91, N.SCORE_MEAN: -0.68, "response_length/mean": 312.5,
    }  # fmt: skip
    assert math.isnan(log.rows[1]["response_length/mean"])


def test_verl_lines_cut_short_keep_their_complete_figures(tmp_path: Path) -> None:
    """A tracker's output.log cut every long line at one width: the pair the cut falls in
    is dropped (even where what is left looks like a number); the rest is kept."""
    full = [
        f"step:{s} - actor/entropy:0.{90 - s} - critic/score/mean:0.{10 + s}123 - "
        f"response_length/mean:{200 + s}.25 - timing_s/step:{30 + s}.5"
        for s in range(1, 6)
    ]
    width = len(full[0]) - 8  # inside the last value of every line
    cut = [ln[:width] for ln in full]
    log = read_log(write(tmp_path, "output.log", "\n".join(cut) + "\n"))
    assert log.format == "verl_console"
    assert [r["step"] for r in log.rows] == [1, 2, 3, 4, 5]
    for r in log.rows:
        assert "timing_s/step" not in r and r["response_length/mean"] > 200
    assert log.report is not None and "cut at" in log.report.notes[0]
    # a line cut inside a name: that pair is dropped, the line's other figures kept
    one = write(tmp_path, "one.log", "step:7 - actor/entropy:0.5 - critic/sco\n")
    assert read_log(one).rows == [{"step": 7, "actor/entropy": 0.5}]


# --- keyvalue ----------------------------------------------------------------------------


def test_keyvalue_lines_with_step_field_pattern_and_wrapped_values(tmp_path: Path) -> None:
    text = (
        "\x1b[32m[train]\x1b[0m step=1 loss=0.31 reward: np.float64(0.5) kl=tensor(0.02)\n"
        "sample: Q: what is 2+2? A: 4 </answer>\n"
        "step=2 | loss=0.29 | reward: 0.55 | entropy: tensor(1.2, device='cuda:0')\n"
    )
    log = read_log(write(tmp_path, "train.txt", text))
    assert log.format == "keyvalue"
    assert log.rows == [
        {"step": 1, "loss": 0.31, "reward": 0.5, "kl": 0.02},
        {"step": 2, "loss": 0.29, "reward": 0.55, "entropy": 1.2},
    ]
    by_field = read_log(
        write(tmp_path, "it.txt", "it: 3 loss: 0.3\nit: 5 loss: 0.2\n"),
        options=ReadOptions(step_field="it"),
    )
    assert [(r["step"], r["loss"]) for r in by_field.rows] == [(3, 0.3), (5, 0.2)]
    by_pattern = read_log(
        write(
            tmp_path,
            "ep.txt",
            "=== Step 10 ===\nloss: 0.4\nreward = 1.5\n=== Step 20 ===\nloss: 0.3\n",
        ),
        options=ReadOptions(step_pattern=r"Step (\d+)"),
    )
    assert by_pattern.rows == [{"step": 10, "loss": 0.4, "reward": 1.5}, {"step": 20, "loss": 0.3}]
    with pytest.raises(LogError, match="needs a group"):
        ReadOptions(step_pattern="Step")


# --- tracker exports ---------------------------------------------------------------------


def test_wide_csv_history_export(tmp_path: Path) -> None:
    text = "_step,train/reward,train/loss,note\n0,0.1,1.5,a\n1,,1.4,b\n2,0.3,nan,\n,9,9,summary\n"
    log = read_log(write(tmp_path, "history.csv", text))
    assert log.format == "csv"
    assert [r["step"] for r in log.rows] == [0, 1, 2]
    assert log.rows[1] == {"step": 1, "train/loss": 1.4}
    assert math.isnan(log.rows[2]["train/loss"]) and log.ignored == {"note"}
    mapped = NameMapper()(log.rows[0])
    assert mapped[N.SCORE_MEAN] == 0.1  # transformers' train/ prefix looked through


def test_json_history_rows_and_arrays(tmp_path: Path) -> None:
    rows = [{"_step": 1, "reward": 0.1, "x": "s"}, {"_step": 2, "reward": 0.2, "kl": None}]
    log = read_log(write(tmp_path, "h.json", json.dumps(rows)))
    assert log.format == "json_history"
    assert log.rows == [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.2}]
    arrays = {"step": [5, 10, 15], "reward": [0.1, None, 0.3], "kl": [0.01, 0.02]}
    log = read_log(write(tmp_path, "a.json", json.dumps(arrays)))
    assert log.rows == [
        {"step": 5, "reward": 0.1, "kl": 0.01},
        {"step": 10, "kl": 0.02},
        {"step": 15, "reward": 0.3},
    ]


# --- notebooks ---------------------------------------------------------------------------

HTML_TABLE = (
    "<div><progress value='3' max='3'></progress> [3/3 00:10, Epoch 0/1]</div>"
    '<table border="1" class="dataframe"><thead><tr style="text-align: left;">'
    "<th>Step</th><th>Training Loss</th><th>reward</th><th>reward_std</th><th>kl</th></tr>"
    "</thead><tbody>"
    "<tr><td>1</td><td>0.000000</td><td>0.125000</td><td>0.250000</td><td>0.000000</td></tr>"
    "<tr><td>2</td><td>0.000100</td><td>0.375000</td><td>0.500000</td><td>0.002300</td></tr>"
    "<tr><td>3</td><td>0.000200</td><td>0.500000</td><td>0.410000</td><td>0.004100</td></tr>"
    "</tbody></table><p>"
)


def _notebook(outputs: list[dict[str, Any]]) -> str:
    cell = {"cell_type": "code", "source": ["trainer.train()"], "outputs": outputs}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_notebook_training_table_and_printed_dicts(tmp_path: Path) -> None:
    html = {"output_type": "display_data", "data": {"text/html": [HTML_TABLE]}}
    log = read_log(write(tmp_path, "unsloth.ipynb", _notebook([html])))
    assert log.format == "ipynb"
    assert [r["step"] for r in log.rows] == [1, 2, 3]
    assert log.rows[1] == {
        "step": 2,
        "loss": 0.0001,
        "reward": 0.375,
        "reward_std": 0.5,
        "kl": 0.0023,
    }
    text = "Step\tTraining Loss\treward\n1\t0.100000\t0.2\n2\t0.090000\t0.3\n"
    log = read_log(write(tmp_path, "t.ipynb", _notebook([{"output_type": "stream", "text": text}])))
    assert [(r["step"], r["reward"]) for r in log.rows] == [(1, 0.2), (2, 0.3)]
    printed = (TRL / "console.txt").read_text()
    stream = {"output_type": "stream", "name": "stdout", "text": printed}
    log = read_log(write(tmp_path, "c.ipynb", _notebook([stream])))
    assert [r["step"] for r in log.rows] == [1, 2, 3, 4, 5, 6] and "reward" in log.names


# --- detection and hostile input ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "match"),
    [
        ("a.log", "", "is empty"),
        ("a.log", "hello world\nnothing to see here\n", "cannot tell the format"),
        ("a.txt", "\x00\x01garbage\xff", "cannot tell the format"),
        ("a.json", '{"config": {"lr": 1}}', 'cannot tell the format|no "step"'),
        ("b.jsonl", '{"step": 1, "x": 1}\n{"step": 2, "x": ', "not valid JSON"),
    ],
)
def test_unreadable_input_fails_in_one_line(
    tmp_path: Path, name: str, data: str, match: str
) -> None:
    p = tmp_path / name
    p.write_bytes(data.encode("utf-8", errors="surrogateescape"))
    with pytest.raises(LogError, match=match) as info:
        read_log(p)
    text = _one_line(info.value)
    if "cannot tell" in text:
        assert "--format NAME" in text and "console_dicts" in text


def test_binary_and_forced_formats(tmp_path: Path) -> None:
    p = tmp_path / "blob.bin"
    p.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(LogError, match="not UTF-8 text") as info:
        read_log(p)
    _one_line(info.value)
    with pytest.raises(LogError, match="is not a file"):
        read_log(tmp_path)
    # --format forces a reader over detection
    p = write(tmp_path, "x.log", "step:3 - a:1.0 - b:2.0\n")
    assert read_log(p, "verl_console").rows == [{"step": 3, "a": 1.0, "b": 2.0}]
    with pytest.raises(LogError, match="holds no steps"):
        read_log(p, "console_dicts")


def test_broken_whole_files_fail_in_one_line(tmp_path: Path) -> None:
    import sqlite3

    (tmp_path / "events.out.tfevents.1.h.1.0").write_bytes(bytes(range(256)) * 12)
    (tmp_path / "bad.ipynb").write_text('{"cells": 3')
    (tmp_path / "empty").mkdir()
    con = sqlite3.connect(tmp_path / "other.db")
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    for name, match in [
        ("events.out.tfevents.1.h.1.0", "holds no steps"),
        ("bad.ipynb", "not a complete ipynb file"),
        ("empty", "not a file, nor a TensorBoard log folder"),
        ("other.db", "cannot tell the format"),
    ]:
        with pytest.raises(LogError, match=match) as info:
            read_log(tmp_path / name)
        _one_line(info.value)


def test_missing_tensorboard_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_tb(name: str, *a: Any, **k: Any) -> Any:
        if name.startswith("tensorboard"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_tb)
    with pytest.raises(LogError, match="pip install tensorboard"):
        read_log(TRL / "tensorboard")


# --- following ---------------------------------------------------------------------------


def test_following_a_tensorboard_folder_gives_only_new_steps(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    f = LogFollower(logdir)
    assert not f.exists()
    shutil.copytree(TRL / "tensorboard", logdir)
    assert [s.step for s in f.poll()] == [1, 2, 3, 4, 5, 6]
    assert f.poll() == [] and f.close() == []
    assert f.fmt == "tensorboard"


def test_a_log_folder_of_several_runs_reads_the_latest(tmp_path: Path) -> None:
    for name in ("old", "new"):
        shutil.copytree(TRL / "tensorboard", tmp_path / "runs" / name)
        time.sleep(0.02)
    event = next((tmp_path / "runs" / "new").iterdir())
    event.touch()
    log = read_log(tmp_path / "runs")
    assert [r["step"] for r in log.rows] == [1, 2, 3, 4, 5, 6]
    assert log.report is not None and "read the latest, new" in log.report.notes[0]


def test_following_console_output_line_by_line(tmp_path: Path) -> None:
    lines = (TRL / "console.txt").read_text().splitlines(keepends=True)
    log = tmp_path / "train.log"
    log.write_text("")
    f = LogFollower(log)
    got: list[int] = []
    for ln in lines:
        with log.open("a") as fh:
            fh.write(ln)
        got += [s.step for s in f.poll() if not s.addition]
    got += [s.step for s in f.close() if not s.addition]
    assert got == [1, 2, 3, 4, 5, 6] and f.fmt == "console_dicts" and f.error is None


def test_following_a_keyvalue_log_waits_for_a_quiet_file(tmp_path: Path) -> None:
    log = tmp_path / "run.txt"
    log.write_text("step=1 loss=0.5 reward=0.1\n")
    f = LogFollower(log, settle_s=0.05)
    assert f.poll() == []
    time.sleep(0.1)
    assert [(s.step, s.metrics) for s in f.poll()] == [(1, {"loss": 0.5, "reward": 0.1})]


def test_a_log_of_noise_so_far_is_waited_for(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("Loading model...\n")
    f = LogFollower(log)
    assert f.poll() == [] and f.error is None
    with log.open("a") as fh:
        fh.write("{'loss': 0.3, 'reward': 0.1}\n")
    assert [s.step for s in f.poll()] == [1]
    garbage = tmp_path / "g.log"
    garbage.write_text("nothing\n")
    g = LogFollower(garbage)
    g.poll()
    g.close()
    assert g.error is not None and "cannot tell the format" in _one_line(g.error)


# --- name maps ---------------------------------------------------------------------------


def test_a_users_name_map(tmp_path: Path, capsys: Any) -> None:
    m = write(
        tmp_path, "names.yaml", "rollout/rewards: critic/score/mean\npolicy/H: actor/entropy\n"
    )
    assert load_name_map(m) == {"rollout/rewards": N.SCORE_MEAN, "policy/H": N.ENTROPY}
    mapper = NameMapper(str(m))
    row = mapper({"step": 1, "rollout/rewards": 0.4, "policy/H": 1.1})
    assert row[N.SCORE_MEAN] == 0.4 and row[N.ENTROPY] == 1.1 and row["rollout/rewards"] == 0.4
    bad = write(tmp_path, "bad.yaml", "rollout/rewards: critic/score/meen\n")
    with pytest.raises(
        LogError, match="unknown gapwatch name 'critic/score/meen'.*valid: .*critic/score/mean"
    ):
        NameMapper(str(bad))
    log = write(
        tmp_path,
        "run.jsonl",
        '{"step": 1, "rollout/rewards": 0.4}\n{"step": 2, "rollout/rewards": 0.3}\n',
    )
    assert replay_cli(log, control=None, rules=None, config=None, as_json=False, names=str(m)) == 0
    assert "rollout/rewards -> critic/score/mean" in capsys.readouterr().out


def test_command_worker_takes_new_formats_and_a_name_map() -> None:
    w = CommandWorker.model_validate(
        {"command": ["python", "t.py"], "format": "console_dicts", "names": "my_names.yaml"}
    )
    assert (w.format, w.names) == ("console_dicts", "my_names.yaml")
    with pytest.raises(ValueError, match="unknown names"):
        CommandWorker.model_validate({"command": ["t"], "names": "art"})


@pytest.mark.parametrize(
    "path", ["trainer_state.json", "console.txt", "tensorboard", "mlruns", "trackio"]
)
def test_replay_reads_each_trl_fixture(path: str, capsys: Any) -> None:
    assert replay_cli(TRL / path, control=None, rules=None, config=None, as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"stopped", "decisions"}


def test_keyvalue_worded_names_a_counter_step_and_dumps_between(tmp_path: Path) -> None:
    """A hand-written trainer's console: ``Epoch:[1/1](12/9751), Avg Response Len: 271.38``
    (names of several words, the step in the counter with the largest total), with
    samples printed between steps whose code holds ``x: 10`` pairs."""
    text = (
        "Epoch:[1/1](1/500), Reward: -2.30, KL_ref: -0.001, Avg Response Len: 271.38\n"
        "[DEBUG] step=1, sample[0]\n"
        "Here is the code:\n"
        "let p = { x: 10, y: 20 }\n"
        "Epoch:[1/1](2/500), Reward: -1.72, KL_ref: 0.0002, Avg Response Len: 297.00\n"
    )
    log = read_log(write(tmp_path, "train.log", text))
    assert log.format == "keyvalue"
    assert log.rows == [
        {"step": 1, "Reward": -2.30, "KL_ref": -0.001, "Avg Response Len": 271.38},
        {"step": 2, "Reward": -1.72, "KL_ref": 0.0002, "Avg Response Len": 297.00},
    ]


def test_notebook_with_two_training_tables_reads_the_widest(tmp_path: Path) -> None:
    """Unsloth's Qwen3 notebook runs a short SFT (Step | Training Loss) before GRPO."""
    sft = "<table><tr><th>Step</th><th>Training Loss</th></tr>" + "".join(
        f"<tr><td>{s}</td><td>1.{s}</td></tr>" for s in range(1, 9)
    )
    outs = [
        {"output_type": "display_data", "data": {"text/html": sft + "</table>"}},
        {"output_type": "display_data", "data": {"text/html": HTML_TABLE}},
    ]
    log = read_log(write(tmp_path, "q.ipynb", _notebook(outs)))
    assert [r["step"] for r in log.rows] == [1, 2, 3] and "reward" in log.rows[0]
    assert log.report is not None and "of its 2 tables" in log.report.notes[0]


CORPUS = ROOT / "bench" / "data" / "real"
locate = bench_module("real_corpus").locate  # the shipped copy, else the fetched one


def _corpus() -> list[tuple[str, str]]:
    import yaml

    manifest = CORPUS / "manifest.yaml"
    if not manifest.is_file():
        return []
    runs = yaml.safe_load(manifest.read_text(encoding="utf-8")).get("runs") or []
    return [(r["id"], f["local"]) for r in runs for f in r.get("files", [])]


@pytest.mark.parametrize(("run", "local"), _corpus() or [("none", "none")])
def test_every_corpus_file_reads_as_written(run: str, local: str) -> None:
    """bench/data/real/: every file of the corpus of public runs (shipped where its licence
    allows, else fetched by bench/real_corpus.py; skipped where not fetched) reads, whole
    and followed alike."""
    path = locate(local)
    if path is None:
        pytest.skip(
            "not shipped (its licence does not allow redistribution): "
            "python bench/real_corpus.py fetches it"
        )
    log = read_log(path)
    assert len(log.rows) >= 10, run
    f = LogFollower(path)
    followed = [s.step for s in f.poll() + f.close() if not s.addition]
    assert f.error is None, run
    assert len(followed) == len(log.rows), run


def test_the_cli_says_an_undetectable_file_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    bad = write(tmp_path, "notes.txt", "a plain note\nwith no figures in it\n")
    gapwatch = str(Path(sys.executable).with_name("gapwatch"))
    res = subprocess.run(
        [gapwatch, "replay", str(bad)], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "cannot tell the format" in line and "--format NAME" in line


_PIECES = [
    "step:", "step=", " - ", ":", "=", ", ", " | ", "{'", "'}", "}", "{", "'loss': ", "reward",
    "actor/entropy", "0.5", "-1e9", "nan", "inf", "np.float64(", "tensor(", ")", "(3/10)",
    " 50%|#5   | 5/10 [", "\x1b[31m", "\x1b[0m", "\r", "\t", "'", '"', "Step", "12", "x",
    "[XTuner]", "Rollout 3: ", "Rank0 Rollout 3 Step 0: ", " rollout mismatch metrics:",
    "- rewards/mean : ", "(TrainingWorker pid=7) ", "\n", "Train step 2 data statistics:",
]  # fmt: skip


def _fuzz_lines() -> Any:
    from hypothesis import strategies as st

    line = st.lists(st.sampled_from(_PIECES), max_size=12).map("".join)
    return st.lists(line, min_size=1, max_size=8).map(lambda ls: "\n".join(ls) + "\n")


def test_console_like_text_reads_or_fails_in_one_line(tmp_path: Path) -> None:
    """Text built from the pieces console logs are made of: every reader either reads it
    or fails with one LogError line, whole or followed."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_fuzz_lines())
    def check(text: str) -> None:
        p = tmp_path / "fuzz.log"
        p.write_text(text, encoding="utf-8")
        for fmt in ("auto", "console_dicts", "verl_console", "xtuner", "keyvalue", "csv"):
            try:
                rows = read_log(p, fmt).rows
                assert all(isinstance(r["step"], int) for r in rows)
            except LogError as exc:
                _one_line(exc)
        f = LogFollower(p)
        try:
            f.poll()
            f.close()
        except LogError as exc:
            _one_line(exc)
        if f.error is not None:
            _one_line(f.error)

    check()


def test_a_notebook_tables_spaced_slash_is_the_logged_name() -> None:
    """Unsloth's notebook tables draw ``completions/clipped_ratio`` as
    ``completions / clipped_ratio``; read as drawn, the TRL name map (and every length
    rule) missed it on 7 of the corpus's 12 degenerate runs."""
    from gapwatch.orchestrator.readers.ipynb import column_name, table_entries

    assert column_name("completions / clipped_ratio") == "completions/clipped_ratio"
    assert column_name(" Training Loss ") == "loss"
    rows = [["Step", "reward", "completions / clipped_ratio"], ["1", "0.5", "0.75"]]
    ((_, (entry,)),) = table_entries(rows)
    assert entry.metrics == {"reward": 0.5, "completions/clipped_ratio": 0.75}
    mapped = NameMapper()({"step": 1, **entry.metrics})
    assert mapped[N.CLIP_RATIO] == 0.75
