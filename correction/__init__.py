"""Pure math for the train-inference gap: correction strategies and gap diagnostics.

Depends on numpy and torch only: no config objects, no I/O, no distributed calls.

- ``strategies``: registry of correction strategies (``names()``, ``get(name, **kw)``,
  ``params(name)``); each returns ``(weights, metrics)``.
- ``diagnostics``: ``summarize`` (gap figures per slice) and ``distributions``
  (mergeable |log-ratio| sketches as payloads).
- ``sketch``: ``LogSketch``, the mergeable relative-error histogram.
- ``names``: the one dictionary of metric names.
"""

from correction import diagnostics, names, sketch, strategies

__all__ = ["diagnostics", "names", "sketch", "strategies"]
