"""SweepConfig: bad configs fail in one clear line through the real CLI; expansion pairs trials."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.config import expand, load_sweep_config
from orchestrator.errors import GapwatchError

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"

GOOD = {
    "name": "t",
    "environment": "mul",
    "seeds": [0, 1],
    "steps": 3,
    "compression": [{"codec": "quant", "bits": [2, 3]}],
    "correction": ["none", {"name": "tis", "C": [1.5, 2, 4]}],
}


def _write(tmp_path: Path, doc: object, text: str | None = None) -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(text if text is not None else yaml.safe_dump(doc))
    return p


def _cli_error(args: list[str]) -> str:
    """Run the real CLI app in-process; assert exit 2 and one ``error:`` line."""
    res = CliRunner().invoke(app, args)
    out = res.output.strip()
    assert res.exit_code == 2, out
    assert "Traceback" not in out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out
    assert lines[0].startswith("error: ")
    return lines[0]


def _bad(tmp_path: Path, **change: object) -> str:
    doc = {**GOOD, **change}
    doc = {k: v for k, v in doc.items() if v is not None}
    return _cli_error(["sweep", str(_write(tmp_path, doc)), "--db", f"sqlite:///{tmp_path}/x.db"])


def test_unknown_correction_lists_valid(tmp_path: Path) -> None:
    line = _bad(tmp_path, correction=["none", "tiss"])
    assert "correction[1].name" in line and "'tiss'" in line
    assert "tis" in line.split("valid:")[1] and "icepop" in line


def test_unknown_codec_lists_valid(tmp_path: Path) -> None:
    line = _bad(tmp_path, compression=[{"codec": "quantize", "bits": 2}])
    assert "unknown codec 'quantize'" in line and "quant" in line.split("valid:")[1]


def test_unknown_environment_lists_valid(tmp_path: Path) -> None:
    line = _bad(tmp_path, environment="chess")
    assert "unknown environment 'chess'" in line and "mul" in line.split("valid:")[1]


def test_unknown_rule_lists_valid(tmp_path: Path) -> None:
    line = _bad(tmp_path, rules={"score_colapse": {"k": 2}})
    assert "score_colapse" in line and "score_collapse" in line


def test_unknown_rule_parameter(tmp_path: Path) -> None:
    line = _bad(tmp_path, rules={"score_collapse": {"kk": 2}})
    assert "kk" in line


def test_unknown_key_rejected(tmp_path: Path) -> None:
    line = _bad(tmp_path, stepz=3)
    assert "stepz" in line and "unknown key" in line


def test_wrong_type_and_missing_field(tmp_path: Path) -> None:
    assert "steps" in _bad(tmp_path, steps="many")
    assert "seeds: required field missing" in _bad(tmp_path, seeds=None)


def test_bad_worker_key_validated_by_runconfig(tmp_path: Path) -> None:
    line = _bad(tmp_path, worker={"learning_rate": 1e-4})
    assert "learning_rate" in line and "lr" in line


def test_bad_threshold_name(tmp_path: Path) -> None:
    line = _bad(tmp_path, correction=[{"name": "tis", "Q": 2}])
    assert "tis" in line and "Q" in line


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    p = _write(tmp_path, None, "name: t\nseeds: [0, 1\nsteps: 3\n")
    line = _cli_error(["sweep", str(p)])
    assert "line 3" in line or "line 2" in line


def test_missing_file(tmp_path: Path) -> None:
    line = _cli_error(["sweep", str(tmp_path / "nope.yaml")])
    assert "does not exist" in line


def test_bad_override(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD)
    line = _cli_error(["sweep", str(p), "--set", "steps"])
    assert "key=value" in line


def test_console_script_one_line(tmp_path: Path) -> None:
    """The installed ``gapwatch`` entry point itself: exit 2, one line, no traceback."""
    p = _write(tmp_path, {**GOOD, "correction": ["bogus"]})
    exe = Path(sys.executable).with_name("gapwatch")
    res = subprocess.run(
        [str(exe), "sweep", str(p)], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().startswith("error: ") and len(res.stderr.strip().splitlines()) == 1


# --- expansion and pairing ---------------------------------------------------------------


def test_expansion_pairs_every_treatment_with_its_seeds_control(tmp_path: Path) -> None:
    cfg, _ = load_sweep_config(_write(tmp_path, GOOD))
    specs = expand(cfg)
    controls = [s for s in specs if s.role == "control"]
    treatments = [s for s in specs if s.role == "treatment"]
    # 2 seeds x (2 bit-widths x (none + tis at 3 C values)) treatments, one control per seed
    assert len(controls) == 2 and len(treatments) == 2 * 2 * 4
    # Controls come first so they are scheduled before any treatment
    assert [s.role for s in specs[:2]] == ["control", "control"]
    by_key = {s.trial_key: s for s in specs}
    assert len(by_key) == len(specs)
    for c in controls:
        assert c.codec == "none" and c.correction == "none" and c.control_key is None
        assert c.run["compression"] == "none" and c.run["correction"] == "none"
    for t in treatments:
        ctrl = by_key[t.control_key or ""]
        assert ctrl.role == "control" and ctrl.seed == t.seed and ctrl.pair_key == t.pair_key
        assert t.run["compression"] == "quant" and t.run["compression_kwargs"] == t.codec_kwargs
        assert t.run["correction_kwargs"] == t.thresholds
        assert t.run["seed"] == t.seed and t.run["steps"] == 3
    cs = sorted(t.thresholds["C"] for t in treatments if t.correction == "tis")
    assert cs == sorted([1.5, 2, 4] * 4)
    assert {t.pair_key for t in treatments} == {c.pair_key for c in controls}


def test_every_spec_is_a_valid_runconfig(tmp_path: Path) -> None:
    from workers import RunConfig

    cfg, _ = load_sweep_config(QUICKSTART)
    for s in expand(cfg):
        rc = RunConfig.from_dict(dict(s.run))
        assert rc.seed == s.seed and rc.compression == s.codec and rc.correction == s.correction


def test_quickstart_shape() -> None:
    import workers.config

    cfg, _ = load_sweep_config(QUICKSTART)
    quick_codec = getattr(workers.config, "QUICK_CODEC", None)
    if quick_codec is not None:  # the workers' measured collapsing codec
        assert [(c.codec, c.params) for c in cfg.compression] == [quick_codec]
    corr = {c.name for c in cfg.correction}
    assert {"none", "tis", "icepop", "seq_mis"} <= corr
    assert len(cfg.seeds) == 2 and cfg.steps <= 30
    assert all(c.codec != "none" for c in cfg.compression)


def test_overrides_apply_before_validation(tmp_path: Path) -> None:
    cfg, text = load_sweep_config(
        _write(tmp_path, GOOD), ["steps=7", "worker.lr=0.0001", "name=other", "stopping=false"]
    )
    assert cfg.steps == 7 and cfg.worker == {"lr": 0.0001} and cfg.name == "other"
    assert cfg.stopping is False
    assert yaml.safe_load(text)["steps"] == 7
    with pytest.raises(GapwatchError, match="stepz"):
        load_sweep_config(_write(tmp_path, GOOD), ["stepz=7"])


def test_gpu_resources_put_the_worker_on_cuda(tmp_path: Path) -> None:
    from orchestrator.config import parse_sweep_config

    cfg = parse_sweep_config({**GOOD, "resources": {"cpus": 1, "gpus": 0.5}})
    assert {s.run["device"] for s in expand(cfg)} == {"cuda"}
    cpu = parse_sweep_config(GOOD)
    assert all("device" not in s.run for s in expand(cpu))
    with pytest.raises(GapwatchError, match="resources.gpus"):
        parse_sweep_config({**GOOD, "resources": {"gpus": -1}})


@pytest.mark.parametrize(
    "path",
    [QUICKSTART, *sorted((ROOT / "examples").glob("sweep-*.yaml"))],
    ids=lambda p: p.name,
)
def test_every_example_sweep_validates(path: Path) -> None:
    cfg, _ = load_sweep_config(path)
    specs = expand(cfg)
    assert sum(s.role == "control" for s in specs) == len(cfg.seeds)
