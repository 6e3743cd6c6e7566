"""A private PostgreSQL server for tests and benchmarks that stop and start the database.

The machine's shared server (127.0.0.1:5432) is used by other tests at the same time, so
an outage is played on a server of our own: ``initdb`` in a temporary directory, ``pg_ctl``
on a free port (loopback only, trust auth, fsync off). As root, the PostgreSQL commands
run as the ``postgres`` user (``initdb`` refuses root). ``PrivatePostgres.available()``
says why one cannot be made here, if it cannot.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def _bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    return Path(dirs[-1]) if dirs else None


def _every_core() -> None:
    """The server may run on any core, whatever the process starting it is pinned to (the
    benchmark pins its driver to one)."""
    os.sched_setaffinity(0, range(os.cpu_count() or 1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """One throwaway PostgreSQL cluster; ``url`` while it runs, ``stop()`` / ``start()``."""

    USER = "gw"

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="gw-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.root.chmod(0o755)

    @staticmethod
    def available() -> str | None:
        """None where a private server can be made, else why not (one line)."""
        if _bindir() is None:
            return "no PostgreSQL server binaries (pg_ctl, initdb) on this machine"
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return "running as root without a 'postgres' user to run initdb as"
            if shutil.which("runuser") is None:
                return "running as root without runuser to run initdb as 'postgres'"
        return None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        assert self.bindir is not None
        cmd = [*self._as, str(self.bindir / tool), *args]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120,
                             preexec_fn=_every_core)  # fmt: skip
        if res.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed: {res.stderr.strip()[-500:]} {log[-500:]}")

    def init(self) -> PrivatePostgres:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", self.USER,
                  "--no-sync", "-E", "UTF8")  # fmt: skip
        return self.start()

    def start(self) -> PrivatePostgres:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        return self.init()

    def __exit__(self, *_exc: object) -> None:
        self.destroy()
