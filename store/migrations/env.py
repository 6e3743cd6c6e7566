"""Alembic environment: always run on the connection ``store.engine`` hands over.

``store.engine.upgrade`` puts an open connection (already inside a transaction that holds
the store's write lock) in ``config.attributes["connection"]``; nothing here reads an ini
file or a URL, so migrations run the same from any working directory.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "gapwatch migrations run through store.open_store / `gapwatch db upgrade`, "
        "not the alembic command line"
    )
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
