"""Hooks that put runs trained by other frameworks under gapwatch's rules.

The public import paths; the code lives in ``gapwatch.orchestrator.integrations``.

- ``gapwatch.integrations.trl``: ``GapwatchCallback``, a ``transformers.TrainerCallback``
  (TRL's GRPOTrainer first; any Trainer-based trainer), and ``GapGRPOTrainer`` with its
  ``GapConfig``, the seed's experiment inside TRL (TRL is imported on first use);
- ``gapwatch.integrations.trl_gap``, ``gapwatch.integrations.trl_episodes``: that trainer
  and ``ToolEpisodes``, a multi-turn tool task as TRL's ``rollout_func``;
- ``gapwatch.integrations.verl``: gapwatch's diagnostics inside a verl run
  (``worker_process_setup_hook=gapwatch.integrations.verl.install``).
"""
