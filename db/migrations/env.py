"""Alembic environment for the store.

The harness builds Alembic's Config in code (harness.store.session.alembic_config) and hands
over an open connection in `config.attributes["connection"]`, already inside a transaction:
the migration then runs in that transaction, under the lock that open_store holds, so two
processes opening a fresh store at once cannot both create the schema. There is no alembic.ini;
run migrations with `harness init`, and regenerate the initial one with db/regenerate_initial.py.
"""

from alembic import context

from harness.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "db/migrations runs on a connection from harness.store.session: use `harness init` "
        "(or db/regenerate_initial.py), not the alembic command line"
    )

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
