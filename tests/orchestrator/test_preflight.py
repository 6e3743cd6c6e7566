"""The preflight: a sweep whose dense policy cannot score launches nothing, in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gapwatch.orchestrator.errors import GapwatchError
from gapwatch.orchestrator.sweep.preflight import distinct_runs, preflight, probe_run
from gapwatch.workers import RunConfig
from gapwatch.workers.probe import Quality

ROOT = Path(__file__).resolve().parents[2]


def q(**kw: float) -> Quality:
    base = {"success": 0.0, "tool_calls": 0.0, "copied": 0.0, "parsed": 1.0, "score": 0.0}
    return Quality(episodes=64, **{**base, **kw})


def run(**over: Any) -> dict[str, Any]:
    return RunConfig.preset("quick", **over).to_dict()


def test_trials_that_share_a_dense_policy_share_one_probe() -> None:
    runs = [run(seed=0), run(seed=1, compression="topk"), run(seed=0, env="mul_chain")]
    assert [r["env"] for r in distinct_runs(runs)] == ["mul", "mul_chain"]


@pytest.mark.parametrize(
    ("quality", "why"),
    [
        (q(parsed=0.0), "no episode's actions parsed"),
        (q(), "the tool was never called"),
        (q(tool_calls=0.3), "the tool was called but its result never copied into the answer"),
        (q(tool_calls=0.3, copied=0.5), "no answer was right"),
    ],
)
def test_a_policy_that_cannot_score_stops_the_sweep_saying_why(quality: Quality, why: str) -> None:
    said: list[str] = []
    with pytest.raises(GapwatchError) as err:
        preflight([run()], said.append, probe=lambda r: quality)
    msg = str(err.value)
    assert msg.startswith("preflight: the dense policy (tiny on mul) cannot score: " + why)
    assert "nothing launched" in msg and "--no-preflight" in msg and "\n" not in msg
    assert said == []


def test_a_policy_that_scores_passes_with_its_figures_said_once() -> None:
    said: list[str] = []
    preflight([run(seed=0), run(seed=1)], said.append, probe=lambda r: q(success=0.2))
    assert len(said) == 1 and said[0].startswith("preflight: dense policy tiny on mul: success 20%")


@pytest.mark.slow
def test_the_shipped_quick_policy_scores() -> None:
    quality = probe_run(run(num_threads=1))
    assert quality.success > 0 and quality.episodes == 64


@pytest.mark.slow
def test_gapwatch_sweep_with_an_untrained_policy_launches_nothing(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    out = subprocess.run(
        [sys.executable, "-m", "gapwatch.orchestrator.cli", "sweep", "examples/quickstart.yaml",
         "--db", f"sqlite:///{db}", "--set", "warm_start_steps=0", "--set", "num_threads=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: preflight: the dense policy (tiny on mul) cannot score: ")
    # nothing launched: no sweep in the store, no Ray started
    from gapwatch.store import open_store

    assert not db.exists() or open_store(f"sqlite:///{db}").sweeps() == []
    assert "ray" not in out.stdout.lower()


def test_a_device_this_machine_lacks_is_skipped_aloud() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    said: list[str] = []
    preflight([run(device="cuda")], said.append)  # the real probe: no error, one line
    assert said == [
        "preflight: skipped for tiny on mul: device 'cuda' is not usable on this machine "
        "(its trials run where it is)"
    ]
