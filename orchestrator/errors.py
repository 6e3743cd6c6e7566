"""One error type for problems the user can fix (bad config, bad log, bad flag).

The CLI prints such an error as one line (``error: ...``) and exits 2, never a traceback.
Packages below the orchestrator raise their own ``ValueError`` subclasses (or
``store.StoreError``); the CLI treats those the same way.
"""


class GapwatchError(Exception):
    """A problem with the user's input, stated with how to fix it."""
