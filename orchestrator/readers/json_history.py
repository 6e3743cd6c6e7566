"""A tracker's history export as one JSON document, in either shape:

- a list of per-step objects (``[{"_step": 0, "loss": 0.3, ...}, ...]``, W&B's
  ``run.history()`` as JSON records), or an object holding such a list under
  ``history``/``rows``/``data``;
- an object of per-metric arrays with a step array (``{"step": [...], "loss": [...]}``,
  a DataFrame's ``to_json(orient="list")``); arrays shorter than the step array, and
  ``null`` cells, are absent figures.

The step is the first of ``_step``, ``step``, ``global_step``, ``Step`` present (a list
without any: the row index). Detected by content: one JSON document of either shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.readers.base import Entry, LogError, WholeReader, number, parse_step, register
from orchestrator.readers.trl_state import read_json, whole_json

STEP_KEYS = ("_step", "step", "global_step", "Step", "trainer/global_step")


def _records(doc: Any) -> list[Any] | None:
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        for key in ("history", "rows", "data"):
            if isinstance(doc.get(key), list) and all(isinstance(r, dict) for r in doc[key]):
                return list(doc[key])
    return None


def _columns(doc: Any) -> tuple[str, dict[str, list[Any]]] | None:
    if not isinstance(doc, dict):
        return None
    key = next((k for k in STEP_KEYS if isinstance(doc.get(k), list)), None)
    if key is None:
        return None
    return key, {k: v for k, v in doc.items() if isinstance(v, list)}


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
        for i, raw in enumerate(arrays[key]):
            if raw is None:
                continue
            step = parse_step(raw, f"{path} {key}[{i}]")
            row = {k: v[i] for k, v in arrays.items() if k != key and i < len(v)}
            out.append(_entry(row, step, key))
        return out
