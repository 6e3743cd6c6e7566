"""A real ``gapwatch run`` in a subprocess, for the tests that end one from outside
(SIGTERM, Ctrl-C, SIGKILL) and look at what its store says afterwards."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from gapwatch.store import open_store

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GAPWATCH = Path(sys.executable).with_name("gapwatch")


def start_run(tmp_path: Path, db: str, steps: int = 200) -> subprocess.Popen[str]:
    """``gapwatch run examples/run-dense.yaml`` into ``db`` (a SQLite file in ``tmp_path``),
    returned once it has stored its first step (it would train ``steps``)."""
    proc = subprocess.Popen(
        [str(GAPWATCH), "run", str(EXAMPLES / "run-dense.yaml"), "--db", db, "--set",
         f"steps={steps}", "--set", "tasks_per_step=2", "--set", "num_threads=1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    db_file = Path(db.removeprefix("sqlite:///"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the run has stored a step
        time.sleep(0.3)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        if db_file.exists():
            runs = open_store(db).runs()
            if runs and runs[0].last_step:
                return proc
    proc.kill()
    raise AssertionError("gapwatch run stored no step within 120 s")
