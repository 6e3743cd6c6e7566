"""The architecture holds: DESIGN.md's one-way dependencies and no import cycle in any
package, checked by import-linter with the contracts in pyproject.toml, on the layout as it
installs (tools/import_tree.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "import_tree.py"), "--root", str(root),
         "lint-imports", "--no-cache"],
        cwd=root, env={**os.environ, "PYTHONPATH": "", "COLUMNS": "200"}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_the_packages_keep_every_contract() -> None:
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "BROKEN" not in res.stdout and "8 kept, 0 broken" in res.stdout


def test_a_cycle_or_an_upward_import_breaks_the_contracts(tmp_path: Path) -> None:
    """The same contracts on a copy of the layout with one cycle, wrong-way imports (one
    between packages, one between orchestrator's ways in) and a reach into a way's modules."""
    for pkg in ("gapwatch", "orchestrator", "workers", "correction", "store", "ui"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "gapwatch" / "integrations.py").write_text("")
    (tmp_path / "workers" / "a.py").write_text("def f():\n    from gapwatch.workers import b\n")
    (tmp_path / "workers" / "b.py").write_text("from gapwatch.workers import a\n")
    (tmp_path / "correction" / "c.py").write_text("import gapwatch.workers.a\n")
    orch = tmp_path / "orchestrator"  # its layers, as in the package
    for mod in ("cli", "tracked", "signals", "listing", "rules", "readers", "console", "errors"):
        (orch / f"{mod}.py").write_text("")
    for way in ("sweep", "watch", "integrations"):
        (orch / way).mkdir()
        (orch / way / "__init__.py").write_text("")
    (orch / "sweep" / "driver.py").write_text("")
    (orch / "watch" / "follow.py").write_text(
        "import gapwatch.orchestrator.sweep.driver\n"
    )  # up a layer
    (orch / "integrations" / "trl.py").write_text(
        "from gapwatch.orchestrator.watch import follow\n"
    )
    (tmp_path / "pyproject.toml").write_text(
        (ROOT / "pyproject.toml")
        .read_text()
        .replace('ignore_imports = ["gapwatch.orchestrator.cli -> gapwatch.ui.launch"]', "")
    )
    res = _lint(tmp_path)
    assert res.returncode != 0
    assert "No import cycles inside a package BROKEN" in res.stdout
    assert "gapwatch.correction is not allowed to import gapwatch.workers" in res.stdout
    assert (
        "gapwatch.orchestrator.watch is not allowed to import gapwatch.orchestrator.sweep"
        in res.stdout
    )
    assert "protected package gapwatch.orchestrator.watch.follow" in res.stdout
    assert (
        "- gapwatch.orchestrator.integrations.trl -> gapwatch.orchestrator.watch.follow"
        in res.stdout
    )
