"""Regenerate db/migrations/versions/0001_initial.py from harness/store/models.py.

No store has shipped yet, so a model change is followed by regenerating the initial migration
rather than by adding a second one:

    .venv/bin/python db/regenerate_initial.py

It autogenerates against an empty SQLite database, then formats the file with ruff.
tests/test_store.py checks that the migrated schema matches the models.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from alembic import command
from sqlalchemy import create_engine

from harness.store.session import MIGRATIONS_DIR, alembic_config

INITIAL = MIGRATIONS_DIR / "versions" / "0001_initial.py"


def main() -> None:
    later = sorted(path.name for path in INITIAL.parent.glob("*.py") if path != INITIAL)
    if later:
        sys.exit(
            f"db/migrations/versions also holds {', '.join(later)}: delete those to fold them into "
            "0001 (when no store has them yet), or add a migration instead of regenerating"
        )
    INITIAL.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        engine = create_engine(f"sqlite:///{Path(scratch) / 'empty.sqlite'}")
        with engine.connect() as connection:
            command.revision(alembic_config(connection), message="initial", autogenerate=True, rev_id="0001")
        engine.dispose()
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    subprocess.run([ruff, "format", "--quiet", str(INITIAL)], check=True)
    subprocess.run([ruff, "check", "--quiet", "--fix", str(INITIAL)], check=True)
    print(f"wrote {INITIAL}")


if __name__ == "__main__":
    main()
