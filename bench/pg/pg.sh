# bench/pg/pg.sh: a throwaway PostgreSQL 15 cluster for bench/pg/run (POSIX sh,
# to be sourced). pg_start makes a cluster in a fresh temporary directory,
# listening on 127.0.0.1 (a free port) and on a unix socket in that directory
# only, with pg_stat_statements loaded (track = all) and PostgreSQL's default
# durability (fsync on, synchronous_commit on, full_page_writes on).
#
#   pg_start             sets PG_DIR, PG_PORT, PG_PID (the postmaster), PG_LOG
#   pg_createdb DB       a database with the pg_stat_statements extension
#   pg_psql DB [ARG]...  psql -X -q -At on DB, stops at the first error
#   pg_stmts_reset DB    pg_stat_statements_reset()
#   pg_stmts DB          "CLIENT ALL": statement calls in DB since the
#                        reset: those the clients sent (top-level, and not a
#                        foreign-key check, "... FOR KEY SHARE OF x", which
#                        pg_stat_statements counts as top-level), and all of
#                        them (nested PL/pgSQL ones too); neither counts
#                        pg_stat_statements' own queries or those marked
#                        /* bench */
#   pg_stop              fast shutdown of PG_PID (SIGINT), SIGKILL after 20 s,
#                        and removes PG_DIR
#
# As root, initdb and the server run as the postgres user (runuser), in a
# directory chowned to it; as anyone else they run as that user. The
# superuser is called postgres either way and connections are trusted, so
# the DSN is "host=127.0.0.1 port=$PG_PORT dbname=DB user=postgres".
# Environment: PG_BIN (default /usr/lib/postgresql/15/bin), TMPDIR.

: "${PG_BIN:=/usr/lib/postgresql/15/bin}"
PG_DIR=
PG_PORT=
PG_PID=
PG_LOG=

pg_as() { # runs "$@" as the cluster's owner
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_start() {
    [ -x "$PG_BIN/postgres" ] || { echo "pg.sh: no PostgreSQL in $PG_BIN" >&2; return 1; }
    # at the top of TMPDIR: the postgres user must reach it through its parents
    PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/dsjob-pg.XXXXXX") || return 1
    chmod 755 "$PG_DIR"
    [ "$(id -u)" = 0 ] && chown postgres: "$PG_DIR"
    PG_LOG=$PG_DIR/log
    if ! pg_as "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust \
        -E UTF8 --no-locale >"$PG_DIR/initdb.out" 2>&1; then
        cat "$PG_DIR/initdb.out" >&2
        echo "pg.sh: initdb failed" >&2
        return 1
    fi
    cat >>"$PG_DIR/data/postgresql.conf" <<EOF
# bench/pg/pg.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_DIR'
max_connections = 200
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.max = 10000
pg_stat_statements.track_utility = on
log_min_messages = warning
log_checkpoints = off
EOF
    tries=0
    while [ $tries -lt 8 ]; do
        tries=$((tries + 1))
        # a port in 20000..59999 that nothing listens on yet; a race with
        # another program only costs a retry
        PG_PORT=$((20000 + ($$ * 7919 + tries * 104729 + $(date +%N | sed 's/^0*//;s/^$/0/')) % 40000))
        if pg_as "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_LOG" -w -t 30 \
            -o "-p $PG_PORT" start >/dev/null 2>&1; then
            PG_PID=$(head -1 "$PG_DIR/data/postmaster.pid")
            return 0
        fi
    done
    tail -20 "$PG_LOG" >&2
    echo "pg.sh: PostgreSQL did not start" >&2
    return 1
}

pg_psql() {
    db=$1
    shift
    "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres \
        -d "$db" "$@"
}

pg_createdb() {
    pg_psql postgres -c "CREATE DATABASE $1" &&
        pg_psql "$1" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
}

pg_stmts_reset() {
    pg_psql "$1" -c "SELECT pg_stat_statements_reset() /* bench */" >/dev/null
}

pg_stmts() {
    pg_psql "$1" -F ' ' -c "SELECT coalesce(sum(calls) FILTER (WHERE toplevel
                AND s.query NOT LIKE '%FOR KEY SHARE OF x'), 0),
            coalesce(sum(calls), 0)
        FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = current_database()
          AND s.query NOT LIKE '%pg_stat_statements%'
          AND s.query NOT LIKE '%/* bench */%' /* bench */"
}

# pg_stmts_detail DB: calls and mean ms per statement (its first 70 characters).
pg_stmts_detail() {
    pg_psql "$1" -F ' | ' -c "SELECT calls, round(mean_exec_time::numeric, 3),
            regexp_replace(left(s.query, 70), '\s+', ' ', 'g')
        FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = current_database() AND toplevel
          AND s.query NOT LIKE '%pg_stat_statements%'
          AND s.query NOT LIKE '%/* bench */%' ORDER BY calls DESC LIMIT 8 /* bench */"
}

pg_stop() {
    [ -n "$PG_PID" ] || return 0
    kill -INT "$PG_PID" 2>/dev/null
    n=0
    while kill -0 "$PG_PID" 2>/dev/null && [ $n -lt 200 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    kill -0 "$PG_PID" 2>/dev/null && kill -KILL "$PG_PID" 2>/dev/null
    PG_PID=
    [ -n "$PG_DIR" ] && rm -rf "$PG_DIR"
    PG_DIR=
}
