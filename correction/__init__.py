"""Pure math for the train-inference gap: correction strategies and gap diagnostics.

Depends on numpy and torch only: no config objects, no I/O, no distributed calls.

- ``strategies``: registry of correction strategies (``names()``, ``get(name, **kw)``,
  ``params(name)``); each returns ``(weights, metrics)``.
- ``diagnostics``: ``summarize`` (gap figures per slice) and ``distributions``
  (mergeable |log-ratio| sketches as payloads).
- ``sketch``: ``LogSketch``, the mergeable relative-error histogram.
- ``names``: the one dictionary of metric names.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["diagnostics", "names", "sketch", "strategies"]

if TYPE_CHECKING:
    from gapwatch.correction import diagnostics, names, sketch, strategies


def __getattr__(name: str) -> ModuleType:
    # Submodules load on first use, so `from gapwatch.correction import names` (rules, replay, the
    # store's readers) does not pay for importing torch.
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'correction' has no attribute {name!r}")
