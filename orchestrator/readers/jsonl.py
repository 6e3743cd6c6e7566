"""JSON lines, one step per line: ``{"step": N, "<metric>": value, ...}``, and verl's file
logger (``trainer.logger=[..., "file"]``), which appends ``{"step": N, "data": {...}}``
per step (other top-level keys such as ``elapsed_seconds`` are ignored).

Detected by a ``.jsonl`` suffix, or a first line that opens a JSON object (``{"``). Numbers are kept
(``NaN`` too); strings, nulls, lists and dicts are left out and named. A line that is not
one JSON object with a ``step`` is an error naming the line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson

from gapwatch.orchestrator.readers.base import (
    STEP_ALIASES,
    Entry,
    LineReader,
    LogError,
    parse_step,
    register,
)

_OBJECT = re.compile(r'\s*\{\s*["}]')
"""A JSON object's start (a printed Python dict opens with ``{'`` instead)."""
FLAT_EXAMPLE = '{"step": 1, "critic/score/mean": 0.5}'
RECORD_KEYS = ("type", "event", "kind", "record", "_type")
"""A line without a step that names its kind of record under one of these (``{"type":
"config", ...}``, ``{"event": "start", ...}``) is a header or an event, skipped and
counted, not an error."""


def loads(text: str | bytes) -> Any:
    """orjson (several times faster: replay reads every line); Python's json for what
    orjson refuses but Python writes, the ``NaN`` / ``Infinity`` tokens."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def step_key(obj: dict[str, Any]) -> str | None:
    """The key holding a JSON row's step: ``step``, else another name a step goes by
    (``readers.base.STEP_ALIASES``: ``_step``, ``global_step``, ``iteration``, ...)."""
    return next((k for k in STEP_ALIASES if k in obj), None)


def json_entry(obj: Any, text: str, where: str, key: str | None = "step") -> Entry:
    """The entry of one decoded JSON object (flat, or verl's ``{"step", "data"}``), its
    step under ``key``."""
    if not isinstance(obj, dict):
        raise LogError(f"{where}: expected a JSON object like {FLAT_EXAMPLE}, got {text[:40]}")
    if key is None or key not in obj:
        raise LogError(f'{where}: no "step" key; each line needs one, like {FLAT_EXAMPLE}')
    step = parse_step(obj[key], where)
    verl = isinstance(obj.get("data"), dict)
    raw = obj["data"] if verl else obj
    # json gives floats, ints, bools, None, str, lists, dicts: keep the numbers (not bools)
    metrics = {k: v for k, v in raw.items() if type(v) is float and k != key}
    if len(metrics) < len(raw) - (0 if verl else 1):
        for k, v in raw.items():
            if type(v) is int and k != key:
                metrics[k] = float(v)
        ignored = tuple(k for k in raw if k not in metrics and (verl or k != key))
    else:
        ignored = ()
    return Entry(step, metrics, ignored, "verl" if verl else "jsonl")


@register("jsonl")
class JsonLines(LineReader):
    describe = 'JSON lines {"step": N, ...}, verl\'s file logger {"step": N, "data": {...}}'

    def __init__(self, *a: object, **k: object) -> None:
        super().__init__(*a, **k)  # type: ignore[arg-type]
        self.key: str | None = None
        """The step key the rows use (told from the first row with one)."""
        self.records = 0
        """Header or event lines skipped (no step, a record kind named)."""

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        return path.suffix.lower() == ".jsonl" or _OBJECT.match(head) is not None

    def line(self, text: str, where: str) -> Entry | None:
        text = text.strip()
        if not text:
            return None
        try:
            obj = loads(text)
        except json.JSONDecodeError as e:
            raise LogError(
                f"{where}: not valid JSON ({e.msg} at column {e.colno}); each line must be "
                f"one JSON object like {FLAT_EXAMPLE}"
            ) from None
        if isinstance(obj, dict):
            key = self.key if self.key in obj else step_key(obj)
            if key is None and any(isinstance(obj.get(k), str) for k in RECORD_KEYS):
                self._skipped(obj, where)
                return None
            if key is not None and key != self.key:
                self.key = key
                if key != "step":
                    self.notes.append(f"steps: the {key!r} field")
            return json_entry(obj, text, where, key)
        return json_entry(obj, text, where)

    def _skipped(self, obj: dict[str, Any], where: str) -> None:
        self.records += 1
        kind = next(obj[k] for k in RECORD_KEYS if isinstance(obj.get(k), str))
        note = f"skipped {self.records} header or event line(s) without a step (first: {where}, {kind!r})"
        first = next((i for i, n in enumerate(self.notes) if n.startswith("skipped ")), None)
        if first is None:
            self.notes.append(note)
        else:  # one note, its count kept current
            self.notes[first] = re.sub(
                r"^skipped \d+", f"skipped {self.records}", self.notes[first]
            )
