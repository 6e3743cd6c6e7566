"""gapwatch orchestrator package."""
