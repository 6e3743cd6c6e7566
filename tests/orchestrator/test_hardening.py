"""Hardening probes, each one that failed before: secrets, hostile strings, non-finite
figures in JSON, limits on inputs, and the smaller faults (export, empty --db, PostgreSQL
errors, Ray's authentication, ``ui --host``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from gapwatch.correction import names as N
from gapwatch.orchestrator.cli import app
from gapwatch.orchestrator.rules import Decision
from gapwatch.orchestrator.sweep.config import parse_sweep_config
from gapwatch.orchestrator.sweep.driver import execute_sweep
from gapwatch.orchestrator.sweep.trainable import report_steps
from gapwatch.store import open_store

GAPWATCH = Path(sys.executable).with_name("gapwatch")
SECRET = "Pl4nted-S3cret"


def _cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def _one_error(code: int, err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[-1].startswith("error: "), err
    assert "Traceback" not in err
    return lines[-1]


# --- secrets ---------------------------------------------------------------------------


class _Res:
    def __init__(self, step: int) -> None:
        self.step, self.metrics, self.distributions = step, {N.SCORE_MEAN: 0.5}, {}


def two_steps(config: dict[str, Any]) -> None:
    """A trial with no model: two steps of one figure."""
    report_steps(config["spec"]["trial_key"], [_Res(1), _Res(2)])


@pytest.fixture
def pg_schema_url(pg_user: str) -> Iterator[str]:
    """A PostgreSQL URL with a planted password (trust auth ignores it) and a fresh schema."""
    schema = f"secret_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(host="127.0.0.1", user=pg_user, dbname="test", autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield (
            f"postgresql+psycopg://{pg_user}:{SECRET}@127.0.0.1:5432/test"
            f"?options=-csearch_path%3D{schema}"
        )
    finally:
        with psycopg.connect(host="127.0.0.1", user=pg_user, dbname="test", autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.slow
def test_a_planted_password_reaches_no_file_no_row_no_output(
    pg_schema_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cfg = {
        "name": "secret", "seeds": [0], "steps": 2, "store": pg_schema_url,
        "compression": [{"codec": "quant", "bits": 2}], "correction": ["none"],
    }  # fmt: skip
    sweep = parse_sweep_config(cfg)
    assert SECRET not in sweep.text  # the YAML's store: is not kept
    storage = tmp_path / "ray"
    out = execute_sweep(sweep, db_url=None, address=None, resume=False, storage=storage,
                        train_fn=two_steps)  # fmt: skip
    assert out.status == "completed"
    leaked = [p for p in storage.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == [], f"Tune's state holds the password: {leaked}"
    st = open_store(pg_schema_url)
    rows = [s.config_text for s in st.sweeps()]
    rows += [json.dumps(r.config) for r in st.runs()]
    rows += [json.dumps(d.evidence) for d in st.decisions()]
    assert not [r for r in rows if SECRET in r]
    assert SECRET not in st.url_display
    shown = capsys.readouterr()
    assert SECRET not in shown.out + shown.err
    code, so, se = _cli("runs", "--db", pg_schema_url)
    assert code == 0 and SECRET not in so + se and "***" in so


def test_an_unparseable_url_is_echoed_masked() -> None:
    for url in (f"postgresql://me:{SECRET}@host:port/db", f"postgres ql://me:{SECRET}@h/db"):
        code, _, err = _cli("runs", "--db", url)
        line = _one_error(code, err)
        assert SECRET not in line and "***" in line


# --- hostile strings on the terminal ---------------------------------------------------


def test_markup_and_escape_sequences_in_names_are_shown_not_obeyed(tmp_path: Path) -> None:
    log = tmp_path / "hostile.jsonl"
    rows = [{"step": s, N.SCORE_MEAN: -0.1, "[/x]": 1.0, "\x1b[31mred": 2.0, "[bold]k": "s"}
            for s in range(1, 6)]  # fmt: skip
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = subprocess.run([str(GAPWATCH), "replay", str(log)], capture_output=True, text=True,
                         check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "[bold]k" in res.stdout
    db = f"sqlite:///{tmp_path}/h.db"
    st = open_store(db)
    sid = st.ensure_sweep("[/x] \x1b[2J", "")
    st.ensure_run(sid, "[red]t\x1b]0;pwned\x07", role="control", pair_key="p", seed=0,
                  compression="[/c]", correction="none", config={})  # fmt: skip
    code, out, err = _cli("runs", "--db", db)
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "[/x] \\x1b[2J" in out and "[red]t\\x1b]0;pwned\\x07" in out and "[/c]" in out


def test_a_line_separator_inside_a_json_string_does_not_split_the_line(tmp_path: Path) -> None:
    from gapwatch.orchestrator.watch.logs import read_log

    log = tmp_path / "u2028.jsonl"
    log.write_text('{"step": 1, "note": "a\u2028b", "critic/score/mean": 0.5}\n', encoding="utf-8")
    rows = read_log(log).rows
    assert rows == [{"step": 1, N.SCORE_MEAN: 0.5}]


def test_json_output_never_holds_an_out_of_range_float(tmp_path: Path) -> None:
    d = Decision("warn", "gap_vs_control", 1, {"times": math.inf, "gap": 0.5, "x": -math.inf})
    assert d.evidence == {"times": "inf", "gap": 0.5, "x": "-inf"}
    json.dumps(d.to_dict(), allow_nan=False)
    log, ctl = tmp_path / "t.jsonl", tmp_path / "c.jsonl"
    log.write_text(json.dumps({"step": 1, N.PROBS_DIFF_MEAN: 0.5}) + "\n")
    ctl.write_text(json.dumps({"step": 1, N.PROBS_DIFF_MEAN: 5e-324}) + "\n")  # 0.5/5e-324 = inf
    res = subprocess.run([str(GAPWATCH), "replay", str(log), "--control", str(ctl), "--json"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["decisions"][0]["evidence"]["times"] == "inf"


# --- limits ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"steps": 1e12}, "steps: Input should be less than or equal to 1000000"),
        ({"group_size": 10**9}, "group_size: Input should be less than or equal to 1024"),
        ({"tasks_per_step": 10**6}, "tasks_per_step: Input should be less than or equal to 4096"),
        (
            {"seeds": list(range(2)), "correction": [{"name": "tis", "C": list(range(1, 2002))}]},
            "expands to 4,004 trials, over its limit of 1,000",
        ),  # fmt: skip
    ],
)
def test_unbounded_configs_are_refused_in_one_line(change: dict[str, Any], needle: str) -> None:
    from gapwatch.orchestrator.errors import GapwatchError

    cfg = {"name": "big", "seeds": [0], "compression": [{"codec": "quant", "bits": 2}],
           "correction": ["none"], **change}  # fmt: skip
    with pytest.raises(GapwatchError, match=needle.replace("(", r"\(")):
        parse_sweep_config(cfg)


def test_max_trials_can_be_raised_explicitly() -> None:
    cfg = {"name": "big", "seeds": [0, 1, 2], "compression": [{"codec": "quant", "bits": 2}],
           "correction": [{"name": "tis", "C": [1.5, 2.0, 3.0]}], "max_trials": 12}  # fmt: skip
    assert len(parse_sweep_config(cfg).trials) == 12


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"step": 1e300, "x": 1}\n', "step 1e+300 is out of range"),
        ('{"step": -3, "x": 1}\n', "step -3 is out of range"),
        ('{"step": 1, "x": "' + "a" * (1 << 20) + '"}\n', "longer than 1 MiB"),
    ],
)
def test_log_steps_and_lines_have_limits(tmp_path: Path, text: str, needle: str) -> None:
    log = tmp_path / "l.jsonl"
    log.write_text(text)
    res = subprocess.run([str(GAPWATCH), "replay", str(log)], capture_output=True, text=True,
                         check=False)  # fmt: skip
    line = _one_error(res.returncode, res.stderr)
    assert needle in line


# --- smaller faults ----------------------------------------------------------------------


def test_export_is_read_only_and_does_not_overwrite(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    code, _, err = _cli(
        "export", "1", "-o", str(tmp_path / "r.jsonl"), "--db", f"sqlite:///{missing}"
    )
    assert "no gapwatch store" in _one_error(code, err) and not missing.exists()
    db = f"sqlite:///{tmp_path}/s.db"
    st = open_store(db)
    rid = st.ensure_run(st.ensure_sweep("s", ""), "t", role="control", pair_key="p", seed=0,
                        compression="none", correction="none", config={})  # fmt: skip
    st.write_steps(rid, [(1, {N.SCORE_MEAN: 0.5}, {})])
    out = tmp_path / "r.jsonl"
    out.write_text("keep me")
    code, _, err = _cli("export", str(rid), "-o", str(out), "--db", db)
    assert "exists: pass --force" in _one_error(code, err) and out.read_text() == "keep me"
    code, so, err = _cli("export", str(rid), "-o", str(out), "--db", db, "--force")
    assert code == 0 and '"step": 1' in out.read_text(), err


def test_an_empty_file_is_not_turned_into_a_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    old = time.time() - 3600
    os.utime(empty, (old, old))  # an empty file of an hour ago (a fresh one may be a store
    code, _, err = _cli("db", "upgrade", "--db", f"sqlite:///{empty}")  # being created)
    assert "empty file (0 bytes)" in _one_error(code, err) and empty.stat().st_size == 0


def test_postgresql_role_and_port_mistakes_say_what_they_are(pg_user: str) -> None:
    code, _, err = _cli("runs", "--db", "postgresql://no_such_role_x@127.0.0.1:5432/test")
    assert "has no role 'no_such_role_x'" in _one_error(code, err)
    code, _, err = _cli("runs", "--db", "postgresql://root@127.0.0.1:abc/test")
    assert "has a port that is not a number" in _one_error(code, err)


def test_a_local_sweeps_ray_uses_token_authentication() -> None:
    import ray

    from gapwatch.orchestrator.sweep.driver import init_ray, token_auth_on

    if ray.is_initialized():
        ray.shutdown()
    assert init_ray(None)
    try:
        assert token_auth_on()
    finally:
        ray.shutdown()


def test_ui_on_every_interface_warns(tmp_path: Path) -> None:
    code, _, err = _cli("ui", "--host", "0.0.0.0", "--db", f"sqlite:///{tmp_path}/none.db")
    assert code == 2 and "warning: serving on 0.0.0.0" in err and "no login" in err
