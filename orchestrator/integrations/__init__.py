"""gapwatch inside someone else's trainer.

- ``trl``: ``GapwatchCallback``, a ``transformers.TrainerCallback`` that puts a TRL (or any
  ``Trainer``) run in the store and stops it by the rules from inside;
- ``trl_gap``: ``GapGRPOTrainer``, the seed's experiment inside TRL (a dense sampler, a
  compressed trainer forward, gapwatch's sliced diagnostics and corrections);
- ``trl_episodes``: ``ToolEpisodes``, a multi-turn tool task as TRL's ``rollout_func``;
- ``verl``: the same diagnostics inside a verl run, switched on by one Ray override.

Users import these from ``gapwatch.integrations`` (the public path, kept as it was); the
code lives here, beside the two other ways in. May import: the shared modules of
``orchestrator``, ``orchestrator.watch`` by its top only, and the packages below; never
``orchestrator.sweep``.
"""
