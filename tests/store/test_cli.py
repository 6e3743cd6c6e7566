"""The CLI over the store: errors are one ``error:`` line with exit code 2, never a traceback.

Runs the real console script (``.venv/bin/gapwatch``) in a subprocess.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gapwatch.store import open_store
from gapwatch.store.synth import fill

GAPWATCH = str(Path(sys.executable).with_name("gapwatch"))


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GAPWATCH_DEBUG", "GAPWATCH_DB_URL")}
    env["COLUMNS"] = "300"  # rich tables: no truncated cells
    return subprocess.run(
        [GAPWATCH, *args], capture_output=True, text=True, timeout=60, env=env, cwd=cwd
    )


def _assert_one_error_line(res: subprocess.CompletedProcess[str], needle: str) -> None:
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert needle in lines[0]
    assert "Traceback" not in res.stderr + res.stdout


def test_runs_on_a_corrupt_file_is_one_error_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"\x00garbage" * 512)
    _assert_one_error_line(_cli("runs", "--db", f"sqlite:///{junk}"), "is not a SQLite database")


def test_runs_on_a_foreign_sqlite_file_is_one_error_line(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    _assert_one_error_line(
        _cli("runs", "--db", f"sqlite:///{other}"), "tables that are not a gapwatch store"
    )


def test_runs_on_unreachable_postgresql_is_one_error_line() -> None:
    _assert_one_error_line(
        _cli("runs", "--db", "postgresql://root@127.0.0.1:1/test"),
        "cannot connect to postgresql+psycopg://root@127.0.0.1:1/test: is the server running?",
    )


@pytest.mark.slow
def test_db_upgrade_then_runs_then_export(store_url: str, tmp_path: Path) -> None:
    res = _cli("db", "upgrade", "--db", store_url, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "is at schema revision 0007" in res.stdout
    with open_store(store_url) as st:
        (rid, _) = fill(st, runs=2, steps=20, names=["critic/score/mean", "x/y"])
    res = _cli("runs", "--db", store_url)
    assert res.returncode == 0, res.stderr
    assert "synth" in res.stdout and "trial_00000" in res.stdout
    if store_url.startswith("postgresql"):
        return  # export is backend-independent (it reads history); once is enough
    out = tmp_path / "run.jsonl"
    res = _cli("export", str(rid), "--out", str(out), "--db", store_url)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 21))
    assert set(rows[0]) == {"step", "critic/score/mean", "x/y"}
    _assert_one_error_line(
        _cli("export", "999", "--out", str(out), "--db", store_url), "no run with id 999"
    )


def test_runs_on_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    _assert_one_error_line(_cli("runs", "--db", f"sqlite:///{path}"), "no gapwatch store at")
    assert not path.exists()
