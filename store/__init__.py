"""gapwatch store package."""
