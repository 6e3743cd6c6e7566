"""``gapwatch run`` as a user types it, and the warm-start cache under concurrent builders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GAPWATCH = [sys.executable, "-m", "gapwatch.orchestrator.cli"]


@pytest.mark.slow
def test_gapwatch_run_end_to_end_and_one_line_errors(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    ok = subprocess.run(
        [
            *GAPWATCH,
            "run",
            "examples/run-dense.yaml",
            "--db",
            db,
            "--set",
            "steps=2",
            "--set",
            "tasks_per_step=2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    assert "completed: 2 steps" in ok.stdout
    bad = subprocess.run(
        [*GAPWATCH, "run", "examples/run-dense.yaml", "--db", db, "--set", "env=chess"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: unknown env 'chess'; valid: add_chain, mul, mul_chain"
    ]


BUILD = """
import sys
from gapwatch.workers import RunConfig
from gapwatch.workers.model import ensure_warm_start
cfg = RunConfig.preset("quick", warm_start_steps=3, warm_start_batch=4, warm_start_seed=int(sys.argv[1]),
                       warm_start_min_success=None, warm_start_min_copied=None)
print("path", ensure_warm_start(cfg))
"""


@pytest.mark.slow
def test_concurrent_trials_build_the_warm_start_once(tmp_path: Path) -> None:
    env = {**os.environ, "GAPWATCH_CACHE": str(tmp_path / "cache")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD, "7"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    joined = "\n".join(outs)
    assert joined.count("warm start built") == 1
    paths = {line for line in joined.splitlines() if line.startswith("path ")}
    assert len(paths) == 1
    built = Path(paths.pop().split(" ", 1)[1])
    assert (built / "config.json").is_file() and built.parent == tmp_path / "cache" / "warmstart"
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_second_env_runs_a_step_from_a_fresh_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gapwatch.correction import names as N
    from gapwatch.workers import train

    from .conftest import small

    monkeypatch.setenv("GAPWATCH_CACHE", str(tmp_path))
    (res,) = list(train(small(env="mul_chain", warm_start_steps=0, steps=1, max_interactions=4)))
    assert res.metrics[N.NUM_TURNS] >= 1 and N.SCORE_MEAN in res.metrics
