"""Process helpers shared by the tests that start Ray nodes themselves.

A node is ``ray start ... --block`` in its own process group with its own temp dir (short:
Ray's unix sockets live under it), ended by its group (``ray stop`` would end every Ray on
the machine, other users' too); :func:`procs_of` finds what outlived it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

BIN = Path(sys.executable).parent

ONE_CLUSTER_AT_A_TIME = pytest.mark.xdist_group("ray-cluster")
"""The mark of every module that starts Ray nodes with ``ray start``: pytest-xdist's
``--dist loadgroup`` runs them all on one worker, so two clusters of two nodes each (eight
Ray CPUs on a two-core machine) never start at once. The other tests go to either worker."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 this moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end_group(p: subprocess.Popen[bytes], grace_s: float = 5.0, wait_s: float = 30.0) -> None:
    """SIGTERM ``p``'s process group, SIGKILL what is left after ``grace_s``, reap ``p``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(p.pid, 0)  # raises once no process of the group is left
        except ProcessLookupError:
            break
        p.poll()
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=wait_s)


def start_node(
    args: list[str],
    temp: str,
    log: Path,
    *,
    cpus: int = 2,
    gpus: int = 2,
    env: dict[str, str] | None = None,
    wrap: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """``ray start ARGS --block`` on loopback with ``cpus`` CPUs and ``gpus`` logical GPUs,
    in its own process group, token auth on, its output in ``log``; ``wrap``: a command
    that execs the rest (e.g. into a mount namespace of its own)."""
    with log.open("w") as out:
        return subprocess.Popen(
            [*(wrap or []), str(BIN / "ray"), "start", *args, "--node-ip-address", "127.0.0.1",
             "--temp-dir", temp, "--num-cpus", str(cpus), "--num-gpus", str(gpus),
             "--object-store-memory", str(80 * 2**20), "--disable-usage-stats",
             "--dashboard-agent-listen-port", str(free_port()), "--block"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_ADDRESS": "", **(env or {})},
        )  # fmt: skip


def wait_started(p: subprocess.Popen[bytes], log: Path, what: str, within: float = 120) -> None:
    """Wait until ``ray start`` says its node is up (fail naming ``what`` if it exits)."""
    deadline = time.monotonic() + within
    while "Ray runtime started" not in log.read_text():
        assert p.poll() is None, f"{what} exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what} did not come up in {within:g} s"
        time.sleep(0.5)


def procs_of(dirs: list[str]) -> list[str]:
    """Live processes whose command line names one of ``dirs`` (a node's temp dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(d in cmd for d in dirs):
            found.append(f"{proc.name} {cmd[:160]}")
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, theirs, ...), by their parent ids."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def cmdline(pid: int) -> str:
    """``pid``'s command line ('' once it is gone)."""
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def start_sweep(address: str, tmp: Path, cfg: dict[str, Any]) -> tuple[subprocess.Popen[str], str]:
    """``gapwatch sweep`` of ``cfg`` joining the cluster at ``address`` (run in ``tmp``, its
    own process group, output piped); the driver and its store's URL (SQLite in ``tmp``)."""
    path = tmp / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    url = f"sqlite:///{tmp}/{cfg['name']}.db"
    proc = subprocess.Popen(
        [str(BIN / "gapwatch"), "sweep", str(path), "--db", url, "--address", address],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
        start_new_session=True, env={**os.environ, "RAY_ADDRESS": ""},
    )  # fmt: skip
    return proc, url


FAST_NODE_DEATH = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}
"""The head notices a node gone after 3 failed 1 s health checks (Ray's default: 5 x 3 s
after a 10 s timeout)."""


@dataclass
class Cluster:
    """Two Ray nodes on this machine: the head and a second one that can be lost."""

    address: str
    temps: list[str]
    nodes: list[subprocess.Popen[bytes]]
    logs: Path

    def kill_second_node(self, keep: str | None = None) -> list[int]:
        """SIGKILL the second node's raylet and Ray workers (every process below its
        ``ray start``), sparing processes whose command line holds ``keep``; their pids."""
        pids = [p for p in descendants(self.nodes[1].pid) if not (keep and keep in cmdline(p))]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def runs_on_second(self, runs: list[Any]) -> list[Any]:
        """The ``running`` runs (store rows) whose trial process is on the second node."""
        below = set(descendants(self.nodes[1].pid))
        return [
            r for r in runs
            if r.status == "running" and isinstance(where := r.config.get("placement"), dict)
            and where["pid"] in below
        ]  # fmt: skip

    def node_id(self, i: int) -> str:
        """Node ``i``'s Ray node id (hex), from its raylet's command line."""
        for pid in descendants(self.nodes[i].pid):
            args = cmdline(pid).split()
            if args and args[0].endswith("/raylet/raylet"):
                for arg in args:
                    if arg.startswith("--node_id="):
                        return arg.removeprefix("--node_id=")
        raise AssertionError(f"no raylet below node {i}'s ray start")

    def drain_second_node(self, message: str, deadline_s: int) -> None:
        """``ray drain-node`` the second node for preemption, ``deadline_s`` seconds of
        notice, ``message`` its reason; fail unless Ray accepts it. Ray only records the
        drain (nothing new is placed there); ending the node is the caller's part, as a
        cloud's at the deadline."""
        r = subprocess.run(
            [str(BIN / "ray"), "drain-node", "--address", self.address,
             "--node-id", self.node_id(1), "--reason", "DRAIN_NODE_REASON_PREEMPTION",
             "--reason-message", message, "--deadline-remaining-seconds", str(deadline_s)],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_ADDRESS": ""},
        )  # fmt: skip
        assert r.returncode == 0, f"ray drain-node: {r.stdout[-2000:]}{r.stderr[-2000:]}"

    def gcs_says(self, *words: str) -> str:
        """The head's GCS log lines holding any of ``words`` (how Ray saw a drain or a
        node's end), for a failing test's message; read while the head's temp is there."""
        lines: list[str] = []
        for log in Path(self.temps[0]).glob("session_*/logs/gcs_server.out"):
            text = log.read_text(errors="replace")
            lines += [ln for ln in text.splitlines() if any(w in ln for w in words)]
        return "\n".join(lines[-40:])

    def end_second_node(self) -> None:
        """End the drained second node as Ray's own preemption test does (its
        ``cluster.remove_node`` on a drained node): SIGTERM to the node's raylet, which
        shuts down its workers and records the node's end by the drain (preempted, once
        the drain's deadline is past); then end what is left of the node's group.

        Not SIGTERM to the whole group: since Ray 2.60 a SIGTERMed ``ray start`` drains
        its node again (for preemption, 30 s ahead; ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``),
        and where that drain reaches the head before the raylet has gone it replaces the
        one under test, so the node ends before the new deadline and Ray records it lost
        (CI saw this once). Not SIGKILL: the trials' workers then die before their node
        is known dead, and Ray records lost workers, not a preempted node."""
        raylet = next(
            pid for pid in descendants(self.nodes[1].pid)
            if (args := cmdline(pid).split()) and args[0].endswith("/raylet/raylet")
        )  # fmt: skip
        os.kill(raylet, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while alive(raylet) and time.monotonic() < deadline:
            time.sleep(0.2)
        end_group(self.nodes[1])


def ensure_ray_token() -> None:
    """A Ray token for ``ray start`` with token auth: Ray's own, made where none exists
    yet (a fresh machine whose first Ray is this cluster's head)."""
    subprocess.run([str(BIN / "ray"), "get-auth-token", "--generate"], capture_output=True,
                   check=True, timeout=120, env={**os.environ, "RAY_ADDRESS": ""})  # fmt: skip


@contextlib.contextmanager
def two_nodes(
    logs: Path, *, fast_death: bool = True, second_wrap: list[str] | None = None
) -> Iterator[Cluster]:
    """A head and a second node on loopback, two CPUs each (the head told to notice a
    dead node fast, ``FAST_NODE_DEATH``, unless ``fast_death`` is False; the second node
    started through ``second_wrap``); ended however the test went, and checked to leave
    no process behind."""
    ensure_ray_token()
    temps = [tempfile.mkdtemp(prefix="gwh", dir="/tmp"), tempfile.mkdtemp(prefix="gww", dir="/tmp")]
    port = free_port()
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        head = ["--head", "--port", str(port), "--include-dashboard=false",
                "--dashboard-port", str(free_port())]  # fmt: skip
        nodes.append(
            start_node(
                head, temps[0], logs / "head.log", gpus=0, env=FAST_NODE_DEATH if fast_death else {}
            )
        )
        wait_started(nodes[0], logs / "head.log", "ray start --head")
        second = ["--address", f"127.0.0.1:{port}"]
        nodes.append(start_node(second, temps[1], logs / "second.log", gpus=0, wrap=second_wrap))
        wait_started(nodes[1], logs / "second.log", "ray start --address (second node)")
        yield Cluster(f"127.0.0.1:{port}", temps, nodes, logs)
    finally:
        end_nodes(nodes, temps)


def end_nodes(nodes: list[subprocess.Popen[bytes]], temps: list[str]) -> None:
    """End each node's process group (last started first), end any Ray process that left
    its group, remove the nodes' temp folders, and fail if a process had outlived its
    group."""
    for p in reversed(nodes):
        end_group(p)
    time.sleep(1)
    left = procs_of(temps)
    for line in left:  # a process that left the group: end it by its own id
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    for t in temps:
        shutil.rmtree(t, ignore_errors=True)
    assert not left, "Ray processes outlived their node's process group:\n" + "\n".join(left)


def held_on_second_node(
    proc: subprocess.Popen[str], url: str, cl: Cluster, ready: Any, within: float = 300
) -> list[Any]:
    """Poll the store at ``url`` until ``ready(the running runs on the second node)``;
    those runs. The tests hold their trials at a step (``orchestrator.sweep.trainable.HOLD_ENV``)
    until they have acted on the node, so this waits on the trials' progress, not on the
    clock: ``within`` only bounds a sweep that never gets there."""
    from gapwatch.store import StoreError, open_store

    deadline = time.monotonic() + within
    st = None
    while True:
        assert proc.poll() is None, f"the sweep ended early:\n{proc.stdout.read()}"  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"the second node's trials not ready in {within} s"
        try:
            st = st or open_store(url, read_only=True)
            runs = st.runs()
        except StoreError:  # being created this moment
            time.sleep(0.3)
            continue
        there = cl.runs_on_second(runs)
        if len(there) == 2 and ready(there):
            return there
        time.sleep(0.2)


def finish_sweep(proc: subprocess.Popen[str], within: float = 150) -> str:
    """Wait for a sweep's driver to end (killed after ``within`` s); its output, which must
    show success and no traceback."""
    try:
        out, _ = proc.communicate(timeout=within)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    return out
