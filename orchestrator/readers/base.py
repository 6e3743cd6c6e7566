"""The readers' contract: what a line or a file says (:class:`Entry`), the registry, and
the two kinds of reader.

A :class:`LineReader` reads a log one line at a time, as a trainer appends it (JSON
lines, CSV, console output): ``gapwatch watch`` follows such a file as it grows. A
:class:`WholeReader` reads a file (or a folder) that its writer rewrites or that is not
made of lines (``trainer_state.json``, TensorBoard event files, an MLflow run, a trackio
database): it is read whole, again whenever it changes.

Every reader turns what it reads into :class:`Entry` objects (a step and some of its
figures), in the order the trainer wrote them; ``orchestrator.watch.logs`` assembles entries
into steps and ``orchestrator.watch.follow`` follows them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

MAX_LINE = 1 << 20
"""Longest line read (1 MiB): a step's figures fit many times over; a longer line is not a
metrics log (or is a runaway write), and reading it whole would hold it in memory."""
MAX_STEP = 1_000_000_000
"""Largest step number taken (steps are whole numbers from 0)."""
MAX_WHOLE = 512 << 20
"""Largest file read whole (512 MiB): far above any history of scalars."""


STEP_ALIASES: tuple[str, ...] = (
    "step", "_step", "global_step", "train/global_step", "trainer/global_step", "Step",
    "misc/global_step", "iteration", "iter", "update",
)  # fmt: skip
"""Names a log's step goes by, in this order of preference: W&B's ``_step``, transformers'
``global_step`` (and its trackers' ``train/``/``trainer/`` forms), Oat's
``misc/global_step``, hand-written loops' ``iteration``/``iter``/``update``."""


class LogError(ValueError):
    """A metrics log that cannot be read, with where and how to fix it."""


@dataclass(frozen=True)
class Entry:
    """What one line (or one record of a file) says: a step and some of its figures."""

    step: int
    metrics: dict[str, float]
    ignored: tuple[str, ...] = ()
    """Names whose values were not numbers."""
    form: str = "jsonl"
    """The format this entry was read in (``verl`` for verl's file-logger lines)."""


@dataclass(frozen=True)
class ReadOptions:
    """What a user may tell a reader that its file does not say."""

    step_field: str | None = None
    """``keyvalue``: the field holding the step (default: step, global_step, iteration, iter)."""
    step_pattern: str | None = None
    """``keyvalue``: a regular expression whose first group is the step; a line it matches
    sets the step for its own pairs and the lines after it."""
    logging_steps: int | None = None
    """``console_dicts``: trainer steps between two printed dicts (the trainer's
    ``--logging_steps``): the n-th dict is step n * logging_steps."""

    def __post_init__(self) -> None:
        if self.logging_steps is not None and self.logging_steps < 1:
            raise LogError(f"--logging-steps must be 1 or more (got {self.logging_steps})")
        if self.step_pattern is not None:
            try:
                rx = re.compile(self.step_pattern)
            except re.error as exc:
                raise LogError(f"--step-pattern {self.step_pattern!r}: {exc}") from None
            if rx.groups < 1:
                raise LogError(
                    f"--step-pattern {self.step_pattern!r} needs a group for the step, "
                    r"like 'Step (\d+)'"
                )


def parse_step(raw: Any, where: str) -> int:
    """A step number from a JSON value or a text cell (``2.0`` is step 2)."""
    if isinstance(raw, str):
        try:
            raw = float(raw.strip())
        except ValueError:
            raise LogError(f"{where}: step {raw!r} is not a number") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise LogError(f'{where}: needs an integer "step" (got {raw!r})')
    if not math.isfinite(raw) or raw != int(raw):
        raise LogError(f"{where}: step {raw!r} is not an integer")
    if not 0 <= raw <= MAX_STEP:
        raise LogError(f"{where}: step {raw!r} is out of range; steps run from 0 to {MAX_STEP:,}")
    return int(raw)


_WRAPPED = re.compile(
    r"^(?:np\.\w+|numpy\.\w+|tensor|torch\.tensor|array|Decimal)\(\s*'?([^,)']*)'?\s*(?:,[^)]*)?\)$"
)


def number(value: Any) -> float | None:
    """A figure as a float: numbers, numeric text (``'0.52'``, ``'nan'``), and the
    printed forms of array scalars (``np.float64(0.3)``, ``tensor(0.3)``,
    ``tensor(0.3, device='cuda:0')``); None for anything else (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    m = _WRAPPED.match(text)
    if m is not None:
        text = m.group(1).strip()
    if not text or len(text) > 64:
        return None
    try:
        return float(text)
    except ValueError:
        return None


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor codes."""
    return _ANSI.sub("", text) if "\x1b" in text else text


class Reader:
    """One log format. Subclasses are registered with :func:`register`."""

    name: ClassVar[str] = ""
    whole: ClassVar[bool] = False
    """Read whole, again on each change (else line by line, as the file grows)."""
    spans_lines: ClassVar[bool] = False
    """A step's figures may come on several lines: a follower waits for the next step (or
    a quiet file) before it takes a step as complete."""
    describe: ClassVar[str] = ""
    """One line for ``--help`` and docs: what it reads."""

    def __init__(self, options: ReadOptions | None = None) -> None:
        self.options = options or ReadOptions()
        self.notes: list[str] = []
        """What a user should know about how the log was read (how steps were inferred)."""

    @classmethod
    def sniff(cls, path: Path, head: str) -> bool:
        """Whether ``path`` (a file whose first bytes decode to ``head``; ``head`` is
        empty for a folder) is in this format."""
        return False


class LineReader(Reader):
    """A log read line by line (see the module docstring)."""

    def line(self, text: str, where: str) -> Entry | None:
        """What one line says; None for a line with no figures (a header, noise).
        Raises LogError for a line that should have figures but cannot be read."""
        raise NotImplementedError

    def prepare(self, path: Path, finished: bool = True) -> None:  # noqa: B027 - optional
        """Called once before a file is read from its start: ``finished`` for a complete
        file (``replay``), False for one that may still grow (``watch``)."""


class WholeReader(Reader):
    """A file or folder read whole (see the module docstring)."""

    whole = True

    def entries(self, path: Path) -> list[Entry]:
        """Everything ``path`` says now, in the order it was written. Raises LogError when
        it cannot be read at all; :class:`Busy` when it is being rewritten."""
        raise NotImplementedError

    def signature(self, path: Path) -> tuple[Any, ...]:
        """Changes whenever what :meth:`entries` reads changes (default: the size and
        modification time of the file, or of every file under the folder)."""
        return files_signature(path)


class Busy(Exception):  # noqa: N818 - a state, not a failure
    """A whole file caught mid-rewrite: read it again at the next poll."""


def files_signature(path: Path, pattern: str = "*") -> tuple[Any, ...]:
    """Size and modification time of ``path``, or of each file under it."""
    try:
        if path.is_dir():
            return tuple(
                (str(p), p.stat().st_size, p.stat().st_mtime_ns)
                for p in sorted(path.rglob(pattern))
                if p.is_file()
            )
        st = path.stat()
    except OSError:
        return ()
    return ((str(path), st.st_size, st.st_mtime_ns),)


# --- registry --------------------------------------------------------------------------

_REGISTRY: dict[str, type[Reader]] = {}
R = TypeVar("R", bound=type)
ALIASES: dict[str, str] = {"verl": "jsonl", "trl": "trl_state"}
"""Older ``--format`` names, still accepted: ``verl`` (the file logger's JSON lines) and
``trl`` (``trainer_state.json``)."""


def register(name: str) -> Callable[[R], R]:
    """Class decorator: register a :class:`Reader` subclass under ``name`` (once)."""

    def deco(cls: R) -> R:
        if not issubclass(cls, Reader):
            raise TypeError(f"reader {name!r}: {cls.__name__} is not a Reader")
        if name in _REGISTRY or name in ALIASES:
            raise ValueError(f"log format {name!r} is registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def names() -> list[str]:
    """Every registered format name, in detection order."""
    return list(_REGISTRY)


def format_names() -> list[str]:
    """What ``--format`` accepts: ``auto``, every format, and the older aliases."""
    return ["auto", *sorted(_REGISTRY), *ALIASES]


def reader_class(name: str) -> type[Reader]:
    """The reader registered as ``name`` (or an alias); an unknown name fails listing the
    valid ones."""
    name = ALIASES.get(name, name)
    if name not in _REGISTRY:
        raise LogError(f"unknown log format {name!r}; valid: {', '.join(format_names())}")
    return _REGISTRY[name]


def get(name: str, options: ReadOptions | None = None) -> Reader:
    """A reader of format ``name``."""
    return reader_class(name)(options)
