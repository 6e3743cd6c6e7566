"""The store's one error type: a problem the user can fix, said in one line."""

from __future__ import annotations


class StoreError(Exception):
    """What is wrong with the store or the data sent to it, and how to fix it (one line)."""
