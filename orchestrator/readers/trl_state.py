"""TRL's (transformers') ``trainer_state.json``: its ``log_history`` list, one entry per
logging event with the trainer's ``step``; values that are not numbers are left out.

Detected by the name ``trainer_state.json``, or a JSON object with a ``log_history``
list. Read whole (the trainer rewrites the file at each checkpoint save); entries without
a ``step`` (none in practice) are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gapwatch.orchestrator.readers.base import (
    MAX_WHOLE,
    Busy,
    Entry,
    LogError,
    WholeReader,
    register,
)
from gapwatch.orchestrator.readers.jsonl import json_entry, loads


def read_json(path: Path, what: str) -> Any:
    """A whole JSON file; :class:`Busy` if it does not parse (caught mid-rewrite)."""
    try:
        if path.stat().st_size > MAX_WHOLE:
            raise LogError(f"{path} is larger than {MAX_WHOLE >> 20} MiB; not {what}")
        return loads(path.read_bytes())
    except OSError as exc:
        raise LogError(f"{path} cannot be read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, LogError):
            raise
        raise Busy(str(exc)) from None


def whole_json(head: str, path: Path) -> Any:
    """The file as JSON when it is one JSON document (None otherwise): for sniffing."""
    if not head.lstrip().startswith(("{", "[")) or path.is_dir():
        return None
    try:
        if path.stat().st_size > MAX_WHOLE:
            return None
        return loads(path.read_bytes())
    except (OSError, ValueError):
        return None


@register("trl_state")
class TrlState(WholeReader):
    describe = "TRL / transformers trainer_state.json (its log_history)"

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        if path.name == "trainer_state.json":
            return True
        doc = whole_json(head, path)
        return isinstance(doc, dict) and isinstance(doc.get("log_history"), list)

    def entries(self, path: Path) -> list[Entry]:
        doc = read_json(path, "TRL's trainer_state.json")
        history = doc.get("log_history") if isinstance(doc, dict) else None
        if not isinstance(history, list):
            raise LogError(f"{path}: no log_history list; is it TRL's trainer_state.json?")
        out = []
        for i, item in enumerate(history):
            if isinstance(item, dict) and "step" in item:
                e = json_entry(item, "", f"{path} log_history[{i}]")
                out.append(Entry(e.step, e.metrics, e.ignored, "trl_state"))
        return out
