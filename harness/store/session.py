"""Opening the store: an engine for any SQLAlchemy URL, the schema brought to Alembic's head, and
one transaction per `Store.session()`.

SQLite gets WAL (readers do not block the writer), a busy timeout, foreign keys, and
`BEGIN IMMEDIATE` for every transaction. pysqlite would otherwise begin a transaction only at
the first write, so a read-then-write (claiming a run, numbering a revision) would not be
atomic, and two deferred transactions that both try to write fail at once instead of waiting.
The same BEGIN makes SQLite's DDL transactional, so a failed migration leaves nothing behind.

Migrations run inside the transaction that checks the schema revision (under a lock on
PostgreSQL), so processes that open a fresh store together create its schema once.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool
from typing_extensions import Self

from harness.config import MIGRATIONS_DIR, default_store_dir, get_settings
from harness.errors import HarnessError

SQLITE_BUSY_TIMEOUT_MS = 30_000
# Arbitrary constant: the key of the PostgreSQL advisory lock held while checking and migrating.
POSTGRES_MIGRATION_LOCK = 0x6861726E657373

logging.getLogger("alembic").setLevel(logging.WARNING)


@dataclass
class Store:
    """An open store. `previous_revision` is the schema revision found when it was opened
    (None for an empty database); `schema_revision` is the one it is at now (Alembic's head)."""

    engine: Engine
    url: str
    schema_revision: str
    previous_revision: str | None

    @property
    def migrated(self) -> bool:
        return self.previous_revision != self.schema_revision

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: commits when the block ends, rolls back if it raises.

        Objects stay readable after the commit (expire_on_commit=False) so a caller can print
        what it registered; load relationships inside the block.
        """
        with Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """`with open_store(url) as store:` disposes the engine when the block ends."""
        self.close()


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's Config, built in code so that migrations work from any working directory."""
    config = Config(stdout=io.StringIO())
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def open_store(url: str | None = None, *, read_only: bool = False, create: bool = True) -> Store:
    """Open the store at `url` (None: settings.db, by default harness.config.default_store_dir),
    creating or upgrading its schema. Raises HarnessError, leaving no new file behind, when it
    cannot be opened; an empty `url` is an error, never the default store.

    `read_only` (the commands that only read): a SQLite file must exist already (a mistyped URL
    creates nothing), and one whose folder or file this process cannot write is opened read-only
    (SQLite's `mode=ro`, `immutable` when the folder cannot hold WAL's companion files).
    `create=False` (the commands that evaluate revisions, which a new store cannot hold): a SQLite
    file must exist already too. A writer on a SQLite file that it cannot write is refused in
    words (the store is read-only here), not with SQLite's `unable to open database file`."""
    if url is not None and not url.strip():
        raise HarnessError("the store URL is empty: give --db a URL such as sqlite:///PATH")
    url = url or get_settings().db
    parsed = _parse_url(url)
    shown = parsed.render_as_string(hide_password=True)
    sqlite_file = _sqlite_file(parsed)
    created_file = False
    unwritable = False
    if sqlite_file is not None:
        if sqlite_file.parent == default_store_dir() and not read_only:
            sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        _check_sqlite_path(sqlite_file, shown)
        if (read_only or not create) and not sqlite_file.exists():
            raise HarnessError(
                f"no store at {sqlite_file}: check --db/HARNESS_DB, or create one with `harness init`"
            )
        created_file = not sqlite_file.exists()
        writable = os.access(sqlite_file.parent, os.W_OK) and (
            created_file or os.access(sqlite_file, os.W_OK)
        )
        if not writable and not read_only and created_file:
            raise HarnessError(f"cannot create store {sqlite_file}: its folder cannot be written")
        if not writable and not read_only:
            raise HarnessError(
                f"store {sqlite_file} is read-only here (the file or its folder cannot be written): "
                "this command writes to it; list, show, leaderboard and history can read it"
            )
        unwritable = read_only and not writable
        if unwritable:
            parsed = _read_only_sqlite_url(sqlite_file)
    engine = _create_engine(parsed, shown, read_only=unwritable)
    try:
        previous, head = _upgrade_to_head(engine, shown, read_only=unwritable)
    except BaseException:
        engine.dispose()
        if created_file:
            _remove_sqlite_files(sqlite_file)
        raise
    store = Store(engine=engine, url=shown, schema_revision=head, previous_revision=previous)
    from harness.store.tasks import use_stored_tasks

    try:
        with store.session() as session:
            use_stored_tasks(session)
    except BaseException:
        store.close()
        raise
    return store


def _remove_sqlite_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        companion = Path(f"{path}{suffix}")
        if companion.is_file():
            companion.unlink()


def _parse_url(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError:
        raise HarnessError(f"cannot open store: {url!r} is not a database URL") from None


def _sqlite_file(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.database.startswith("file:"):  # URI filenames: leave them to SQLite
        return None
    return Path(url.database)


def _check_sqlite_path(path: Path, shown: str) -> None:
    parent = path.parent
    if not parent.exists():
        raise HarnessError(f"cannot open store {shown}: directory {parent} does not exist")
    if not parent.is_dir():
        raise HarnessError(f"cannot open store {shown}: {parent} is not a directory")
    if path.is_dir():
        raise HarnessError(f"cannot open store {shown}: {path} is a directory")


def _read_only_sqlite_url(path: Path) -> URL:
    """A URI filename that SQLite opens without writing: WAL needs its -shm file beside the
    store, so where the folder is not writable the file is read as immutable."""
    flags = "mode=ro" if os.access(path.parent, os.W_OK) else "mode=ro&immutable=1"
    return make_url(f"sqlite:///file:{quote(str(path.resolve()))}?{flags}&uri=true")


def _create_engine(url: URL, shown: str, *, read_only: bool = False) -> Engine:
    options = {}
    if url.get_backend_name() == "sqlite" and _sqlite_file(url) is None and not read_only:
        options["poolclass"] = StaticPool  # one in-memory database shared by all sessions
    try:
        engine = create_engine(url, **options)
    except NoSuchModuleError:
        raise HarnessError(f"cannot open store {shown}: unknown database kind {url.drivername!r}") from None
    except ImportError as exc:
        raise HarnessError(f"cannot open store {shown}: its driver is not installed ({exc})") from None
    except (ArgumentError, TypeError, ValueError) as exc:
        raise HarnessError(f"cannot open store {shown}: {_first_line(exc)}") from None
    if engine.dialect.name == "sqlite" and read_only:
        event.listen(engine, "connect", _configure_read_only_sqlite_connection)
    elif engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _configure_sqlite_connection)
        event.listen(engine, "begin", _begin_immediate)
    return engine


def _configure_read_only_sqlite_connection(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None
    dbapi_connection.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


def _configure_sqlite_connection(dbapi_connection, _record) -> None:
    dbapi_connection.isolation_level = None  # pysqlite must not emit BEGIN; _begin_immediate does
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.close()


def _begin_immediate(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _upgrade_to_head(engine: Engine, shown: str, *, read_only: bool = False) -> tuple[str | None, str]:
    """Bring the schema to head; returns (revision found, head). A read-only store must be at
    head already."""
    config = alembic_config()
    scripts = ScriptDirectory.from_config(config)
    head = scripts.get_current_head()
    try:
        with engine.connect() as connection, connection.begin():
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": POSTGRES_MIGRATION_LOCK}
                )
            found = MigrationContext.configure(connection).get_current_heads()
            for revision in found:
                if not _is_known(scripts, revision):
                    raise HarnessError(
                        f"store schema is newer than this harness: {shown} is at schema revision "
                        f"{revision}, this harness knows up to {head}; upgrade the harness"
                    )
            if tuple(found) != (head,) and read_only:
                raise HarnessError(
                    f"store {shown} is read-only here and at schema {', '.join(found) or 'none'}, not {head}: "
                    "run `harness init` where it can be written"
                )
            if tuple(found) != (head,):
                command.upgrade(alembic_config(connection), "head")
    except HarnessError:
        raise
    except DBAPIError as exc:
        raise HarnessError(f"cannot open store {shown}: {_first_line(exc.orig)}") from None
    except (SQLAlchemyError, CommandError, OSError) as exc:
        raise HarnessError(f"cannot open store {shown}: {_first_line(exc)}") from None
    return (found[0] if found else None), head


def postgres_socket_directories(url: str | URL) -> list[str]:
    """The unix socket directories through which a PostgreSQL store's server may be reached, to
    hide from sandboxed children (a network namespace cuts TCP but not unix sockets): the URL's
    socket host (`?host=/dir` or a host starting with "/"), PGHOST's, and the usual default
    directories (Debian's libpq and psycopg's wheels use /var/run/postgresql; upstream builds use
    /tmp, which the sandbox hides anyway, so it is not listed), the defaults even for a TCP URL,
    since a local server also listens there. Only directories that exist; [] for other stores."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.get_backend_name() != "postgresql":
        return []
    query_hosts = parsed.query.get("host", ())
    hosts = [unquote(parsed.host or ""), *([query_hosts] if isinstance(query_hosts, str) else query_hosts)]
    hosts.append(os.environ.get("PGHOST", ""))
    candidates = [host for value in hosts for host in value.split(",") if host.startswith("/")]
    candidates += ["/var/run/postgresql", "/run/postgresql"]
    found: list[str] = []
    for candidate in candidates:
        path = Path(candidate).resolve()
        if path != Path("/tmp") and path.is_dir() and str(path) not in found:
            found.append(str(path))
    return found


def _is_known(scripts: ScriptDirectory, revision: str) -> bool:
    try:
        return scripts.get_revision(revision) is not None
    except CommandError:
        return False


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
