"""gapwatch installs one name: its wheel holds exactly one top-level package, ``gapwatch``,
and a trainer launched from a folder with its own ``workers/``, ``store/`` and ``ui/``
imports both its own packages and gapwatch's, without conflict."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("packaging")  # its session fixture: one worker

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _folder(package: str) -> Path:
    """The repository folder a package's name maps to (pyproject's package-dir)."""
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        mapped = SETUPTOOLS["package-dir"].get(".".join(parts[:i]))
        if mapped is not None:
            return ROOT / mapped / Path(*parts[i:])
    return ROOT / Path(*parts)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip wheel .`` builds, from a copy of what it reads (the checkout's own
    build folders stay untouched)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("gapwatch", *SETUPTOOLS["package-dir"].values()):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(out)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (whl,) = out.glob("gapwatch-*.whl")
    return whl


def test_every_package_folder_is_listed() -> None:
    """pyproject's package list names every folder with an ``__init__.py`` that it maps."""
    listed = set(SETUPTOOLS["packages"])
    for name in listed:
        assert (_folder(name) / "__init__.py").is_file(), name
    found = {
        ".".join((top, *p.parent.relative_to(ROOT / folder).parts)).rstrip(".")
        for top, folder in [("gapwatch", "gapwatch"), *SETUPTOOLS["package-dir"].items()]
        for p in (ROOT / folder).rglob("__init__.py")
    }
    assert found == listed


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = {n.split("/")[0] for n in names if ".dist-info/" in n}
    assert len(dist_info) == 1
    assert {n.split("/")[0] for n in names} - dist_info == {"gapwatch"}
    (top_level,) = (n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["gapwatch"]
    for package in SETUPTOOLS["packages"]:
        assert package.replace(".", "/") + "/__init__.py" in names, package
    # what the packages read at run time: migrations, the shipped warm start, the UI's pages
    assert any(n.startswith("gapwatch/store/migrations/versions/") for n in names)
    assert "gapwatch/store/migrations/env.py" in names
    assert "gapwatch/workers/assets/quick/model.safetensors" in names
    pages = {p.name for p in (ROOT / "ui" / "views").glob("*.py")}
    assert {f"gapwatch/ui/views/{p}" for p in pages} <= set(names) and pages


THEIRS = """
import sys
import workers, store, ui   # the trainer's own packages, found first (its folder is sys.path[0])
assert (workers.MARK, store.MARK, ui.MARK) == ("theirs",) * 3

import gapwatch
from gapwatch.integrations.trl import GapwatchCallback
from gapwatch.integrations.verl import install   # the name verl's setup hook takes
from gapwatch.store import open_store
from gapwatch.workers import RunConfig

assert gapwatch.__file__.startswith(sys.argv[1]), gapwatch.__file__   # the installed wheel
st = open_store("sqlite:///trainer.db")   # the migrations come from the wheel
st.close()
assert (workers.MARK, store.MARK, ui.MARK) == ("theirs",) * 3
assert "workers" not in {m.split(".")[0] for m in sys.modules if m.startswith("gapwatch")}
print("ok", GapwatchCallback.__name__, install.__name__, RunConfig.__name__)
"""


def test_a_trainer_with_its_own_workers_store_and_ui_imports_both(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target",
         str(site), str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    trainer = tmp_path / "trainer"
    for own in ("workers", "store", "ui"):
        (trainer / own).mkdir(parents=True)
        (trainer / own / "__init__.py").write_text('MARK = "theirs"\n')
    (trainer / "train.py").write_text(THEIRS)
    env = {**os.environ, "PYTHONPATH": str(site)}  # the wheel, not this checkout
    res = subprocess.run(
        [sys.executable, "train.py", str(site)], cwd=trainer, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["ok", "GapwatchCallback", "install", "RunConfig"]
    assert (trainer / "trainer.db").is_file()
    # the command the wheel installs, and python -m gapwatch, from the same folder
    for cmd in (
        [str(site / "bin" / "gapwatch"), "--help"],
        [sys.executable, "-m", "gapwatch", "--help"],
    ):
        res = subprocess.run(cmd, cwd=trainer, env=env, capture_output=True, text=True,
                             timeout=300, check=False)  # fmt: skip
        assert res.returncode == 0 and "sweep" in res.stdout, res.stderr[-2000:]
