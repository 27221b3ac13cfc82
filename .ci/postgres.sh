#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests: a fresh cluster in a temporary directory, listening
# only on a unix socket in that directory (no TCP port, so nothing to collide with), trust auth,
# fsync off. It exports
#   HARNESS_TEST_POSTGRES_URL=postgresql+psycopg://postgres@/harness?host=<socket dir>
# (tests/conftest.py makes a fresh database per test on that server) and removes everything when
# it stops. Installs Debian's `postgresql` package when no server binaries are found (as root).
#
#   source .ci/postgres.sh                                        # start; stops when the shell exits
#   .ci/postgres.sh .venv/bin/pytest -q tests/test_many_writers.py  # run a command with a server
#
# The server refuses to run as root: as root it runs as the `postgres` user.
# Sourced, it sets an EXIT trap (replacing any earlier one) that stops the server.

_harness_pg_fail() {
  echo ".ci/postgres.sh: $*" >&2
  return 1
}

_harness_pg_bindir() {
  local found
  if found=$(command -v initdb 2>/dev/null); then
    found=$(dirname "$(readlink -f "$found")")
    if [ -x "$found/postgres" ] && [ -x "$found/pg_ctl" ] && [ -x "$found/psql" ]; then
      echo "$found"
      return 0
    fi
  fi
  # Debian keeps the server binaries off PATH, one directory per major version: take the newest.
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$found" ] && [ -x "$found/initdb" ] && [ -x "$found/postgres" ] && [ -x "$found/psql" ]; then
    echo "$found"
    return 0
  fi
  return 1
}

_harness_pg_install() {
  [ "$(id -u)" = 0 ] || _harness_pg_fail "no PostgreSQL server binaries found; install Debian's postgresql package" || return 1
  echo ".ci/postgres.sh: installing Debian's postgresql package" >&2
  local log
  log=$(mktemp)
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -q \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    rm -f "$log"
    _harness_pg_fail "apt-get install postgresql failed"
    return 1
  fi
  rm -f "$log"
}

# As root, run the server's commands as the postgres user (created if missing); otherwise as us.
_harness_pg_as_owner() {
  if [ "$(id -u)" = 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

harness_postgres_start() {
  local bindir
  if ! bindir=$(_harness_pg_bindir); then
    _harness_pg_install || return 1
    bindir=$(_harness_pg_bindir) || { _harness_pg_fail "postgresql installed but initdb not found"; return 1; }
  fi
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin postgres
  fi
  HARNESS_PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/harness-pg.XXXXXX")
  local data="$HARNESS_PG_DIR/data" socket="$HARNESS_PG_DIR/socket"
  mkdir -p "$data" "$socket"
  chmod 755 "$HARNESS_PG_DIR" "$socket"
  chmod 700 "$data"
  [ "$(id -u)" != 0 ] || chown -R postgres: "$HARNESS_PG_DIR"
  if ! _harness_pg_as_owner "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-locale --no-sync \
      >"$HARNESS_PG_DIR/initdb.log" 2>&1; then
    cat "$HARNESS_PG_DIR/initdb.log" >&2
    _harness_pg_fail "initdb failed"
    return 1
  fi
  # No TCP, the socket in our own directory; durability is not wanted for a throwaway server.
  if ! _harness_pg_as_owner "$bindir/pg_ctl" -D "$data" -l "$HARNESS_PG_DIR/server.log" -w -t 60 \
      -o "-c listen_addresses='' -k $socket -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null; then
    cat "$HARNESS_PG_DIR/server.log" >&2
    _harness_pg_fail "the server did not start"
    return 1
  fi
  HARNESS_PG_BINDIR=$bindir
  if ! "$bindir/psql" -q -h "$socket" -U postgres -d postgres -c "CREATE DATABASE harness" >/dev/null; then
    harness_postgres_stop
    _harness_pg_fail "cannot create the database"
    return 1
  fi
  export HARNESS_TEST_POSTGRES_URL="postgresql+psycopg://postgres@/harness?host=$socket"
  echo ".ci/postgres.sh: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $HARNESS_TEST_POSTGRES_URL" >&2
}

harness_postgres_stop() {
  [ -n "${HARNESS_PG_DIR:-}" ] || return 0
  if [ -n "${HARNESS_PG_BINDIR:-}" ] && [ -f "$HARNESS_PG_DIR/data/postmaster.pid" ]; then
    _harness_pg_as_owner "$HARNESS_PG_BINDIR/pg_ctl" -D "$HARNESS_PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$HARNESS_PG_DIR"
  HARNESS_PG_DIR=
  unset HARNESS_TEST_POSTGRES_URL
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  # Sourced: start now, stop when the sourcing shell exits.
  trap harness_postgres_stop EXIT
  harness_postgres_start
else
  set -euo pipefail
  if [ $# -eq 0 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
  fi
  trap harness_postgres_stop EXIT
  harness_postgres_start
  status=0
  "$@" || status=$?
  exit "$status"
fi
