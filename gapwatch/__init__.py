"""gapwatch's public entry points for code outside its own CLI.

``gapwatch.integrations.trl.GapwatchCallback``: watch and stop a TRL (or any
``transformers.Trainer``) run from inside it. The packages that do the work are
``orchestrator`` (sweeps, rules, following runs), ``workers``, ``correction``, ``store``
and ``ui``; this one only gathers what a user imports.
"""
