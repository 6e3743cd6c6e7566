"""Start the Streamlit server over a store: ``serve`` (what ``gapwatch ui`` calls) and
``running_server`` (a context manager the browser tests, the benchmark and
``tools/screenshot.py`` use: a headless server on a free loopback port, killed on exit).

The store URL reaches the app in ``$GAPWATCH_UI_DB_URL``. A database that does not exist
is refused here, with one line, before any server starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gapwatch.ui.locate import ENV_URL, UIError, check_database, display_url, resolve

APP = Path(__file__).with_name("app.py")


def check(db_url: str) -> None:
    """One-line UIError unless the store exists and opens read-only."""
    check_database(db_url)
    from gapwatch.store import StoreError, open_store

    try:
        open_store(db_url, read_only=True).close()
    except StoreError as exc:
        raise UIError(str(exc)) from exc


def command(port: int, host: str) -> list[str]:
    """The ``streamlit run`` command line (headless, no telemetry, no file watcher)."""
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.headless", "true",
        "--server.port", str(port),
        "--server.address", host,
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--browser.gatherUsageStats", "false",
        "--global.developmentMode", "false",
        "--client.toolbarMode", "minimal",
        "--theme.base", "light",
    ]  # fmt: skip


def _env(db_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env[ENV_URL] = db_url
    env.update(extra or {})
    return env


def serve(db_url: str | None = None, port: int = 8501, host: str = "127.0.0.1") -> None:
    """Run the UI in the foreground until Ctrl-C (the ``gapwatch ui`` command)."""
    url = resolve(db_url)
    check(url)
    shown = display_url(url)
    print(f"gapwatch ui: serving {shown} at http://{host}:{port}/  (Ctrl-C stops)", flush=True)
    proc = subprocess.Popen(command(port, host), env=_env(url))

    def _on_term(signum: int, _frame: object) -> None:  # forward a kill to the server
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        code = _stop(proc)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code not in (0, -signal.SIGINT, -signal.SIGTERM, 130):
        raise UIError(f"the Streamlit server exited with code {code}; see its output above")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """Ask the server to stop (SIGINT, as Ctrl-C does), then make sure it is gone."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Server:
    url: str
    """Base URL of the running app, ending without a slash."""
    proc: subprocess.Popen[bytes]


def wait_healthy(base: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UIError(f"the Streamlit server exited with code {proc.returncode} while starting")
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise UIError(f"the Streamlit server at {base} was not healthy within {timeout_s:.0f} s")


@contextlib.contextmanager
def running_server(
    db_url: str, *, host: str = "127.0.0.1", port: int | None = None, timeout_s: float = 60.0,
    log_path: Path | None = None, env: dict[str, str] | None = None,
) -> Iterator[Server]:  # fmt: skip
    """A headless server over ``db_url`` on a free loopback port; killed on exit."""
    check(db_url)
    port = port or free_port(host)
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(
        command(port, host), env=_env(db_url, env), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    base = f"http://{host}:{port}"
    try:
        wait_healthy(base, proc, timeout_s)
        yield Server(base, proc)
    finally:
        _stop(proc)
        if log_path and not isinstance(log, int):
            log.close()
