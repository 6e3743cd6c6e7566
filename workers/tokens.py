"""Text to token ids the way every part of a run does it (a leaf: rollouts, the warm
start and the probe share it without importing the model module)."""

from __future__ import annotations

from typing import Any


def encode(tokenizer: Any, text: str, *, first: bool) -> list[int]:
    """Token ids of ``text``; ``first`` prepends BOS (the start of a history)."""
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    if first and tokenizer.bos_token_id is not None:
        ids = [int(tokenizer.bos_token_id), *ids]
    return ids
