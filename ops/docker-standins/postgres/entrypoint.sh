# Initialise the database on first start (as postgres:16-alpine does), then run the server in the foreground.
set -e
BIN=/usr/lib/postgresql/15/bin
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres "$PGDATA" /var/run/postgresql && chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  echo "$POSTGRES_PASSWORD" > /tmp/pwfile && chown postgres /tmp/pwfile
  su postgres -c "$BIN/initdb -D $PGDATA -U $POSTGRES_USER --pwfile=/tmp/pwfile --encoding=UTF8 --locale=C.UTF-8 --auth-host=scram-sha-256 --auth-local=trust"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  su postgres -c "$BIN/pg_ctl -D $PGDATA -w start -o '-c listen_addresses='"
  su postgres -c "psql -U $POSTGRES_USER -d postgres -c 'CREATE DATABASE \"$POSTGRES_DB\"'"
  su postgres -c "$BIN/pg_ctl -D $PGDATA -w stop"
fi
exec su postgres -c "exec $BIN/postgres -D $PGDATA -c listen_addresses=*"
