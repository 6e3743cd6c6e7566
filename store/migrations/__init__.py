"""Alembic migrations shipped inside the package; run by ``store.engine`` (no alembic.ini)."""
