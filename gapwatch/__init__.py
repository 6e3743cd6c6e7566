"""gapwatch's public entry points for code outside its own CLI.

``gapwatch.integrations.trl.GapwatchCallback``: watch and stop a TRL (or any
``transformers.Trainer``) run from inside it; ``gapwatch.integrations`` lists the rest.
These are import paths only: the code is in ``orchestrator.integrations``, and the packages
that do the work are ``orchestrator`` (sweeps, watching runs, rules, integrations),
``workers``, ``correction``, ``store`` and ``ui``.
"""
