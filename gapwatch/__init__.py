"""gapwatch: the one name it installs.

``gapwatch.integrations.trl.GapwatchCallback``: watch and stop a TRL (or any
``transformers.Trainer``) run from inside it; ``gapwatch.integrations`` lists the rest.

The packages that do the work are ``gapwatch.orchestrator`` (sweeps, watching runs, rules,
integrations), ``gapwatch.workers``, ``gapwatch.correction``, ``gapwatch.store`` and
``gapwatch.ui``. In the repository they are the top-level folders ``orchestrator/``,
``workers/``, ... that ``[tool.setuptools.package-dir]`` in pyproject.toml maps under this
name; an installed wheel holds them inside ``gapwatch/``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _checkout_root() -> str | None:
    """The repository root when this is a checkout on PYTHONPATH that nobody installed.

    ``pip install -e .`` maps ``gapwatch.orchestrator`` to ``orchestrator/`` with an import
    hook, and a wheel holds it inside this folder; a bare checkout on ``PYTHONPATH`` (the GPU
    check's copy of the tree, a checkout of an older commit) has neither, so the root joins
    this package's search path, as the mapping says.
    """
    if importlib.util.find_spec(f"{__name__}.orchestrator") is not None:
        return None
    root = Path(__file__).resolve().parent.parent
    return str(root) if (root / "orchestrator" / "__init__.py").is_file() else None


if (_root := _checkout_root()) is not None:
    __path__.append(_root)
