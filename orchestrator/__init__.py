"""gapwatch's orchestrator: the two ways into an experiment, and what they share.

- ``sweep/``: gapwatch runs the experiment. ``gapwatch sweep`` expands a paired sweep
  YAML into Ray Tune trials (a dense control and its compressed treatments per seed) of
  the built-in worker or of any trainer's command, stops them by the rules as they go and
  records every step; ``gapwatch run`` is one such run in this process, without Ray.
- ``watch/``: a run someone else trains. ``gapwatch watch`` follows the log a trainer is
  writing (one run, or a fleet of them from a layout file), puts it in the store and stops
  it by the same rules; ``gapwatch replay`` and ``gapwatch names`` read a finished log.
- ``integrations/``: gapwatch inside someone else's trainer: the TRL callback, the seed's
  experiment as a TRL trainer, the verl plug-in. Their public import path is
  ``gapwatch.integrations``.

What all of them share sits beside them: ``rules/`` (the stop rules and the one
incremental watcher), ``readers/`` (one module per log format), ``tracked`` (one run in
the store, fed step by step to the rules), ``signals`` (how a run ended by a signal is
recorded), ``listing`` (``gapwatch runs``), ``console`` and ``errors``. ``cli`` is the
typer app, a thin layer over the three.

Which may import what (import-linter contracts in ``pyproject.toml``): ``cli`` over
``sweep`` and ``integrations`` over ``watch`` over the shared modules; ``watch`` never
imports ``sweep`` or ``integrations``, ``sweep`` and ``integrations`` never import each
other, and outside ``cli`` a package is imported by its top (``from gapwatch.orchestrator.watch
import LogFollower``), never by its modules.
"""
