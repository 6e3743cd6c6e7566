"""gapwatch's on-disk cache: where built models live and how one is built exactly once.

``cache_root()`` is ``$GAPWATCH_CACHE`` (default ``~/.cache/gapwatch``). ``saved_once(path,
build)`` builds a model directory at most once across processes: the first caller takes a
file lock beside ``path``, builds and saves into a temporary folder that is renamed into
place; concurrent callers (trials of a sweep) wait on the lock, then load what it saved.
Warm starts (``workers.model``) and converted pretrained models (``workers.pretrained``)
both go through it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

INFO_FILE: Final = "gapwatch_warmstart.json"
"""Beside a built model's weights: what it is (config key, gate figures, source, hashes)."""


def cache_root() -> Path:
    """``$GAPWATCH_CACHE`` or ``~/.cache/gapwatch``."""
    return Path(os.environ.get("GAPWATCH_CACHE") or Path.home() / ".cache" / "gapwatch")


def saved_once(path: Path, build: Callable[[], tuple[Any, Any, dict[str, Any] | None]]) -> Path:
    """``path`` holding ``build()``'s (model, tokenizer, info), built and saved once:
    concurrent trials wait on a file lock for the first builder, then load what it saved.
    ``info`` (a dict or None) is written beside the weights as ``INFO_FILE``."""
    if (path / "config.json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (path / "config.json").is_file():
                model, tok, info = build()
                atomic_save(model, tok, path, info)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def atomic_save(model: Any, tok: Any, path: Path, info: dict[str, Any] | None = None) -> None:
    """``save_pretrained`` of ``model`` and ``tok`` into ``path``, via a temporary folder
    renamed into place (a reader never sees half a directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if info is not None:
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
