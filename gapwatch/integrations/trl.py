"""``GapwatchCallback`` and ``GapGRPOTrainer``: see ``gapwatch.orchestrator.integrations.trl``.

The public import path; TRL is imported only when ``GapGRPOTrainer``, ``GapConfig`` or
``TRLHooksMissing`` is first used, so the callback serves any ``transformers.Trainer``.
"""

from __future__ import annotations

from typing import Any

from gapwatch.orchestrator.integrations.trl import GapwatchCallback

__all__ = ["GapConfig", "GapGRPOTrainer", "GapwatchCallback"]  # noqa: F822 (lazy, below)


def __getattr__(name: str) -> Any:
    from gapwatch.orchestrator.integrations import trl

    return getattr(trl, name)  # the lazy TRL names, or its AttributeError
