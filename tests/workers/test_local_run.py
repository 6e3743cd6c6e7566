"""``gapwatch run``: config loading, overrides, the store rows it writes, one-line failures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gapwatch.correction import names as N
from gapwatch.orchestrator.sweep.local_run import load_run_config, run_local
from gapwatch.store import identity

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_examples_load_and_pair() -> None:
    dense = identity.of_config(load_run_config(EXAMPLES / "run-dense.yaml", []).to_dict())
    comp = identity.of_config(load_run_config(EXAMPLES / "run-compressed.yaml", []).to_dict())
    assert dense.run_role == "control" and comp.run_role == "treatment"
    assert dense.pair_key == comp.pair_key
    assert (comp.compression_label, comp.correction_label) == ("topk(keep=0.05)", "none")


def test_overrides_are_yaml_typed_and_dotted() -> None:
    cfg = load_run_config(
        EXAMPLES / "run-compressed.yaml",
        ["steps=5", "lr=2e-4", "compression_kwargs.keep=0.1", "max_grad_norm=null"],
    )
    assert cfg.steps == 5 and cfg.lr == 2e-4 and cfg.max_grad_norm is None
    assert cfg.compression == "topk" and cfg.compression_kwargs == {"keep": 0.1}
    cfg = load_run_config(
        EXAMPLES / "run-dense.yaml", ["compression=quant", "compression_kwargs={bits: 3}"]
    )
    assert cfg.compression == "quant" and cfg.compression_kwargs == {"bits": 3}


@pytest.mark.parametrize(
    ("overrides", "pattern"),
    [
        (["stepz=3"], "unknown key 'stepz'; valid: name, env"),
        (["steps"], "--set expects key=value"),
        (["env=chess"], "unknown env 'chess'; valid: add_chain, mul, mul_chain"),
        (["steps.x=1"], "is not a mapping"),
    ],
)
def test_bad_overrides_fail_in_one_line(overrides: list[str], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern) as info:
        load_run_config(EXAMPLES / "run-dense.yaml", overrides)
    assert "\n" not in str(info.value)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not found"):
        load_run_config(tmp_path / "nope.yaml", [])
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [1,\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_run_config(bad, [])


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_run_lands_in_the_store(tmp_path: Path) -> None:
    from gapwatch.store import open_store

    url = _sqlite(tmp_path)
    over = ["steps=2", "tasks_per_step=4", "num_threads=1"]
    run_id = run_local(EXAMPLES / "run-compressed.yaml", db_url=url, overrides=over)
    st = open_store(url)
    row = st.run(run_id)
    assert row.status == "completed" and row.role == "treatment"
    # the same labels and keys a sweep gives this run (store.identity)
    assert (row.compression, row.correction) == ("topk(keep=0.05)", "none")
    assert row.trial_id.startswith("s0-topk_keep0.05-none@") and row.pair_key.startswith(
        "mul/tiny/s0@"
    )
    hist = st.history(run_id)
    assert [h["step"] for h in hist] == [1, 2]
    assert hist[0][N.PROBS_DIFF_MEAN] > 0.1
    assert st.distribution_steps(run_id, N.dist("text")) == [1, 2]
    # the same config again is the same run (get-or-create); steps are overwritten, not doubled
    assert run_local(EXAMPLES / "run-compressed.yaml", db_url=url, overrides=over) == run_id
    assert [h["step"] for h in st.history(run_id)] == [1, 2]


def test_a_failing_run_is_marked_failed_with_one_line(tmp_path: Path) -> None:
    from gapwatch.store import open_store

    url = _sqlite(tmp_path)
    # device cuda on a machine without one: the run row exists, then training fails
    if os.environ.get("CUDA_VISIBLE_DEVICES") not in (None, ""):
        pytest.skip("this machine may have CUDA")
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.raises(ValueError, match="CUDA is not available"):
        run_local(EXAMPLES / "run-dense.yaml", db_url=url, overrides=["device=cuda", "steps=1"])
    st = open_store(url)
    (row,) = st.runs()
    assert row.status == "failed" and row.error is not None and "CUDA" in row.error


def test_compressed_example_uses_the_preset_codec() -> None:
    from gapwatch.workers.config import QUICK_CODEC

    comp = load_run_config(EXAMPLES / "run-compressed.yaml", [])
    assert (comp.compression, comp.compression_kwargs) == QUICK_CODEC


def test_run_applies_the_rules_with_the_stored_control(tmp_path: Path) -> None:
    """`gapwatch run` applies the sweep's RuleSet in-process: the treatment reads its
    stored control (so gap_vs_control warns on the real step-1 gaps) and a stop ends the
    run with the decision stored. The stop is forced by a score floor of 2.0 (no run can
    score that), so the test does not depend on when the tiny model collapses."""
    import yaml

    from gapwatch.store import open_store

    url = _sqlite(tmp_path)
    over = ["steps=3", "tasks_per_step=4", "num_threads=1"]
    control_id = run_local(EXAMPLES / "run-dense.yaml", db_url=url, overrides=over)
    cfg = yaml.safe_load((EXAMPLES / "run-compressed.yaml").read_text())
    cfg["rules"] = {"score_collapse": {"floor": 2.0, "k": 2, "grace": 0}}
    path = tmp_path / "compressed-with-rules.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_id = run_local(path, db_url=url, overrides=over)

    st = open_store(url)
    assert st.run(control_id).status == "completed"
    row = st.run(run_id)
    assert (row.status, row.stop_rule, row.stop_step) == ("stopped", "score_collapse", 2)
    assert [h["step"] for h in st.history(run_id)] == [1, 2]
    decisions = {(d.rule, d.action, d.step) for d in st.decisions(run_id=run_id)}
    assert ("score_collapse", "stop", 2) in decisions
    assert ("gap_vs_control", "warn", 1) in decisions


def test_unknown_rule_in_run_config_fails_before_running(tmp_path: Path) -> None:
    import yaml

    cfg = yaml.safe_load((EXAMPLES / "run-dense.yaml").read_text())
    cfg["rules"] = {"no_such_rule": {}}
    path = tmp_path / "bad-rules.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match="no_such_rule"):
        run_local(path, db_url=_sqlite(tmp_path), overrides=["steps=1"])
    assert not (tmp_path / "runs.db").exists()


# --- --log (verl's file logger) and --no-store --------------------------------------------


def test_the_log_is_verls_file_logger_line_by_line(tmp_path: Path) -> None:
    """verl/utils/tracking.py's FileLogger: ``open(path, "wb", buffering=0)``, then per step
    ``orjson.dumps({"step": step, "data": data}, option=OPT_SERIALIZE_NUMPY) + b"\\n"``."""
    import numpy as np

    from gapwatch.orchestrator.sweep.local_run import VerlFileLogger
    from gapwatch.orchestrator.watch.follow import LogFollower

    path = tmp_path / "out" / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text("an earlier run's log\n")  # replaced, as verl's "wb" does
    log = VerlFileLogger(path)
    follower = LogFollower(path)
    log.log({N.SCORE_MEAN: 0.5, N.ess("text"): np.float32(0.25), "x": float("nan")}, 1)
    assert path.read_bytes().startswith(b'{"step":1,"data":{"critic/score/mean":0.5,')
    assert path.read_bytes().endswith(b',"x":null}}\n')  # NaN as orjson writes it
    (step,) = follower.poll()  # seen before the file is closed: nothing buffered
    assert (step.step, step.metrics[N.SCORE_MEAN]) == (1, 0.5)
    log.log({N.SCORE_MEAN: -0.1}, 2)
    assert [s.step for s in follower.poll()] == [2]
    log.close()
    follower.close()
    with pytest.raises(ValueError, match="--log .*cannot write it") as info:
        VerlFileLogger(path / "under-a-file.jsonl")
    assert "\n" not in str(info.value)


def test_a_stored_run_writes_the_same_steps_to_its_log(tmp_path: Path) -> None:
    import json

    from gapwatch.store import open_store

    url, log = _sqlite(tmp_path), tmp_path / "m.jsonl"
    over = ["steps=2", "tasks_per_step=2", "num_threads=1"]
    run_id = run_local(EXAMPLES / "run-dense.yaml", db_url=url, overrides=over, log=log)
    assert run_id is not None
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    stored = open_store(url).history(run_id)
    assert [x["step"] for x in lines] == [h["step"] for h in stored] == [1, 2]
    for line, row in zip(lines, stored, strict=True):
        assert set(line) == {"step", "data"}
        assert line["data"][N.SCORE_MEAN] == pytest.approx(row[N.SCORE_MEAN])


def test_no_store_trains_into_the_log_only(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    gapwatch = Path(sys.executable).with_name("gapwatch")
    env = {k: v for k, v in os.environ.items() if k != "GAPWATCH_DB_URL"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(gapwatch), "run", str(EXAMPLES / "run-compressed.yaml"), *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    res = run("--no-store", "--log", "out/m.jsonl", "--set", "steps=2",
              "--set", "tasks_per_step=2", "--set", "num_threads=1")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "run completed: 2 steps to out/m.jsonl" in res.stdout
    lines = [json.loads(x) for x in (tmp_path / "out/m.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2] and N.PROBS_DIFF_MEAN in lines[0]["data"]
    assert list(tmp_path.glob("*.db")) == []  # no store was made
    for args, needle in [
        (("--no-store",), "--no-store with no --log writes nothing"),
        (("--no-store", "--log", "m.jsonl", "--db", "sqlite:///x.db"), "--db names a store"),
    ]:
        res = run(*args)
        lines_err = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines_err) == 1 and needle in lines_err[0], res.stderr


@pytest.mark.slow
def test_a_run_ended_by_sigterm_is_failed_with_the_reason_not_left_running(
    tmp_path: Path,
) -> None:
    import signal

    from gapwatch.store import open_store
    from tests.workers.local_runs import start_run

    db = f"sqlite:///{tmp_path}/t.db"
    proc = start_run(tmp_path, db)
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == "terminated (SIGTERM); what was recorded is kept"
    (run,) = open_store(db).runs()
    assert run.status == "failed" and "SIGTERM" in (run.error or ""), run
    assert run.last_step is not None and run.last_step >= 1  # its steps kept


@pytest.mark.slow
def test_ctrl_c_stops_a_run_with_the_reason_in_one_line(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C): the run is ``stopped`` (stop rule ``interrupted``, at its newest
    step), the reason stored; one line says so, no traceback, exit 130."""
    import signal

    from gapwatch.orchestrator.signals import INTERRUPTED
    from gapwatch.store import open_store
    from tests.workers.local_runs import start_run

    db = f"sqlite:///{tmp_path}/t.db"
    proc = start_run(tmp_path, db)
    try:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    (run,) = open_store(db).runs()
    assert (run.status, run.stop_rule) == ("stopped", INTERRUPTED), run
    assert run.last_step is not None and run.stop_step == run.last_step >= 1  # its steps kept
    assert run.error == f"interrupted (Ctrl-C, SIGINT) after step {run.last_step}"
    (line,) = [ln for ln in err.splitlines() if ln.strip()]  # one line, all it says
    assert line.startswith(f"interrupted: run {run.id} stopped after ") and db in line, err
    assert run.config["placement"]["pid"] == proc.pid  # the process that trained it
