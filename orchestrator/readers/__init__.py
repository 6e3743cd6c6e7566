"""Readers of the logs trainers write: one registry, one module per format.

``replay``, ``watch`` and command sweeps all read through here: :func:`detect` picks the
reader of a path (by its name, its layout when it is a folder, and the first bytes of its
content), ``get(name)`` gives one by ``--format NAME``. Formats, in detection order:

========================  ==========================================================
``wandb``                 W&B run files (``run-<id>.wandb``), a run folder or ``wandb/``
``tensorboard``           ``events.out.tfevents.*`` files, or a folder of them
``mlflow``                an MLflow file-store run (``mlruns/<exp>/<run>/metrics/``)
``trackio``               trackio's SQLite store (``<project>.db``), or its folder
``trl_state``             ``trainer_state.json`` (its ``log_history``)
``ipynb``                 a notebook's printed logs and training table
``json_history``          a tracker's JSON history (rows, or per-metric arrays)
``jsonl``                 JSON lines, verl's file logger included
``csv``                   ``step,name,value`` rows, or a wide export (a column per metric)
``verl_console``          verl's ``step:N - name:value - ...`` console lines
``xtuner``                XTuner's RL console log (``Rollout N`` blocks, mismatch JSON)
``console_dicts``         transformers/TRL console output (printed ``{'loss': ...}``)
``keyvalue``              ``name: value`` / ``name=value`` pairs (hand-written trainers)
========================  ==========================================================

Each reader says how it detects its format in its module docstring. Register a new
one with ``@register("name")`` on a :class:`LineReader` or :class:`WholeReader`
subclass, and add it to :data:`DETECT_ORDER`.
"""

from __future__ import annotations

from pathlib import Path

from gapwatch.orchestrator.readers import (  # noqa: F401 - each registers its reader
    console_dicts,
    csv,
    ipynb,
    json_history,
    jsonl,
    keyvalue,
    mlflow,
    tensorboard,
    trackio,
    trl_state,
    verl_console,
    wandb,
    xtuner,
)
from gapwatch.orchestrator.readers.base import (
    ALIASES,
    MAX_LINE,
    MAX_STEP,
    Busy,
    Entry,
    LineReader,
    LogError,
    Reader,
    ReadOptions,
    WholeReader,
    format_names,
    get,
    names,
    parse_step,
    reader_class,
    register,
)

__all__ = [
    "ALIASES",
    "DETECT_ORDER",
    "HEAD",
    "MAX_LINE",
    "MAX_STEP",
    "Busy",
    "Entry",
    "LineReader",
    "LogError",
    "ReadOptions",
    "Reader",
    "WholeReader",
    "detect",
    "format_names",
    "get",
    "names",
    "parse_step",
    "reader_class",
    "read_head",
    "register",
]

DETECT_ORDER = (
    "wandb", "tensorboard", "mlflow", "trackio", "trl_state", "ipynb", "json_history", "jsonl",
    "csv", "verl_console", "xtuner", "console_dicts", "keyvalue",
)  # fmt: skip
"""The order formats are tried in: folders and binary files first, whole JSON documents
before JSON lines, structured text before console output, the tolerant reader last."""
HEAD = 256 << 10
"""Bytes of a file's start that detection looks at (256 KiB: console logs open with
pages of loading messages before the first figures)."""
_BY_NAME = {".jsonl": "jsonl", ".csv": "csv", ".ipynb": "ipynb", ".db": "trackio"}


def read_head(path: Path, size: int = HEAD) -> str:
    """The first ``size`` bytes of ``path`` as text (LogError: not UTF-8 text)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(size)
    except OSError as exc:
        raise LogError(f"{path} cannot be read ({exc.strerror})") from None
    if raw.startswith(trackio.SQLITE_MAGIC.encode()):
        return trackio.SQLITE_MAGIC
    if raw.startswith(wandb.MAGIC):  # binary: its header's text part stands for it
        return wandb.IDENT.decode()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(raw) - 4:  # not only a character cut at the end of the head
            raise LogError(f"{path} is not UTF-8 text; pass a metrics log") from None
        return raw[: exc.start].decode("utf-8")


def detect(path: Path | str, options: ReadOptions | None = None, head: str | None = None) -> Reader:
    """The reader of ``path``; LogError (one line) naming the formats tried when none fits."""
    path = Path(path)
    if not path.exists():
        raise LogError(f"log file {path} does not exist")
    options = options or ReadOptions()
    if path.is_dir():
        for name in ("wandb", "tensorboard", "mlflow", "trackio"):
            if reader_class(name).sniff(path, ""):
                return get(name, options)
        raise LogError(
            f"{path} is not a file, nor a TensorBoard log folder, an MLflow run, a trackio "
            "store or a W&B run folder; pass a metrics log (or --format NAME)"
        )
    if path.name.startswith("events.out.tfevents."):
        return get("tensorboard", options)
    if path.suffix == wandb.SUFFIX:
        return get("wandb", options)
    if path.name == "trainer_state.json":
        return get("trl_state", options)
    if head is None:
        head = read_head(path)
    if not head.strip():
        raise LogError(f"{path} is empty; it needs one line per step")
    by_name = _BY_NAME.get(path.suffix.lower())
    if by_name is not None and by_name != "trackio":
        return get(by_name, options)
    if (options.step_pattern or options.step_field) and not head.lstrip().startswith(("{", "[")):
        return get("keyvalue", options)
    for name in DETECT_ORDER:
        if reader_class(name).sniff(path, head):
            return get(name, options)
    raise LogError(
        f"cannot tell the format of {path}: tried {', '.join(DETECT_ORDER)}; "
        "give --format NAME to force one"
    )
