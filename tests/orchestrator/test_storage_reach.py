"""A sweep on a cluster whose storage a node cannot reach fails at its start, in one line.

A real two-node Ray cluster on this machine (``procs.two_nodes``) whose second node runs
in a mount namespace of its own (``unshare --mount``), with an empty tmpfs mounted over
the sweep's ``storage_path``: the folder is there on the head and empty, a different
folder, on the second node, as a head-local disk is on another machine. ``gapwatch sweep
--address`` must refuse before any trial runs or any sweep is recorded, naming the node
and what to set. Needs root (a mount namespace); skipped otherwise. The path where every
node sees the storage (the folder shared, the nodes' temp folders apart) is the node-loss
tests' (``test_node_loss.py``): a trial moved off the killed node resumes there from the
checkpoint it wrote on the lost node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gapwatch.store import open_store

from .procs import BIN, ONE_CLUSTER_AT_A_TIME, two_nodes

pytestmark = [
    pytest.mark.slow,
    pytest.mark.long,
    ONE_CLUSTER_AT_A_TIME,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="a mount namespace for the second node needs root and unshare",
    ),
]


def test_a_sweep_whose_storage_a_node_cannot_see_stops_at_its_start(tmp_path: Path) -> None:
    storage = tmp_path / "storage"
    storage.mkdir()
    hide = [
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        f'mount -t tmpfs gapwatch-hidden "{storage}" && exec "$@"', "sh",
    ]  # fmt: skip
    cfg = {
        "name": "unreached", "env": "mul", "seeds": [0], "steps": 3, "storage_path": str(storage),
        "tasks_per_step": 2, "group_size": 2, "resources": {"cpus": 1},
        "compression": [{"codec": "quant", "bits": 2}], "correction": ["none"],
    }  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(cfg))
    url = f"sqlite:///{tmp_path}/s.db"
    with two_nodes(tmp_path, second_wrap=hide) as cl:
        res = subprocess.run(
            [str(BIN / "gapwatch"), "sweep", str(path), "--db", url, "--address", cl.address],
            capture_output=True, text=True, cwd=tmp_path, timeout=300,
            env={**os.environ, "RAY_ADDRESS": ""},
        )  # fmt: skip
    assert res.returncode == 2, res.stdout + res.stderr
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"Tune's storage {storage} is not reachable from node(s) " in err[0]
    assert err[0].count(" (node ") == 1  # the second node only: the head sees it
    assert "storage_path" in err[0] and "s3://" in err[0]
    assert open_store(url).sweeps() == []  # nothing recorded, nothing ran
    assert list(storage.iterdir()) == []  # the driver's marker removed
