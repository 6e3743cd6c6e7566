"""``python -m gapwatch``: the ``gapwatch`` command."""

from gapwatch.orchestrator.cli import main

main()
