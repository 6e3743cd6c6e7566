"""The one rich Console the commands print to (no Ray import: ``gapwatch runs`` uses it),
and how text from outside (a run's name, a metric key, an error) is shown on it."""

from __future__ import annotations

import re

from rich.console import Console
from rich.text import Text

# C0/C1 controls (ESC among them), DEL, the line/paragraph separators, bidi overrides
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def console(width: int = 160) -> Console:
    """stdout; a file or pipe gets a wide fixed ``width`` so tables are not squeezed into
    80 columns."""
    c = Console()
    return c if c.is_terminal else Console(width=width)


def plain(text: object) -> str:
    """``text`` with every terminal control character (escape sequences, carriage
    returns, bidi overrides) written as a visible escape (``\\x1b``), so a stored name or
    error cannot move the cursor, recolour or rewrite the screen."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text))


def shown(text: object) -> Text:
    """``text`` as a rich cell: never read as markup (``[/x]`` is shown, not parsed), and
    made :func:`plain`."""
    return Text(plain(text))
