"""SweepConfig: bad configs fail in one clear line through the real CLI; expansion pairs trials."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gapwatch.orchestrator.cli import app
from gapwatch.orchestrator.errors import GapwatchError
from gapwatch.orchestrator.sweep.config import load_sweep_config

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"

GOOD = {
    "name": "t",
    "env": "mul",
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
    assert "correction.1.name: unknown correction 'tiss'" in line
    assert "tis" in line.split("valid:")[1] and "icepop" in line


def test_unknown_codec_lists_valid(tmp_path: Path) -> None:
    line = _bad(tmp_path, compression=[{"codec": "quantize", "bits": 2}])
    assert "unknown codec 'quantize'" in line and "quant" in line.split("valid:")[1]


def test_unknown_environment_lists_valid(tmp_path: Path) -> None:
    line = _bad(tmp_path, env="chess")
    assert "unknown env 'chess'" in line and "mul" in line.split("valid:")[1]


@pytest.mark.parametrize(
    ("old", "value", "new"),
    [
        ("environment", "mul", "use env"),
        ("batch_size", 4, "use tasks_per_step"),
        ("budgets", {"tokens_per_interaction": 64}, "token_budget and max_interactions"),
    ],
)
def test_keys_of_the_old_vocabulary_say_their_new_names(
    tmp_path: Path, old: str, value: object, new: str
) -> None:
    line = _bad(tmp_path, **{old: value})
    assert f"'{old}' is not a sweep key any more" in line and new in line


def test_worker_names_a_command_now_and_says_where_run_settings_go(tmp_path: Path) -> None:
    line = _bad(tmp_path, worker={"lr": 1e-4})
    assert "worker: names a command to run now; lr are run settings" in line
    assert "top level or under run:" in line


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"max_failures": -1}, "max_failures"),
        ({"max_failures": "often"}, "max_failures"),
        ({"worker": {"command": ["x"], "idle": 0}}, "worker.idle"),
        ({"worker": {"command": ["x"], "idle": "long"}}, "worker.idle"),
    ],
)
def test_retries_and_hang_limit_are_validated(
    tmp_path: Path, change: dict[str, object], needle: str
) -> None:
    assert needle in _bad(tmp_path, **change)


def test_retry_and_hang_defaults(tmp_path: Path) -> None:
    sweep = load_sweep_config(_write(tmp_path, {**GOOD, "worker": {"command": ["x"]}}))
    assert sweep.config.max_failures == 2 and sweep.config.worker is not None
    assert sweep.config.worker.idle == 1800.0
    unbounded = {**GOOD, "max_failures": 0, "worker": {"command": ["x"], "idle": None}}
    sweep = load_sweep_config(_write(tmp_path, unbounded))
    assert sweep.config.max_failures == 0 and sweep.config.worker.idle is None  # type: ignore[union-attr]


def test_unknown_rule_lists_valid(tmp_path: Path) -> None:
    line = _bad(tmp_path, rules={"score_colapse": {"k": 2}})
    assert "score_colapse" in line and "score_collapse" in line


def test_unknown_rule_parameter(tmp_path: Path) -> None:
    line = _bad(tmp_path, rules={"score_collapse": {"kk": 2}})
    assert "unknown parameter 'kk'; valid: grace, action, k" in line


def test_unknown_key_rejected(tmp_path: Path) -> None:
    line = _bad(tmp_path, stepz=3)
    assert "unknown key 'stepz'; valid: name, seeds, run" in line


def test_wrong_type_and_missing_field(tmp_path: Path) -> None:
    assert "steps" in _bad(tmp_path, steps="many")
    assert "seeds: required field missing" in _bad(tmp_path, seeds=None)


def test_bad_run_key_validated_by_runconfig(tmp_path: Path) -> None:
    line = _bad(tmp_path, run={"learning_rate": 1e-4})
    assert "unknown key 'learning_rate'" in line and "lr" in line.split("valid:")[1]


def test_run_fields_at_the_top_level_or_under_run(tmp_path: Path) -> None:
    from gapwatch.orchestrator.sweep.config import parse_sweep_config

    top = parse_sweep_config({**GOOD, "lr": 1e-4})
    under = parse_sweep_config({**{k: v for k, v in GOOD.items() if k != "steps"},
                                "run": {"lr": 1e-4, "steps": 3}})  # fmt: skip
    assert top.config.run == under.config.run == {"env": "mul", "steps": 3, "lr": 1e-4}
    assert [t.run for t in top.trials] == [t.run for t in under.trials]
    with pytest.raises(GapwatchError, match="lr set both at the top level and under run"):
        parse_sweep_config({**GOOD, "lr": 1e-4, "run": {"lr": 1e-3}})
    with pytest.raises(GapwatchError, match="seed vary per trial"):
        parse_sweep_config({**GOOD, "run": {"seed": 3}})


def test_bad_threshold_name(tmp_path: Path) -> None:
    line = _bad(tmp_path, correction=[{"name": "tis", "Q": 2}])
    assert "correction 'tis': unknown key 'Q'; valid: C, veto" in line


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
    specs = load_sweep_config(_write(tmp_path, GOOD)).trials
    controls = [s for s in specs if s.role == "control"]
    treatments = [s for s in specs if s.role == "treatment"]
    # 2 seeds x (2 bit-widths x (none + tis at 3 C values)) treatments, one control per seed
    assert len(controls) == 2 and len(treatments) == 2 * 2 * 4
    # Controls come first so they are scheduled before any treatment
    assert [s.role for s in specs[:2]] == ["control", "control"]
    by_key = {s.trial_key: s for s in specs}
    assert len(by_key) == len(specs)
    for c in controls:
        assert c.ident.codec == "none" and c.ident.correction == "none" and c.control_key is None
        assert c.run["compression"] == "none" and c.run["correction"] == "none"
        assert c.trial_key == f"s{c.seed}-control" and c.run["name"] == c.trial_key
    for t in treatments:
        ctrl = by_key[t.control_key or ""]
        assert ctrl.role == "control" and ctrl.seed == t.seed and ctrl.pair_key == t.pair_key
        assert t.run["compression"] == "quant"
        assert t.run["compression_kwargs"] == t.ident.codec_kwargs
        assert t.run["correction_kwargs"] == t.ident.thresholds
        assert t.run["seed"] == t.seed and t.run["steps"] == 3
    cs = sorted(t.ident.thresholds["C"] for t in treatments if t.ident.correction == "tis")
    assert cs == sorted([1.5, 2, 4] * 4)
    labels = {(t.to_dict()["compression"], t.to_dict()["correction"]) for t in treatments}
    assert ("quant(bits=2)", "tis(C=1.5)") in labels and ("quant(bits=3)", "none") in labels
    assert "s0-quant_bits2-tis_C1.5" in by_key
    assert {t.pair_key for t in treatments} == {c.pair_key for c in controls}


def test_every_spec_is_a_valid_runconfig(tmp_path: Path) -> None:
    from gapwatch.workers import RunConfig

    for s in load_sweep_config(QUICKSTART).trials:
        rc = RunConfig.from_dict(dict(s.run))
        assert rc.seed == s.seed and rc.compression == s.ident.codec
        assert rc.correction == s.ident.correction and rc.to_dict() == s.run  # resolved


def test_quickstart_shape() -> None:
    from gapwatch.workers import config as worker_config

    sweep = load_sweep_config(QUICKSTART)
    cfg = sweep.config
    quick_codec = getattr(worker_config, "QUICK_CODEC", None)
    if quick_codec is not None:  # the workers' measured collapsing codec
        assert [(c.codec, c.params) for c in cfg.compression] == [quick_codec]
    corr = {c.name for c in cfg.correction}
    assert {"none", "tis", "icepop", "seq_mis"} <= corr
    assert len(cfg.seeds) == 2 and sweep.steps <= 30
    assert all(c.codec != "none" for c in cfg.compression)


def test_overrides_apply_before_validation(tmp_path: Path) -> None:
    sweep = load_sweep_config(
        _write(tmp_path, GOOD), ["steps=7", "run.lr=0.0001", "name=other", "stopping=false"]
    )
    cfg = sweep.config
    assert sweep.steps == 7 and cfg.run["lr"] == 0.0001 and cfg.name == "other"
    assert cfg.stopping is False
    assert yaml.safe_load(sweep.text)["run"]["steps"] == 7
    with pytest.raises(GapwatchError, match="stepz"):
        load_sweep_config(_write(tmp_path, GOOD), ["stepz=7"])


def test_gpu_resources_put_the_worker_on_cuda(tmp_path: Path) -> None:
    from gapwatch.orchestrator.sweep.config import parse_sweep_config

    sweep = parse_sweep_config({**GOOD, "resources": {"cpus": 1, "gpus": 0.5}})
    assert {s.run["device"] for s in sweep.trials} == {"cuda"}
    cpu = parse_sweep_config(GOOD)
    assert {s.run["device"] for s in cpu.trials} == {"cpu"}
    with pytest.raises(GapwatchError, match="resources.gpus"):
        parse_sweep_config({**GOOD, "resources": {"gpus": -1}})


@pytest.mark.parametrize(
    "path",
    [QUICKSTART, *sorted((ROOT / "examples").glob("sweep-*.yaml"))],
    ids=lambda p: p.name,
)
def test_every_example_sweep_validates(path: Path) -> None:
    sweep = load_sweep_config(path)
    assert sum(s.role == "control" for s in sweep.trials) == len(sweep.config.seeds)
