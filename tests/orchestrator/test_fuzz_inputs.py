"""Fuzzing the inputs a user hands gapwatch: any log text and any sweep config either read
or fail with one clear line (LogError / GapwatchError), never another exception."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gapwatch.orchestrator.errors import GapwatchError
from gapwatch.orchestrator.sweep.config import load_sweep_config
from gapwatch.orchestrator.watch.follow import LogFollower
from gapwatch.orchestrator.watch.logs import LogError, read_log

SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
)  # fmt: skip
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
KEYS = ["step", "data", "critic/score/mean", "response_length/clip_ratio", "reward", "x"]


def _one_line(exc: Exception) -> None:
    assert str(exc).strip() and "\n" not in str(exc).strip(), repr(exc)


@SETTINGS
@given(st.lists(st.dictionaries(st.sampled_from(KEYS), values, max_size=5), max_size=6))
def test_json_lines_of_any_shape(tmp_path: Path, rows: list[dict[str, Any]]) -> None:
    log = tmp_path / "fuzz.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        got = read_log(log)
        assert all(isinstance(r["step"], int) for r in got.rows)
    except LogError as exc:
        _one_line(exc)


@SETTINGS
@given(st.binary(max_size=300), st.sampled_from([".jsonl", ".csv", ".log"]))
def test_any_bytes_as_a_log(tmp_path: Path, data: bytes, suffix: str) -> None:
    log = tmp_path / f"fuzz{suffix}"
    log.write_bytes(data)
    try:
        read_log(log)
    except LogError as exc:
        _one_line(exc)
    f = LogFollower(log)  # the live reader: the same rule, and an error stops the reading
    try:
        f.poll()
        f.close()
    except LogError as exc:
        _one_line(exc)
    if f.error is not None:
        _one_line(f.error)


@SETTINGS
@given(st.text(max_size=300))
def test_any_text_as_csv(tmp_path: Path, text: str) -> None:
    log = tmp_path / "fuzz.csv"
    log.write_text(text, encoding="utf-8")
    try:
        read_log(log)
    except LogError as exc:
        _one_line(exc)


SWEEP_KEYS = ["name", "seeds", "steps", "env", "compression", "correction", "rules", "run",
              "resources", "worker", "lr", "stopping", "max_trials", "environment"]  # fmt: skip


@SETTINGS
@given(st.dictionaries(st.sampled_from(SWEEP_KEYS), values, max_size=7))
def test_any_sweep_config(tmp_path: Path, doc: dict[str, Any]) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        load_sweep_config(path)
    except GapwatchError as exc:
        _one_line(exc)


@SETTINGS
@given(st.text(max_size=200))
def test_any_yaml_text_as_a_sweep_config(tmp_path: Path, text: str) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_sweep_config(path)
    except GapwatchError as exc:
        _one_line(exc)
