"""Join an existing Ray cluster: a real ``ray start --head`` on loopback, ``--address``.

The cluster is stopped by terminating the process group of the ``ray start --block``
this test started, not with ``ray stop`` (which stops every Ray on the machine, other
users' included).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from gapwatch.store import open_store

from .procs import ONE_CLUSTER_AT_A_TIME, end_group, free_port

BIN = Path(sys.executable).parent
CFG = {
    "name": "joined",
    "env": "mul",
    "seeds": [0],
    "steps": 2,
    "tasks_per_step": 2,
    "group_size": 2,
    "compression": [{"codec": "quant", "bits": 2}],
    "correction": ["none"],
    "stopping": False,
}


@pytest.mark.slow
@pytest.mark.long
@ONE_CLUSTER_AT_A_TIME
def test_sweep_joins_ray_start_head_on_loopback(tmp_path: Path) -> None:
    port = free_port()
    # Short path: Ray's unix sockets live under it (107-character limit)
    ray_tmp = tempfile.mkdtemp(prefix="gwray", dir="/tmp")
    log = open(tmp_path / "ray_start.log", "w")  # noqa: SIM115 - closed in finally
    head = subprocess.Popen(
        [
            str(BIN / "ray"),
            "start",
            "--head",
            "--node-ip-address",
            "127.0.0.1",
            "--port",
            str(port),
            "--temp-dir",
            ray_tmp,
            "--num-cpus",
            "2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--block",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in (tmp_path / "ray_start.log").read_text():
            assert head.poll() is None, (tmp_path / "ray_start.log").read_text()
            assert time.monotonic() < deadline, "ray start --head did not come up in 90 s"
            time.sleep(0.5)
        cfg = tmp_path / "joined.yaml"
        cfg.write_text(yaml.safe_dump(CFG))
        url = f"sqlite:///{tmp_path}/joined.db"
        res = subprocess.run(
            [
                str(BIN / "gapwatch"),
                "sweep",
                str(cfg),
                "--db",
                url,
                "--address",
                f"127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
            check=False,
            env={**os.environ, "RAY_ADDRESS": ""},
        )
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert "Traceback" not in res.stderr
        # stdout is a pipe: progress comes as plain lines, each trial's end among them
        assert "end   s0-control: completed at step 2/2" in res.stdout, res.stdout[-2000:]
        st = open_store(url)
        runs = st.runs()
        assert {r.trial_id for r in runs} == {"s0-control", "s0-quant_bits2-none"}
        for r in runs:
            assert r.status == "completed", r
            assert [h["step"] for h in st.history(r.id)] == [1, 2]
    finally:
        end_group(head, wait_s=10)
        log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_unreachable_address_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "joined.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    res = subprocess.run(
        [
            str(BIN / "gapwatch"),
            "sweep",
            str(cfg),
            "--db",
            f"sqlite:///{tmp_path}/x.db",
            "--address",
            "not-a-host:1:2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert res.returncode == 2
    err = res.stderr.strip().splitlines()
    assert err and err[-1].startswith("error: ") and "Traceback" not in res.stderr
