"""Run a static tool (import-linter, mypy) on gapwatch as it installs.

The repository keeps ``orchestrator/``, ``workers/``, ... at its top, and pyproject.toml's
``[tool.setuptools.package-dir]`` installs them as ``gapwatch.orchestrator``, ... An import
hook (``pip install -e .``) or a wheel makes that true at run time; static tools read folders,
not hooks. So this lays out the installed tree once more, made of symbolic links to the
repository's own folders (``build/import-tree/gapwatch/orchestrator -> ../../../orchestrator``),
and runs the tool there with the repository's pyproject.toml::

    python tools/import_tree.py lint-imports --no-cache
    python tools/import_tree.py mypy -p gapwatch -p tools
    python tools/import_tree.py --root some/copy lint-imports   (another tree's layout)

The mapping is read from pyproject.toml, so the tree cannot drift from what installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = "gapwatch"
EXTRA = ("tools",)  # checked beside the package, not installed


def build(root: Path, tree: Path) -> Path:
    """Lay out ``tree/gapwatch`` as installed, of links into ``root``; return ``tree``."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = mapping.get("package-dir", {})
    for old in (TOP, *EXTRA):  # the links only: the tools' caches beside them stay
        if (tree / old).is_symlink():
            (tree / old).unlink()
        elif (tree / old).exists():
            shutil.rmtree(tree / old)
    pkg = tree / TOP
    pkg.mkdir(parents=True)
    for entry in sorted((root / TOP).iterdir()):
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry.resolve())
    for name, folder in package_dir.items():
        first, _, sub = name.partition(".")
        if first != TOP or "." in sub:
            raise SystemExit(f"import_tree: package-dir {name!r}: only gapwatch.<name> is laid out")
        (pkg / sub).symlink_to((root / folder).resolve())
    for extra in EXTRA:
        if (root / extra).is_dir():
            (tree / extra).symlink_to((root / extra).resolve())
    return tree


def main(argv: list[str]) -> int:
    root = ROOT
    if argv[:1] == ["--root"]:
        root, argv = Path(argv[1]).resolve(), argv[2:]
    if not argv:
        print(__doc__)
        return 2
    tree = build(root, root / "build" / "import-tree")
    tool = shutil.which(argv[0], path=str(Path(sys.executable).parent)) or argv[0]
    pyproject = str(root / "pyproject.toml")
    config = ["--config-file", pyproject] if argv[0] == "mypy" else [pyproject]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # the tool's own cache lives in the tree's folder, so a second run is incremental
    return subprocess.run([tool, *config, *argv[1:]], cwd=tree, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
