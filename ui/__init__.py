"""gapwatch ui package."""
