"""The one rich Console the commands print to (no Ray import: ``gapwatch runs`` uses it)."""

from __future__ import annotations

from rich.console import Console


def console(width: int = 160) -> Console:
    """stdout; a file or pipe gets a wide fixed ``width`` so tables are not squeezed into
    80 columns."""
    c = Console()
    return c if c.is_terminal else Console(width=width)
