"""``GapGRPOTrainer``, the seed's experiment inside TRL: see
``gapwatch.orchestrator.integrations.trl_gap``."""

from gapwatch.orchestrator.integrations.trl_gap import (
    GapConfig,
    GapGRPOTrainer,
    TRLHooksMissing,
    post_tool_mask,
    require_hooks,
)

__all__ = ["GapConfig", "GapGRPOTrainer", "TRLHooksMissing", "post_tool_mask", "require_hooks"]
