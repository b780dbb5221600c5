"""A fresh database on the session's PostgreSQL server (the `postgres_url` fixture), one per
test or module that needs its own."""

from __future__ import annotations

import uuid

from sqlalchemy import create_engine, text


def fresh_database(server_url: str, prefix: str) -> str:
    """Create database `<prefix>_<random>` on the server and return its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return server_url.rsplit("/", 1)[0] + "/" + name
