#!/bin/sh
# Schema dsjob's versions on the postgres store (--store postgres): a
# database made by an older dsjobd is upgraded in place by the steps beside
# the schema, to exactly what a fresh start makes, keeping its jobs; a
# newer one is refused by name. Against a PostgreSQL 15 of the test's own
# (tests/lib/pg.sh).
#
# Asserts: a database with version 1 (tests/integ/pg_schema_v1.sql, as
# dsjobd 0.1.0 made it) holding a live job and a dead job of a server
# start that is over, a retry setting and a job from dsjob.submit is
# upgraded by dsjobd's start to version 5 (dsjob.servers, jobs_owner on
# live rows, jobs_ended_owner; the deadline column; dsjob.batches, the batch
# column and its functions; the key column k and its indexes); pg_dump --schema-only of it equals that
# of a database dsjobd made fresh; the old live job (its lease run out)
# runs on a worker, the old dead job is in the dead set with its text,
# the retry setting holds; a database whose version is newer than
# dsjobd's stops dsjobd at start with a message naming both versions,
# and leaves the database as it was.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start
dsn() {
    _n=$1
    shift
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$_n")" -t 20000 "$@"
}

# --- a version 1 database with jobs in it ---
pg_psql -f "$top_srcdir/tests/integ/pg_schema_v1.sql" >"$T/v1.log" 2>&1
ok $? "schema dsjob version 1 made from pg_schema_v1.sql"
is "$(q "SELECT value FROM dsjob.meta WHERE key = 'schema_version'")" 1 "its meta says version 1"
# The dead job failed minutes ago: --dead-max-age drops one a week old.
q "INSERT INTO dsjob.jobs (handle, func, data, owner, lease_until)
   VALUES ('H:old.7:1', 'sch_live', 'old-live', 'H:old.7', now() - interval '1 minute');
   INSERT INTO dsjob.jobs (handle, func, data, state, attempts, first_fail, last_fail, result, owner)
   VALUES ('H:old.7:2', 'sch_dead', 'old-dead', 1, 3, extract(epoch FROM now())::bigint - 200,
           extract(epoch FROM now())::bigint - 100, 'old failure', 'H:old.7');
   INSERT INTO dsjob.funcs VALUES ('sch_live', 5, 100, 1000);" >/dev/null
h_sql=$(q "SELECT dsjob.submit('sch_live', 'by-sql'::bytea)")
is "$(q "SELECT count(*) FROM dsjob.jobs")" 3 "it holds a live job and a dead one of start H:old.7, and $h_sql"

# --- dsjobd upgrades it ---
pgd_start a --max-dead 10 --verbose NOTICE
ok $? "dsjobd starts on it"
is "$(q "SELECT value FROM dsjob.meta WHERE key = 'schema_version'")" 5 "and upgrades it to version 5"
is "$(q "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'dsjob' AND table_name = 'jobs' AND column_name = 'deadline'")" 1 \
    "dsjob.jobs has the deadline column (version 3)"
is "$(q "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'dsjob' AND table_name = 'jobs' AND column_name = 'batch'")" 1 \
    "dsjob.jobs has the batch column, and dsjob.batches is there (version 4): $(q "SELECT to_regclass('dsjob.batches')")"
is "$(q "SELECT count(*) FROM pg_indexes WHERE schemaname = 'dsjob' AND indexname IN ('jobs_key', 'jobs_key_ready')")" 2 \
    "dsjob.jobs has the key column's two indexes (version 5)"
is "$(q "SELECT count(*) FROM dsjob.servers")" 1 "dsjob.servers lists the running start (H:old.7 was over and left it)"
case $(q "SELECT indexdef FROM pg_indexes WHERE schemaname = 'dsjob' AND indexname = 'jobs_owner'") in
*"state = 0"*) r=0 ;;
*) r=1 ;;
esac
ok $r "jobs_owner covers live rows only"
is "$(q "SELECT count(*) FROM pg_indexes WHERE schemaname = 'dsjob' AND indexname = 'jobs_ended_owner'")" 1 \
    "jobs_ended_owner exists"

# The upgraded schema is what a fresh start makes.
# FILE_COPY: template1 copied as files (a checkpoint), not written again
# through the WAL block by block (the default), a fraction of the CPU.
q "CREATE DATABASE fresh STRATEGY FILE_COPY" >/dev/null
"$DSJOBD" -L 127.0.0.1 -p 0 --port-file "$T/fresh.port" -l "$T/fresh.log" --store postgres \
    --pg-dsn "host=127.0.0.1 port=$PG_PORT dbname=fresh user=postgres connect_timeout=5" &
fresh=$!
track $fresh
poll_s 10 test -s "$T/fresh.port"
ok $? "dsjobd starts on an empty database"
kill -TERM $fresh 2>/dev/null
wait $fresh 2>/dev/null
dump() { # dump DATABASE: schema dsjob as pg_dump writes it, without comments, blank lines
    # and the random \restrict keys of newer pg_dumps
    "$PG_BIN/pg_dump" -h 127.0.0.1 -p "$PG_PORT" -U postgres --schema-only -n dsjob "$1" |
        grep -v -e '^--' -e '^$' -e '^.restrict ' -e '^.unrestrict '
}
dump dsjob >"$T/upgraded.sql"
dump fresh >"$T/fresh.sql"
[ -s "$T/fresh.sql" ] && cmp -s "$T/upgraded.sql" "$T/fresh.sql"
ok $? "pg_dump --schema-only of the upgraded schema equals that of a fresh one ($(wc -l <"$T/fresh.sql" | tr -d ' ') lines)"
diff "$T/upgraded.sql" "$T/fresh.sql" | head -20 | sed 's/^/# /'

# Its jobs and settings are still there.
dead=$(dsn a dead list sch_dead --format tsv 2>&1)
case $dead in *H:old.7:2*"old failure"*) r=0 ;; *) r=1 ;; esac
ok $r "the old dead job is in a's dead set with its text ($(echo "$dead" | head -1 | cut -c1-80))"
touch "$T/ran"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f sch_live -- sh -c 'cat >> "$1"; echo >> "$1"' sh "$T/ran" \
    2>/dev/null &
track $!
both_ran() { grep -qx old-live "$T/ran" && grep -qx by-sql "$T/ran"; }
poll_s 15 both_ran
ok $? "the old live job (its lease run out) and the dsjob.submit one run on a worker"
is "$(q "SELECT retries || ' ' || backoff_base_ms || ' ' || backoff_max_ms FROM dsjob.funcs WHERE name = 'sch_live'")" \
    "5 100 1000" "the retry setting is kept"
reap
pgd_stop a
ok $? "dsjobd stops on SIGTERM"

# --- a newer schema is refused by name ---
q "UPDATE dsjob.meta SET value = '6' WHERE key = 'schema_version'" >/dev/null
out=$(timeout -k 2 20 "$DSJOBD" -L 127.0.0.1 -p 0 --port-file "$T/newer.port" -l "$T/newer.log" \
    --store postgres --pg-dsn "$PG_DSN" 2>&1)
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ ! -s "$T/newer.port" ]
ok $? "dsjobd does not start on a schema newer than its own (exit $rc)"
all=$(printf '%s\n' "$out"; cat "$T/newer.log" 2>/dev/null)
case $all in *"version 6"*"newer"*"5"*) r=0 ;; *) r=1 ;; esac
ok $r "and says which versions ($(printf '%s\n' "$all" | grep -m1 'version 6' | cut -c1-150))"
is "$(q "SELECT value FROM dsjob.meta WHERE key = 'schema_version'")" 6 "the database is left as it was"
done_testing
