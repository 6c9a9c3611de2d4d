"""Read-only SQL over one trace's event table: DuckDB on the in-memory DataFrame, nothing else reachable.

The query runs on a fresh in-memory DuckDB connection that sees one table, ``events`` (the event table,
``traceanalyzer.schema.EVENT_COLUMNS``), with external access off (no file, URL, ``COPY``, ``ATTACH``,
``INSTALL``/``LOAD`` or ``read_csv``/``read_parquet``), extension autoloading off, no temporary folder to spill to, the
configuration locked, one thread and a memory limit. Only a single ``SELECT`` statement is accepted; it is
interrupted after ``TIMEOUT_S`` and at most ``max_rows`` rows (never over ``MAX_ROWS``) are fetched.
"""

from __future__ import annotations

import threading
import time

import duckdb
import pandas as pd

from traceanalyzer import humanize
from traceanalyzer.records import plain

TABLE = "events"
"""The one table a query sees."""
TIMEOUT_S = 10.0
"""A query running longer than this is interrupted."""
MAX_ROWS = 500
"""The most rows a query returns (its ``max_rows`` is capped to this)."""
CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "temp_directory": "",
    "threads": 1,
    "memory_limit": "2GB",
}
"""The connection's settings, locked before the query runs."""


class QueryError(ValueError):
    """A query that is not one read-only SELECT, or that DuckDB refused, failed or interrupted."""


def run(events: pd.DataFrame, sql: str, max_rows: int = 100, timeout_s: float = TIMEOUT_S) -> dict:
    """The rows of one SELECT over ``events``: columns with their types, rows (lists), whether more rows existed."""
    limit = max(1, min(int(max_rows), MAX_ROWS))
    con = duckdb.connect(":memory:", config=CONFIG)
    try:
        con.register(TABLE, events)
        con.execute("SET lock_configuration = true")
        _check_select(con, sql)
        timer = threading.Timer(timeout_s, con.interrupt)
        started = time.monotonic()
        timer.start()
        try:
            result = con.execute(sql)
            rows = result.fetchmany(limit + 1)
        except duckdb.InterruptException:
            raise QueryError(f"the query ran past {humanize.seconds(timeout_s, 0)} and was interrupted") from None
        except duckdb.Error as e:
            raise QueryError(f"DuckDB: {_first_line(e)}") from None
        finally:
            timer.cancel()
        columns = [{"name": d[0], "type": _type(str(d[1]))} for d in result.description]
        return {
            "columns": columns,
            "rows": [[plain(v) for v in row] for row in rows[:limit]],
            "row_count": min(len(rows), limit),
            "more_rows": len(rows) > limit,
            "elapsed_s": round(time.monotonic() - started, 3),
        }
    finally:
        con.close()


def _check_select(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """QueryError unless ``sql`` is exactly one SELECT statement."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(f"DuckDB could not parse the query: {_first_line(e)}") from None
    if len(statements) != 1:
        raise QueryError(f"one SELECT statement per query, not {len(statements)}")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise QueryError(f"only SELECT is allowed (read-only), not {statements[0].type.name}")


def _type(duck: str) -> str:
    """A column's DuckDB type, a category column's ENUM (which lists every value) as ``ENUM`` alone."""
    return "ENUM (text)" if duck.startswith("ENUM(") else duck


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
