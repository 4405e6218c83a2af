#!/usr/bin/env bash
# PostgreSQL on 127.0.0.1 for the multi-worker tests; prints the URL they take, on stdout:
#
#   export IPU_AUTOTUNE_TEST_POSTGRES_URL="$(bash .ci/postgres.sh)"
#
# Idempotent: installs the server only when it is missing (Debian, as root, no stdin), starts
# the first cluster (creating one if there is none), and creates the role and database once.
# Everything else it says goes to stderr. Override with PGPORT, IPU_AUTOTUNE_PG_USER/_PASSWORD/_DB.
set -euo pipefail

USER_NAME="${IPU_AUTOTUNE_PG_USER:-ipu_autotune}"
PASSWORD="${IPU_AUTOTUNE_PG_PASSWORD:-ipu_autotune_ci}"
DB_NAME="${IPU_AUTOTUNE_PG_DB:-ipu_autotune_test}"

say() { echo "postgres.sh: $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi; }

if ! command -v pg_lsclusters >/dev/null 2>&1 || [ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]; then
    say "installing PostgreSQL"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq >&2
    as_root apt-get install -y -qq postgresql </dev/null >&2
fi

# The first cluster (e.g. "15 main 5432 down ..."), or a new one.
cluster="$(pg_lsclusters --no-header 2>/dev/null | head -n 1 || true)"
if [ -z "$cluster" ]; then
    version="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
    say "creating cluster $version/main"
    as_root pg_createcluster "$version" main >&2
    cluster="$(pg_lsclusters --no-header | head -n 1)"
fi
read -r version name port status _ <<<"$cluster"
if [ "$status" != "online" ]; then
    say "starting cluster $version/$name on port $port"
    # Containers often lack the socket folder that the init system would create.
    as_root install -d -o postgres -g postgres -m 2775 /var/run/postgresql
    as_root pg_ctlcluster "$version" "$name" start >&2
fi

# Wait for it to accept connections (a fresh start takes a moment).
for _ in $(seq 1 30); do
    if as_root su postgres -c "psql -p $port -Atqc 'SELECT 1'" >/dev/null 2>&1; then
        break
    fi
    sleep 1
done

psql_admin() { as_root su postgres -c "psql -p $port -v ON_ERROR_STOP=1 -Atq $*" </dev/null; }

if [ "$(psql_admin "-c \"SELECT 1 FROM pg_roles WHERE rolname = '$USER_NAME'\"")" != "1" ]; then
    say "creating role $USER_NAME"
    psql_admin "-c \"CREATE ROLE $USER_NAME LOGIN PASSWORD '$PASSWORD'\"" >&2
else
    psql_admin "-c \"ALTER ROLE $USER_NAME LOGIN PASSWORD '$PASSWORD'\"" >&2
fi
if [ "$(psql_admin "-c \"SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'\"")" != "1" ]; then
    say "creating database $DB_NAME"
    psql_admin "-c \"CREATE DATABASE $DB_NAME OWNER $USER_NAME\"" >&2
fi

url="postgresql://$USER_NAME:$PASSWORD@127.0.0.1:$port/$DB_NAME"
# Check the URL itself works over TCP on loopback (password authentication).
if ! PGPASSWORD="$PASSWORD" PGCONNECT_TIMEOUT=5 psql "postgresql://$USER_NAME@127.0.0.1:$port/$DB_NAME" \
        -Atqc 'SELECT 1' >/dev/null 2>&1; then
    say "PostgreSQL runs but $USER_NAME cannot log in over TCP on 127.0.0.1:$port (check pg_hba.conf)"
    exit 1
fi
say "ready on 127.0.0.1:$port, database $DB_NAME"
echo "$url"
