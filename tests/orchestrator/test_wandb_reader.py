"""The W&B reader (``orchestrator.readers.wandb``) on real runs that the wandb package
writes offline (``WANDB_MODE=offline``: no account, no network), each in a subprocess:
a run logged with known figures (one per module), a real TRL ``GRPOTrainer`` run with
``report_to="wandb"``, and a run followed while it logs. What was logged is what is read;
a file cut anywhere reads up to its last whole record and reads on when the rest comes;
bad input fails in one line."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gapwatch.orchestrator import readers
from gapwatch.orchestrator.readers import wandb as W
from gapwatch.orchestrator.watch.follow import LogFollower
from gapwatch.orchestrator.watch.logs import LogError, read_log
from gapwatch.orchestrator.watch.names_report import names_report
from gapwatch.orchestrator.watch.replay import replay_cli

pytestmark = pytest.mark.xdist_group("wandb")  # its session fixture: one worker

pytest.importorskip("wandb")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
"""Where make_trl_logs.py (its tiny_model) is."""
BIG = 70_000
"""Characters of a text figure that makes one history record span three 32 KiB blocks."""

LOGGER = r"""
import json, pathlib, sys, time
import wandb

out, mode, rows = pathlib.Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
run = wandb.init(project="gapwatch-test", config={"lr": 1e-3})
if len(sys.argv) > 4:  # a step metric for every key, as transformers and Lightning set one
    run.define_metric(sys.argv[4])
    run.define_metric("*", step_metric=sys.argv[4], step_sync=True)
for i, row in enumerate(rows):
    run.log(row)
    if mode == "live":  # the next step waits until the test has seen this one
        ack, t0 = out / f"ack{i}", time.monotonic()
        while not ack.exists() and time.monotonic() - t0 < 60:
            time.sleep(0.02)
run.finish()
"""

TRL_RUN = r"""
import json, pathlib, random, sys
sys.path.insert(0, sys.argv[2])
from make_trl_logs import tiny_model  # the TRL fixtures' 2-layer Llama and tokenizer
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

out = pathlib.Path(sys.argv[1])
model, tok = tiny_model()
rng = random.Random(0)
rows = [{"prompt": f"{rng.randint(1, 9)}*{rng.randint(1, 9)}="} for _ in range(32)]

def digits(completions, **_):
    return [sum(c.isdigit() for c in t) / max(len(t), 1) for t in completions]

args = GRPOConfig(
    output_dir=str(out / "trainer"), max_steps=3, per_device_train_batch_size=8,
    num_generations=4, max_completion_length=8, learning_rate=1e-3, beta=0.0,
    logging_steps=1, save_strategy="no", use_cpu=True, seed=0, report_to=["wandb"],
    run_name="grpo-wandb", dataloader_num_workers=0, disable_tqdm=True,
)
trainer = GRPOTrainer(
    model=model, reward_funcs=digits, args=args, processing_class=tok,
    train_dataset=Dataset.from_list(rows),
)
trainer.train()
(out / "log_history.json").write_text(json.dumps(trainer.state.log_history))
"""


def _env(wandb_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true",
        "WANDB_CONSOLE": "off", "WANDB_PROJECT": "gapwatch-test", "HF_HUB_OFFLINE": "1",
        "WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL": "0.05",  # default 15 s: a live test waits less
        "OMP_NUM_THREADS": "1",
    }  # fmt: skip


def _logger(
    out: Path, mode: str, rows: list[dict[str, Any]], *step_metric: str
) -> subprocess.Popen[str]:
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-c", LOGGER, str(out), mode, json.dumps(rows), *step_metric],
        env=_env(out), cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _logged() -> list[dict[str, Any]]:
    """What the module's run logs: TRL's and verl's names, a step figure, a NaN, a nested
    dict, text and a boolean (left out), and at step 3 a text of three blocks."""
    rows: list[dict[str, Any]] = []
    for i in range(6):
        row: dict[str, Any] = {
            "train/reward": 0.1 * i, "critic/score/mean": i / 7, "train/global_step": i + 1,
            "actor/entropy": math.nan if i == 4 else 1.0 - 0.1 * i,
            "nested": {"kl": i * 0.01}, "note": "text", "flag": True,
        }  # fmt: skip
        if i == 3:
            row["sample"] = "x" * BIG
        rows.append(row)
    return rows


def _expected() -> list[dict[str, float]]:
    return [
        {
            "step": i,
            "train/reward": r["train/reward"],
            "critic/score/mean": r["critic/score/mean"],
            "train/global_step": float(r["train/global_step"]),
            "actor/entropy": r["actor/entropy"],
            "nested.kl": r["nested"]["kl"],
        }  # fmt: skip
        for i, r in enumerate(_logged())
    ]


def _same(rows: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [r["step"] for r in rows] == [e["step"] for e in expected]
    for got, want in zip(rows, expected, strict=True):
        assert set(got) == set(want), (got.keys(), want.keys())
        for k, v in want.items():
            assert got[k] == v or (math.isnan(v) and math.isnan(got[k])), (got["step"], k)


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real offline run (its folder, ``wandb/offline-run-*``), logged with ``_logged``."""
    out = tmp_path_factory.mktemp("wb")
    proc = _logger(out, "fixed", _logged())
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output[-2000:]
    (run,) = (out / "wandb").glob("offline-run-*")
    return run


def _run_file(run: Path) -> Path:
    (f,) = run.glob("run-*.wandb")
    return f


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    assert text and "\n" not in text and "Traceback" not in text, repr(exc)
    return text


def _records(data: bytes) -> list[tuple[int, int, Any]]:
    """Each record of a run file: where it starts, where it ends, what it is."""
    import io

    from wandb.proto.wandb_internal_pb2 import Record  # type: ignore[attr-defined]

    scan = W._Scan(io.BytesIO(data), W.HEAD_LEN, len(data))
    return [(start, scan.offset, Record.FromString(payload)) for start, payload in scan]


def _history_starts(data: bytes) -> dict[int, int]:
    """The file offset of each history record, by its ``_step``."""
    return {
        rec.history.step.num: start
        for start, _, rec in _records(data)
        if rec.WhichOneof("record_type") == "history"
    }


# --- a real run, every way to point at it --------------------------------------------------


def test_a_run_reads_as_it_was_logged_from_its_file_folder_or_wandb_folder(run_dir: Path) -> None:
    file = _run_file(run_dir)
    for path in (file, run_dir, run_dir.parent):
        assert readers.detect(path).name == "wandb"
        log = read_log(path)
        assert log.format == "wandb"
        _same(log.rows, _expected())
        assert log.ignored == {"note", "flag", "sample"}  # W&B's _runtime, _timestamp: not named
    assert read_log(run_dir, "wandb").rows == read_log(file).rows
    notes = read_log(run_dir.parent).report.notes  # type: ignore[union-attr]
    assert notes == [f"read {run_dir.parent}'s run {run_dir.name}"]
    # told by its header too, under another name
    copy = run_dir.parent.parent / "copied.bin"
    shutil.copy(file, copy)
    assert readers.detect(copy).name == "wandb" and read_log(copy).rows == read_log(file).rows


def test_a_wandb_folder_of_several_runs_reads_the_newest(run_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "wandb"
    for name in ("offline-run-20260101_000000-old", "run-20260102_000000-new"):
        shutil.copytree(run_dir, folder / name)
    (folder / "latest-run").symlink_to(folder / "offline-run-20260101_000000-old")
    log = read_log(folder)
    _same(log.rows, _expected())
    assert log.report is not None
    assert log.report.notes == [
        f"2 W&B runs under {folder}: read the newest, run-20260102_000000-new"
    ]


def test_replay_and_names_read_a_run_folder(run_dir: Path, capsys: Any) -> None:
    assert replay_cli(run_dir, control=None, rules=None, config=None, as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"stopped", "decisions"}
    rep = names_report(run_dir)
    assert (rep["format"], rep["steps"], rep["first_step"], rep["last_step"]) == ("wandb", 6, 0, 5)


def _logged_run(out: Path, rows: list[dict[str, Any]], *step_metric: str) -> Path:
    proc = _logger(out, "fixed", rows, *step_metric)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output[-2000:]
    (run,) = (out / "wandb").glob("offline-run-*")
    return run


def test_the_runs_step_metric_is_the_step_when_it_names_a_step(tmp_path: Path) -> None:
    rows = [
        {"x": 1.0},  # before any trainer/global_step: W&B's step_sync gives it 0
        {"x": 2.0, "trainer/global_step": 10},
        {"profiling/t": 0.5},  # and this one 10: one step with the row before
        {"x": 3.0, "trainer/global_step": 20},
    ]
    log = read_log(_logged_run(tmp_path / "a", rows, "trainer/global_step"))
    assert log.rows == [
        {"step": 0, "x": 1.0},
        {"step": 10, "x": 2.0, "profiling/t": 0.5},
        {"step": 20, "x": 3.0},
    ]
    assert log.report is not None
    (note,) = log.report.notes
    assert note.endswith(
        "steps: the run's step metric 'trainer/global_step' (wandb.define_metric), not W&B's _step"
    )
    # epoch is no step's name (readers.base.STEP_ALIASES): W&B's _step, said; epoch a figure
    rows = [{"x": float(i), "epoch": i / 2} for i in range(3)]
    log = read_log(_logged_run(tmp_path / "b", rows, "epoch"))
    assert log.rows == [{"step": i, "x": float(i), "epoch": i / 2} for i in range(3)]
    assert log.report is not None
    (note,) = log.report.notes
    assert note.endswith("steps: W&B's _step (the run's step metric 'epoch' is not a step's name)")


@pytest.mark.slow
def test_a_real_trl_grpo_run_reports_to_wandb_and_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    res = subprocess.run(
        [sys.executable, "-c", TRL_RUN, str(tmp_path), str(FIXTURES)],
        env=_env(tmp_path), cwd=tmp_path,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    history = json.loads((tmp_path / "log_history.json").read_text())
    logged = {h["step"]: h for h in history if "loss" in h}
    assert sorted(logged) == [1, 2, 3]
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    log = read_log(run)
    rows = {r["step"]: r for r in log.rows}
    # transformers' define_metric("*", step_metric="train/global_step"): the trainer's steps
    assert set(rows) >= {1, 2, 3} and "train/global_step" not in log.names
    assert log.report is not None and any("'train/global_step'" in n for n in log.report.notes)
    for step, h in logged.items():  # every figure TRL logged, under W&B's train/ prefix
        for k, v in h.items():
            if k != "step" and isinstance(v, int | float):
                assert rows[step][f"train/{k}"] == pytest.approx(v, rel=1e-12), (step, k)
    rep = names_report(run)
    assert rep["format"] == "wandb" and rep["steps"] >= 3
    assert rep["mapped"]["train/reward"] == "critic/score/mean"


# --- a run being written -------------------------------------------------------------------


def _wait_for(what: Any, timeout: float = 30.0) -> Any:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if got := what():
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_following_a_run_while_it_logs(tmp_path: Path) -> None:
    rows = [{"train/reward": 0.25 * i, "critic/score/mean": float(i)} for i in range(4)]
    proc = _logger(tmp_path, "live", rows)
    try:
        file = _wait_for(lambda: next((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"), None))
        f = LogFollower(file.parent)
        for i in range(4):  # each step is seen before the next is logged
            (got,) = _wait_for(f.poll)
            assert (got.step, got.metrics) == (i, rows[i]) and f.fmt == "wandb"
            (tmp_path / f"ack{i}").touch()
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, output[-2000:]
    finally:
        proc.kill()
    assert f.poll() == [] and f.close() == []
    assert f.report.steps == 4 and not f.report.notes  # the run ended on a whole record
    # the same file, named or told by its name
    for fmt in ("wandb", "auto"):
        again = LogFollower(file, fmt)
        assert [s.step for s in again.poll()] == [0, 1, 2, 3] and again.fmt == "wandb"


def test_a_file_cut_anywhere_reads_its_whole_records_then_the_rest(
    run_dir: Path, tmp_path: Path
) -> None:
    data = _run_file(run_dir).read_bytes()
    assert len(data) > 2 * W.BLOCK  # the step-3 record spans blocks
    full = read_log(run_dir).rows
    target = tmp_path / "run" / "run-x.wandb"
    target.parent.mkdir()
    spans = [(start, end) for start, end, _ in _records(data)]
    cuts = sorted({*range(0, len(data), 331), *range(W.BLOCK - 16, W.BLOCK + 16), len(data) - 1})
    for cut in cuts:
        reader = W.Wandb()
        target.write_bytes(data[:cut])
        before = reader.entries(target)
        assert [e.step for e in before] == [r["step"] for r in full[: len(before)]], cut
        pending = [n for n in reader.notes if "partly written" in n]
        with target.open("ab") as fh:  # the writer goes on: same file, appended
            fh.write(data[cut:])
        after = reader.entries(target)
        assert [e.step for e in after] == [r["step"] for r in full], cut
        assert not [n for n in reader.notes if "partly written" in n], cut
        inside = any(start < cut < end for start, end in spans)
        assert bool(pending) == inside, cut  # said exactly when a record is cut


def test_following_a_file_cut_inside_a_record_of_three_blocks(
    run_dir: Path, tmp_path: Path
) -> None:
    data = _run_file(run_dir).read_bytes()
    starts = _history_starts(data)
    cut = starts[3] + W.BLOCK + 100  # inside the step-3 record, past its first block
    assert starts[4] > cut
    run = tmp_path / "offline-run-20260101_000000-cut"
    run.mkdir()
    file = run / "run-cut.wandb"
    file.write_bytes(data[:cut])
    f = LogFollower(run)
    assert [s.step for s in f.poll()] == [0, 1, 2]
    assert any("partly written record" in n for n in f.report.notes)
    assert f.poll() == []
    with file.open("ab") as fh:
        fh.write(data[cut:])
    got = f.poll()
    assert [s.step for s in got] == [3, 4, 5] and not any(s.addition for s in got)
    assert got[0].metrics["train/reward"] == pytest.approx(0.3)
    assert not any("partly written" in n for n in f.report.notes)


# --- bad input -------------------------------------------------------------------------------


def test_a_corrupt_chunk_is_said_and_skipped_to_the_next_block(
    run_dir: Path, tmp_path: Path
) -> None:
    data = bytearray(_run_file(run_dir).read_bytes())
    starts = _history_starts(bytes(data))
    at = starts[1]
    data[at + W.HEAD_LEN + 5] ^= 0xFF  # a payload byte of step 1's record
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(bytes(data))
    log = read_log(bad)
    # the rest of its block is skipped (records that start there), as W&B's reader does
    next_block = at - at % W.BLOCK + W.BLOCK
    kept = [s for s, start in starts.items() if start < at or start >= next_block]
    assert 0 in kept and 5 in kept and 1 not in kept
    _same(log.rows, [e for e in _expected() if e["step"] in kept])
    assert log.report is not None
    (note,) = log.report.notes
    assert f"skipped 1 corrupt part(s) and read on (first: a chunk at byte {at} fails" in note


def test_bad_input_fails_in_one_line(run_dir: Path, tmp_path: Path) -> None:
    data = _run_file(run_dir).read_bytes()
    cases = {
        "text.wandb": (b"step,reward\n1,0.5\n", "is not a W&B run file"),
        "newer.wandb": (
            data[:6] + b"\x09" + data[7:],
            "format version 9; this reader reads version 0",
        ),
        "empty.wandb": (b"", "holds no steps \\(wandb format\\)"),
        "header.wandb": (data[: W.HEAD_LEN], "holds no steps"),
        "no-history.wandb": (data[: _history_starts(data)[0]], "holds no steps"),
    }
    for name, (content, match) in cases.items():
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(LogError, match=match) as info:
            read_log(p)
        _one_line(info.value)
    (tmp_path / "empty-run").mkdir()
    with pytest.raises(LogError, match="no W&B run in it") as info:
        read_log(tmp_path / "empty-run", "wandb")
    _one_line(info.value)
    with pytest.raises(LogError, match="nor a TensorBoard log folder.* W&B run folder") as info:
        read_log(tmp_path / "empty-run")
    _one_line(info.value)
    gapwatch = str(Path(sys.executable).with_name("gapwatch"))
    res = subprocess.run(
        [gapwatch, "replay", str(tmp_path / "text.wandb")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "is not a W&B run file" in line


def test_missing_wandb_names_the_install(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def no_wandb(name: str, *a: Any, **k: Any) -> Any:
        if name == "wandb" or name.startswith("wandb."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(LogError, match="needs the wandb package: pip install wandb") as info:
        read_log(run_dir)
    _one_line(info.value)
