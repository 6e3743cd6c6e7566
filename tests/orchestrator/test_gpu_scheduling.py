"""GPU scheduling checked without a GPU: a real two-node Ray cluster with logical GPUs.

Ray schedules *logical* GPUs: ``ray start --num-gpus=2`` makes a node offer two GPU ids
whether or not a device is there, and each trial is given ids and a
``CUDA_VISIBLE_DEVICES``. Two nodes run on this machine (``ray start --head`` and a second
``ray start --address``, each with its own temp dir, two CPUs and two logical GPUs), and
``gapwatch sweep --address`` runs on them:

- ``gpus: 1``: a control and three treatments that wait for each other (a barrier), so
  all four run at once: two per node, each on its own GPU, and at least two treatments
  on the other node from their control, which are still compared with it
  (``gap_vs_control`` warns with the control's step-1 gap as evidence);
- ``gpus: 0.5``: eight trials at once, each GPU of each node shared by exactly two;
- the built-in worker with ``gpus: 1`` is put on ``device: cuda``; here, with no CUDA,
  each trial fails with one clear line in the store, not a traceback.

Every trial's node and GPU ids are read from its run's config in the store
(``placement``, reported by the trial itself: ``orchestrator.sweep.placement``), and the
command trainer records the ``CUDA_VISIBLE_DEVICES`` it was started with, which must be
the same. The cluster is ended by its process groups (``ray stop`` would end every Ray
on the machine, other users' too), also when a test fails, and the teardown checks that
no process of either node is left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gapwatch.store import open_store
from gapwatch.store.rows import RunRow

from .procs import (
    ONE_CLUSTER_AT_A_TIME,
    end_nodes,
    ensure_ray_token,
    free_port,
    start_node,
    wait_started,
)

pytestmark = [pytest.mark.slow, pytest.mark.long, ONE_CLUSTER_AT_A_TIME]

BIN = Path(sys.executable).parent

# A trainer stand-in: records the CUDA_VISIBLE_DEVICES it got in a barrier folder, waits
# until N trials have started (so they run at once), then writes three steps. The dense
# control's gap is 0.001, a treatment's 0.6 (gap_vs_control compares them).
TRAINER = """
import json, os, sys, time
log, barrier, n, key, codec = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
os.makedirs(barrier, exist_ok=True)
with open(os.path.join(barrier, key + ".tmp"), "w") as f:
    f.write(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
os.replace(os.path.join(barrier, key + ".tmp"), os.path.join(barrier, key))
deadline = time.time() + 150
while sum(not p.endswith(".tmp") for p in os.listdir(barrier)) < n and time.time() < deadline:
    time.sleep(0.2)
gap = 0.001 if codec == "none" else 0.6
with open(log, "a") as f:
    for step in (1, 2, 3):
        row = {"step": step, "critic/score/mean": 0.5, "training/rollout_probs_diff_mean": gap}
        f.write(json.dumps(row) + "\\n")
        f.flush()
        time.sleep(0.5)
"""


@dataclass
class Cluster:
    address: str
    logs: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A head and a worker node on loopback, two logical GPUs each; ended however the
    tests went, and checked to leave no process behind."""
    ensure_ray_token()  # `ray start` with token auth needs one (a fresh machine has none)
    logs = tmp_path_factory.mktemp("ray-logs")
    # short paths: Ray's unix sockets live under them (107-character limit)
    temps = [tempfile.mkdtemp(prefix="gwh", dir="/tmp"), tempfile.mkdtemp(prefix="gww", dir="/tmp")]
    port = free_port()
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        head_args = ["--head", "--port", str(port), "--include-dashboard=false",
                     "--dashboard-port", str(free_port())]  # fmt: skip
        nodes.append(start_node(head_args, temps[0], logs / "head.log"))
        wait_started(nodes[0], logs / "head.log", "ray start --head")
        nodes.append(start_node(["--address", f"127.0.0.1:{port}"], temps[1], logs / "w.log"))
        wait_started(nodes[1], logs / "w.log", "ray start --address (second node)")
        yield Cluster(f"127.0.0.1:{port}", logs)
    finally:
        end_nodes(nodes, temps)


def _command_sweep(name: str, treatments: int, gpus: float, cpus: float) -> dict[str, Any]:
    n = treatments + 1
    return {
        "name": name,
        "seeds": [0],
        "steps": 3,
        "compression": [{"codec": "fake", "level": list(range(1, treatments + 1))}],
        "correction": ["none"],
        "rules": {"gap_vs_control": {}},
        "resources": {"cpus": cpus, "gpus": gpus},
        "worker": {
            "command": ["{python}", "{workdir}/trainer.py", "{trial_dir}/m.jsonl",
                        f"{{workdir}}/barrier-{name}", str(n), "{trial_key}", "{codec}"],
            "log": "{trial_dir}/m.jsonl",
            "grace": 2,
        },
    }  # fmt: skip


def _sweep(cl: Cluster, tmp: Path, cfg: dict[str, Any]) -> tuple[list[RunRow], Any, str]:
    """Run ``cfg`` on the cluster with ``gapwatch sweep --address``: its runs, store, stderr."""
    (tmp / "trainer.py").write_text(TRAINER)
    path = tmp / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    url = f"sqlite:///{tmp}/{cfg['name']}.db"
    res = subprocess.run(
        [str(BIN / "gapwatch"), "sweep", str(path), "--db", url, "--address", cl.address],
        capture_output=True, text=True, timeout=400, cwd=tmp, check=False,
        env={**os.environ, "RAY_ADDRESS": ""},
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    st = open_store(url)
    return st.runs(), st, res.stderr


def _placement(r: RunRow) -> dict[str, Any]:
    where = r.config.get("placement")
    assert isinstance(where, dict), f"{r.trial_id}: no placement in its stored config"
    # what the trial got from Ray, written the way CUDA reads it
    assert where["cuda_visible_devices"] == ",".join(where["gpu_ids"]), where
    return where


def _max_sharing(runs: list[RunRow]) -> dict[tuple[str, str], int]:
    """Per (node, GPU id): the most trials that held it at the same moment (from each
    trial's start, as it reported it, to its end, as the store has it)."""
    events: defaultdict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for r in runs:
        where = _placement(r)
        assert r.ended is not None, r
        for gpu in where["gpu_ids"]:
            events[(where["node_id"], gpu)] += [(where["started_at"], 1), (r.ended.timestamp(), -1)]
    most = {}
    for key, evs in events.items():
        now = peak = 0
        for _, d in sorted(evs, key=lambda e: (e[0], e[1])):  # an end before a start at a tie
            now += d
            peak = max(peak, now)
        most[key] = peak
    return most


def _trainer_saw(tmp: Path, name: str) -> dict[str, str]:
    folder = tmp / f"barrier-{name}"
    return {p.name: p.read_text() for p in folder.iterdir() if not p.name.endswith(".tmp")}


def test_whole_gpus_one_trial_each_and_pairs_compared_across_nodes(
    cluster: Cluster, tmp_path: Path
) -> None:
    runs, st, stderr = _sweep(cluster, tmp_path, _command_sweep("whole", 3, gpus=1, cpus=1))
    assert len(runs) == 4 and {r.status for r in runs} == {"completed"}, [
        (r.trial_id, r.status, r.error) for r in runs
    ]
    where = {r.trial_id: _placement(r) for r in runs}
    # each trial got one whole GPU, and its trainer was started with exactly that GPU
    assert all(len(w["gpu_ids"]) == 1 for w in where.values()), where
    assert _trainer_saw(tmp_path, "whole") == {
        k: w["cuda_visible_devices"] for k, w in where.items()
    }
    # the barrier made all four run at once: two per node, never one GPU for two trials
    per_node = Counter(w["node_id"] for w in where.values())
    assert sorted(per_node.values()) == [2, 2], per_node
    assert max(_max_sharing(runs).values()) == 1, _max_sharing(runs)
    for node in per_node:
        ids = sorted(w["gpu_ids"][0] for w in where.values() if w["node_id"] == node)
        assert ids == ["0", "1"], (node, ids)
    # a treatment on another node than its control is still compared with it
    control = next(r for r in runs if r.role == "control")
    away = [r for r in runs if where[r.trial_id]["node_id"] != where[control.trial_id]["node_id"]]
    assert len(away) == 2 and all(r.pair_key == control.pair_key for r in away)
    for r in (x for x in runs if x.role == "treatment"):
        warns = [d for d in st.decisions(run_id=r.id) if d.rule == "gap_vs_control"]
        assert len(warns) == 1, (r.trial_id, warns)
        assert warns[0].evidence["control_gap"] == pytest.approx(0.001)
        assert warns[0].evidence["gap"] == pytest.approx(0.6)
    assert "Traceback" not in stderr


def test_half_gpus_two_trials_per_gpu_never_more(cluster: Cluster, tmp_path: Path) -> None:
    runs, _, stderr = _sweep(cluster, tmp_path, _command_sweep("half", 7, gpus=0.5, cpus=0.5))
    assert len(runs) == 8 and {r.status for r in runs} == {"completed"}, [
        (r.trial_id, r.status, r.error) for r in runs
    ]
    where = {r.trial_id: _placement(r) for r in runs}
    assert all(len(w["gpu_ids"]) == 1 for w in where.values()), where
    assert _trainer_saw(tmp_path, "half") == {
        k: w["cuda_visible_devices"] for k, w in where.items()
    }
    # eight at once on 2 nodes x 2 GPUs: every GPU held by exactly two trials
    sharing = _max_sharing(runs)
    assert len(sharing) == 4 and set(sharing.values()) == {2}, sharing
    assert "Traceback" not in stderr


def test_cuda_asked_for_where_absent_fails_each_trial_with_one_line(
    cluster: Cluster, tmp_path: Path
) -> None:
    cfg = {
        "name": "no-cuda",
        "env": "mul",
        "seeds": [0],
        "steps": 2,
        "tasks_per_step": 2,
        "group_size": 2,
        "compression": [{"codec": "quant", "bits": 2}],
        "correction": ["none"],
        "resources": {"cpus": 1, "gpus": 1},
    }
    runs, _, stderr = _sweep(cluster, tmp_path, cfg)
    assert len(runs) == 2
    for r in runs:
        assert r.config["device"] == "cuda", r.config
        where = _placement(r)
        assert r.status == "failed", (r.trial_id, r.status)
        err = r.error or ""
        assert err.startswith("ValueError: device 'cuda' asked for but CUDA is not available"), err
        assert f"CUDA_VISIBLE_DEVICES={where['cuda_visible_devices']!r}" in err, err
        assert "\n" not in err and "Traceback" not in err and r.last_step is None
    assert "Traceback" not in stderr
