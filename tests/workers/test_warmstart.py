"""The quick and long presets' shipped warm starts, their hash check, and the quality gate
of a warm start built at run time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gapwatch.workers import RunConfig
from gapwatch.workers import model as M
from gapwatch.workers.probe import Quality

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("preset", "shipped", "key"),
    [("quick", M.SHIPPED, M.SHIPPED_KEY), ("long", M.SHIPPED_LONG, M.SHIPPED_LONG_KEY)],
)
def test_a_preset_starts_from_its_shipped_weights_whatever_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preset: str, shipped: Path, key: str
) -> None:
    monkeypatch.setenv("GAPWATCH_CACHE", str(tmp_path / "empty"))
    cfg = RunConfig.preset(preset, seed=3, num_threads=1)
    assert M.ensure_warm_start(cfg) == shipped
    assert not (tmp_path / "empty").exists()  # nothing built, nothing cached
    info = json.loads((shipped / M.INFO_FILE).read_text())
    assert info["key"] == M.warm_start_key(cfg) == key
    # the figures it was accepted on pass the preset's own gate
    assert info["gate"]["success"] >= cfg.warm_start_min_success
    assert info["gate"]["copied"] >= cfg.warm_start_min_copied
    # a config whose warm start differs is built, not served the shipped one
    other = RunConfig.preset(preset, warm_start_seed=1)
    assert M.warm_start_key(other) != info["key"]


def test_a_corrupted_or_missing_shipped_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "quick"
    shutil.copytree(M.SHIPPED, bad)
    weights = bad / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(M.WarmStartError, match=r"corrupted: .*model\.safetensors has sha256"):
        M.verified_shipped(bad)
    weights.unlink()
    with pytest.raises(M.WarmStartError, match="incomplete: .*model.safetensors is missing"):
        M.verified_shipped(bad)
    (bad / M.INFO_FILE).unlink()
    with pytest.raises(M.WarmStartError, match="shipped warm start is missing"):
        M.verified_shipped(bad)
    assert M.verified_shipped(M.SHIPPED) == M.SHIPPED


@pytest.mark.slow
def test_a_warm_start_below_its_gate_trains_on_then_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GAPWATCH_CACHE", str(tmp_path))
    cfg = RunConfig.preset("quick", warm_start_steps=4, warm_start_batch=4, num_threads=1)
    with pytest.raises(M.WarmStartError) as err:
        M.ensure_warm_start(cfg)
    msg = str(err.value)
    assert "\n" not in msg and "failed its quality gate after 8 steps" in msg
    assert "success 0%" in msg
    assert capsys.readouterr().out.count("training on, round") == M.GATE_ROUNDS
    assert not list((tmp_path / "warmstart").glob("[0-9a-f]*[0-9a-f]"))  # nothing cached


@pytest.mark.slow
def test_a_gated_build_stores_its_figures_beside_the_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GAPWATCH_CACHE", str(tmp_path))
    # floors of 0 pass whatever the policy does: the gate runs and its figures are kept
    cfg = RunConfig.preset("quick", warm_start_steps=4, warm_start_batch=4, num_threads=1,
                           warm_start_min_success=0.0, warm_start_min_copied=0.0)  # fmt: skip
    path = M.ensure_warm_start(cfg)
    info = json.loads((path / M.INFO_FILE).read_text())
    assert info["key"] == M.warm_start_key(cfg) and info["extra_rounds"] == 0
    assert set(info["gate"]) == set(Quality.__dataclass_fields__)
    assert info["gate"]["episodes"] == M.GATE_EPISODES


def test_gapwatch_run_says_a_corrupted_shipped_start_in_one_line(tmp_path: Path) -> None:
    """Through the CLI, as a user meets it: a copy of the package whose weights changed."""
    code = (
        "import sys; from pathlib import Path; from gapwatch.workers import model as M; "
        f"M.SHIPPED = Path({str(tmp_path / 'quick')!r}); "
        "from gapwatch.orchestrator.cli import main; sys.argv = sys.argv[:1] + sys.argv[1:]; main()"
    )
    shutil.copytree(M.SHIPPED, tmp_path / "quick")
    (tmp_path / "quick" / "tokenizer.json").write_text("{}")
    out = subprocess.run(
        [sys.executable, "-c", code, "run", "examples/run-dense.yaml", "--no-rules",
         "--db", f"sqlite:///{tmp_path / 'x.db'}", "--set", "steps=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "GAPWATCH_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "shipped warm start is corrupted" in lines[0], out.stderr
