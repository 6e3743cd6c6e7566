"""Read a metrics log written elsewhere into a rules history (what ``gapwatch replay`` reads).

Formats, told apart by content (a ``.csv`` suffix forces CSV):

- JSON lines, one step per line: ``{"step": N, "<metric>": value, ...}``;
- verl's file logger (``trainer.logger=[..., "file"]``, which appends
  ``{"step": N, "data": {...}}`` per step; other top-level keys such as
  ``elapsed_seconds`` are ignored);
- CSV with columns ``step,name,value`` (a header row is optional).

A step may appear on many lines (its figures are merged; a figure given twice keeps the
later value) and lines may come in any order (rows are sorted by step). Non-numeric
values (verl's logger writes whatever it cannot serialise as a string) and nulls are
left out and their names reported; ``NaN`` is kept (the rules ignore it). A line that is
not valid raises :class:`LogError` naming the file and the line number.

Call :func:`read_log`.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LogError", "MetricsLog", "read_log"]

FLAT_EXAMPLE = '{"step": 1, "critic/score/mean": 0.5}'


class LogError(ValueError):
    """A metrics log that cannot be read, with where and how to fix it."""


@dataclass
class MetricsLog:
    """One run's metrics as read from a log."""

    path: Path
    """The file read."""
    format: str
    """``jsonl``, ``verl`` (file-logger form on every line) or ``csv``."""
    rows: list[dict[str, Any]]
    """The history: ``{"step": n, name: value, ...}`` per step, in step order."""
    ignored: set[str] = field(default_factory=set)
    """Names whose values were not numbers (left out)."""

    @property
    def names(self) -> set[str]:
        """Every metric name with at least one numeric value."""
        return {k for r in self.rows for k in r if k != "step"}


def _step(raw: Any, where: str) -> int:
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            raise LogError(f"{where}: step {raw!r} is not a number") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise LogError(f'{where}: needs an integer "step" (got {raw!r})')
    if not math.isfinite(raw) or raw != int(raw):
        raise LogError(f"{where}: step {raw!r} is not an integer")
    return int(raw)


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _read_jsonl(
    path: Path, lines: list[str]
) -> tuple[list[tuple[int, dict[str, Any]]], set[str], str]:
    out: list[tuple[int, dict[str, Any]]] = []
    ignored: set[str] = set()
    forms: set[str] = set()
    for i, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        where = f"{path} line {i}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise LogError(
                f"{where}: not valid JSON ({e.msg} at column {e.colno}); each line must be "
                f"one JSON object like {FLAT_EXAMPLE}"
            ) from None
        if not isinstance(obj, dict):
            raise LogError(f"{where}: expected a JSON object like {FLAT_EXAMPLE}, got {text[:40]}")
        if "step" not in obj:
            raise LogError(f'{where}: no "step" key; each line needs one, like {FLAT_EXAMPLE}')
        step = _step(obj["step"], where)
        if isinstance(obj.get("data"), dict):
            forms.add("verl")
            raw = obj["data"]
        else:
            forms.add("jsonl")
            raw = {k: v for k, v in obj.items() if k != "step"}
        metrics: dict[str, Any] = {}
        for k, v in raw.items():
            num = _number(v)
            if num is None:
                ignored.add(str(k))
            else:
                metrics[str(k)] = num
        out.append((step, metrics))
    return out, ignored, "verl" if forms == {"verl"} else "jsonl"


def _read_csv(path: Path, lines: list[str]) -> tuple[list[tuple[int, dict[str, Any]]], set[str]]:
    out: list[tuple[int, dict[str, Any]]] = []
    ignored: set[str] = set()
    for i, row in enumerate(csv.reader(lines), start=1):
        if not row or all(not c.strip() for c in row):
            continue
        cells = [c.strip() for c in row]
        if i == 1 and [c.lower() for c in cells] == ["step", "name", "value"]:
            continue
        where = f"{path} line {i}"
        if len(cells) != 3:
            raise LogError(
                f"{where}: expected 3 columns step,name,value, got {len(cells)} ({','.join(cells)[:60]})"
            )
        step = _step(cells[0], where)
        name, text = cells[1], cells[2]
        if not name:
            raise LogError(f"{where}: empty metric name")
        if not text:
            ignored.add(name)
            continue
        try:
            v = float(text)
        except ValueError:
            raise LogError(f"{where}: value {text!r} of {name!r} is not a number") from None
        out.append((step, {name: v}))
    return out, ignored


def read_log(path: Path) -> MetricsLog:
    """Read ``path`` (JSON lines, verl file-logger JSON lines, or CSV step,name,value)."""
    path = Path(path)
    if not path.exists():
        raise LogError(f"log file {path} does not exist")
    if not path.is_file():
        raise LogError(f"{path} is not a file; pass a .jsonl or .csv metrics log")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise LogError(f"{path} is not UTF-8 text; pass a .jsonl or .csv metrics log") from None
    head = next((ln.strip() for ln in lines if ln.strip()), "")
    if not head:
        raise LogError(f"{path} is empty; it needs one line per step")
    if path.suffix.lower() == ".csv" or not head.startswith("{"):
        if not path.suffix.lower() == ".csv" and head.count(",") != 2:
            raise LogError(
                f"cannot tell the format of {path}: expected JSON lines ({FLAT_EXAMPLE}) "
                "or CSV with columns step,name,value"
            )
        entries, ignored = _read_csv(path, lines)
        fmt = "csv"
    else:
        entries, ignored, fmt = _read_jsonl(path, lines)
    merged: dict[int, dict[str, Any]] = {}
    for step, metrics in entries:
        merged.setdefault(step, {"step": step}).update(metrics)
    if not merged:
        raise LogError(f"{path} holds no steps")
    rows = [merged[s] for s in sorted(merged)]
    return MetricsLog(
        path=path, format=fmt, rows=rows, ignored=ignored - {k for r in rows for k in r}
    )
