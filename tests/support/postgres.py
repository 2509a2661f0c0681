"""PostgreSQL faults the tests cause on purpose."""

from __future__ import annotations

from django.db import connections


def drop_backend(pid: int) -> None:
    """End the PostgreSQL backend `pid` from another connection, as a server restart ends every
    session: the next statement on that connection fails once."""
    killer = connections.create_connection("default")
    try:
        with killer.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        killer.close()
