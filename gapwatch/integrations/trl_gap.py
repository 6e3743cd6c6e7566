"""``GapGRPOTrainer``, the seed's experiment inside TRL: see
``orchestrator.integrations.trl_gap``."""

from orchestrator.integrations.trl_gap import (
    GapConfig,
    GapGRPOTrainer,
    TRLHooksMissing,
    post_tool_mask,
    require_hooks,
)

__all__ = ["GapConfig", "GapGRPOTrainer", "TRLHooksMissing", "post_tool_mask", "require_hooks"]
