"""Hooks that put runs trained by other frameworks under gapwatch's rules.

- ``gapwatch.integrations.trl``: a ``transformers.TrainerCallback`` (TRL's GRPOTrainer
  first; any Trainer-based trainer).

verl has no callback API: follow its file logger with ``gapwatch watch`` instead.
"""
