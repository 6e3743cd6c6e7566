"""Does every node of the cluster reach Tune's storage? Checked when a sweep starts.

Ray Tune keeps each trial's checkpoints under the sweep's ``storage_path``. A trial moved
to another node (its node lost or preempted) is restored from there, so on a cluster of
several machines the folder must be one every node reaches (an NFS mount at the same
path on each). A folder local to the head looks fine until the first node is lost, and
then the moved trial finds nothing to restore from: hours into an overnight sweep.

:func:`unreached` asks every live node, with a zero-CPU Ray task pinned to it, whether it
sees a marker file the driver has just written in the folder. A URI (``s3://``,
``gs://``, ...) is Tune's to reach and is not checked. A single-node cluster (the local
default) is not checked either: its one node is the driver's machine.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

ANSWER_S = 60.0
"""How long a node may take to answer (it may have to start a Ray worker first)."""


def is_uri(storage: str | Path) -> bool:
    """Whether ``storage`` is a URI Tune writes to through its own filesystem layer."""
    return "://" in str(storage)


def _sees(path: str) -> tuple[bool, str]:
    return os.path.exists(path), socket.gethostname()


def unreached(folder: Path, answer_s: float = ANSWER_S) -> list[str]:
    """The live nodes of the connected Ray cluster that do not see ``folder``, each as
    ``ip (node ID8 on host)`` or ``ip (node ID8, no answer in N s)``; empty on a single
    node."""
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) < 2:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / f".gapwatch-reach-{uuid.uuid4().hex}"
    marker.write_text("written by the sweep's driver: every node must see this file\n")
    sees = ray.remote(num_cpus=0, max_retries=0)(_sees)
    try:
        asks = {
            f"{n['NodeManagerAddress']} (node {str(n['NodeID'])[:8]}": sees.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(str(marker))
            for n in nodes
        }
        missing = []
        for ip, ask in asks.items():
            try:
                ok, host = ray.get(ask, timeout=answer_s)
            except GetTimeoutError:
                missing.append(f"{ip}, no answer in {answer_s:g} s)")
                continue
            if not ok:
                missing.append(f"{ip} on {host})")
        return missing
    finally:
        marker.unlink(missing_ok=True)
