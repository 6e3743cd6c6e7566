"""gapwatch workers package."""
