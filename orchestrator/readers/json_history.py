"""A tracker's history export as one JSON document, in either shape:

- a list of per-step objects (``[{"_step": 0, "loss": 0.3, ...}, ...]``, W&B's
  ``run.history()`` as JSON records), or an object holding such a list under
  ``history``/``rows``/``data``;
- an object of per-metric arrays with a step array (``{"step": [...], "loss": [...]}``,
  a DataFrame's ``to_json(orient="list")``); arrays shorter than the step array, and
  ``null`` cells, are absent figures;
- an object of per-metric arrays with no step array, all of one length, whose position is
  the step (``{"rewards_avg": [...], "kl_avg": [...]}``, a hand-written trainer's dump):
  steps 0, 1, ... as for records without a step field, and said in the report.

The step is the first of ``_step``, ``step``, ``global_step``, ``Step`` present (a list
without any: the row index). Detected by content: one JSON document of either shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gapwatch.orchestrator.readers.base import (
    Entry,
    LogError,
    WholeReader,
    number,
    parse_step,
    register,
)
from gapwatch.orchestrator.readers.trl_state import read_json, whole_json

STEP_KEYS = ("_step", "step", "global_step", "Step", "trainer/global_step")


def _records(doc: Any) -> list[Any] | None:
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        for key in ("history", "rows", "data"):
            if isinstance(doc.get(key), list) and all(isinstance(r, dict) for r in doc[key]):
                return list(doc[key])
    return None


def _columns(doc: Any) -> tuple[str | None, dict[str, list[Any]]] | None:
    """The step array's key (None: positions are the steps) and every array."""
    if not isinstance(doc, dict):
        return None
    arrays = {k: v for k, v in doc.items() if isinstance(v, list)}
    key = next((k for k in STEP_KEYS if isinstance(doc.get(k), list)), None)
    if key is not None:
        return key, arrays
    return (None, arrays) if _positional(doc, arrays) else None


def _positional(doc: dict[str, Any], arrays: dict[str, list[Any]]) -> bool:
    """Per-metric arrays of numbers alone, at least two, of one length of at least two (a
    config or another document that merely holds a list is not a history)."""
    if len(arrays) < 2 or len(arrays) != len(doc):
        return False
    lengths = {len(v) for v in arrays.values()}
    if len(lengths) != 1 or lengths.pop() < 2:
        return False
    return all(
        v is None or (isinstance(v, int | float) and not isinstance(v, bool))
        for arr in arrays.values()
        for v in arr
    )


def shape(doc: Any) -> str | None:
    """``records``, ``columns`` or None: the shape of a history document."""
    recs = _records(doc)
    if recs is not None and recs and all(isinstance(r, dict) for r in recs[:100]):
        return "records"
    if _columns(doc) is not None:
        return "columns"
    return None


def _entry(row: dict[str, Any], step: int, skip: str | None) -> Entry:
    metrics: dict[str, float] = {}
    ignored: list[str] = []
    for k, v in row.items():
        if k == skip or k in STEP_KEYS or v is None:
            continue
        x = number(v) if not isinstance(v, str) else number(v)
        if x is None:
            ignored.append(k)
        else:
            metrics[k] = x
    return Entry(step, metrics, tuple(ignored), "json_history")


@register("json_history")
class JsonHistory(WholeReader):
    describe = "a tracker's history export as JSON: a list of per-step rows, or per-metric arrays"

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return shape(whole_json(head, path)) is not None

    def entries(self, path: Path) -> list[Entry]:
        doc = read_json(path, "a JSON history")
        kind = shape(doc)
        out: list[Entry] = []
        if kind == "records":
            recs = _records(doc) or []
            key = next((k for k in STEP_KEYS if any(k in r for r in recs[:100])), None)
            if key is None:
                self.notes.append("steps: the row index (the rows have no step field)")
            for i, row in enumerate(recs):
                if not isinstance(row, dict):
                    raise LogError(f"{path} row {i}: expected an object, got {str(row)[:40]}")
                if key is None:
                    step = i
                elif row.get(key) is None:
                    continue  # a row without a step (a summary)
                else:
                    step = parse_step(row[key], f"{path} row {i}")
                out.append(_entry(row, step, key))
            return out
        cols = _columns(doc)
        if cols is None:
            raise LogError(
                f"{path}: not a history: expected a list of per-step objects or per-metric "
                f"arrays with a step array ({', '.join(STEP_KEYS)})"
            )
        key, arrays = cols
        if key is None:
            self.notes.append(
                "steps: the array position (0, 1, ...; the arrays have no step array)"
            )
        n = len(arrays[key]) if key is not None else len(next(iter(arrays.values())))
        for i in range(n):
            raw = arrays[key][i] if key is not None else i
            if raw is None:
                continue
            step = parse_step(raw, f"{path} {key}[{i}]")
            row = {k: v[i] for k, v in arrays.items() if k != key and i < len(v)}
            out.append(_entry(row, step, key))
        return out
