"""``local.db`` over apsw: opening, migrations and the Catalog adapter."""

from memory_core.adapters.sqlite.catalog import SqliteCatalog
from memory_core.adapters.sqlite.database import (
    SCHEMA_VERSION,
    migrate,
    open_database,
    schema_version,
    storage_errors,
    write_transaction,
)

__all__ = [
    "SCHEMA_VERSION",
    "SqliteCatalog",
    "migrate",
    "open_database",
    "schema_version",
    "storage_errors",
    "write_transaction",
]
