#!/bin/sh
# gearmand's libpq queue taken over by the postgres store. Debian's gearmand
# 1.1.20 with -q Postgres writes its queue table (high, normal, low, a
# unique "-", empty uniques, a NUL in a payload, an epoch job) into a
# PostgreSQL of the test's own (tests/lib/pg.sh) and is killed with
# SIGKILL; gearmand started again on the database is the reference for the
# jobs (its table copied first; its replay loses the priorities, so their
# order comes from the rows). dsjobd --store postgres on the same database
# logs how many jobs it took in, runs every job once with its payload,
# each function's by priority then as written, the epoch job not before
# its time;
# the table is left renamed; a second start takes nothing in again;
# --libpq-table names another table.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

if [ ! -x "$GEARMAND" ] || ! "$GEARMAND" --help 2>&1 | grep -q -- --libpq-conninfo; then
    echo "1..0 # SKIP no gearmand with a Postgres queue at $GEARMAND"
    exit 0
fi
pg_test_start
dir=$T
GDSN="host=127.0.0.1 port=$PG_PORT user=postgres dbname=dsjob"

# The same client and worker as t_gearmand_queue.sh, kept in that file.
sed -n "/^cat >\"\$dir\/client.py\" <<'PY'\$/,/^PY\$/p" "$top_srcdir/tests/integ/t_gearmand_queue.sh" |
    sed '1d;$d' >"$dir/client.py"
sed -n "/^cat >\"\$dir\/worker.py\" <<'PY'\$/,/^PY\$/p" "$top_srcdir/tests/integ/t_gearmand_queue.sh" |
    sed '1d;$d' >"$dir/worker.py"

server_start gearmand -q Postgres --libpq-conninfo="$GDSN" || exit 1
when=$("$PYTHON" "$dir/client.py" "$SERVER_PORT")
ok $? "gearmand 1.1.20 took 8 background jobs into its Postgres queue (epoch job at $when)"
server_kill9
is "$(q 'SELECT count(*) FROM queue')" 8 "after kill -9 its table holds 8 rows"
q 'CREATE TABLE queue_copy AS SELECT * FROM queue' >/dev/null
# The order the rows call for: by priority, then as written (gearmand's own
# libpq replay, below, loses the priorities: it reads its rows in binary
# and parses them as text, so it is the reference for the jobs only).
# Both functions' rows in one query and one python: "FUNCTION \xDATA" lines.
q "SELECT function_name || ' ' || data FROM queue WHERE function_name IN ('q_a', 'q_b')
   AND when_to_run = 0 ORDER BY function_name, priority, ctid" | "$PYTHON" -c '
import sys
out = {"q_a": [], "q_b": []}
for l in sys.stdin.read().split("\n"):
    if l:
        f, d = l.split(" ", 1)
        out[f].append(repr(bytes.fromhex(d[2:])))
for f, lines in out.items():
    with open(sys.argv[1] + "." + f, "w") as w:
        w.write("".join(x + "\n" for x in lines))' "$dir/want"

server_start gearmand -q Postgres --libpq-conninfo="$GDSN" || exit 1
"$PYTHON" "$dir/worker.py" "$SERVER_PORT" 8 >"$dir/ref.out"
server_stop
q 'DELETE FROM queue' >/dev/null
q 'INSERT INTO queue SELECT * FROM queue_copy' >/dev/null
q 'DROP TABLE queue_copy' >/dev/null

pgd_start a --verbose NOTICE
ok $? "dsjobd --store postgres starts on gearmand's database"
grep -q "took 8 jobs of gearmand's queue table queue in; the table is now queue_dsjob_import" "$(pgd_log a)"
ok $? "and logs how many jobs it took in, and the table's new name"
"$PYTHON" "$dir/worker.py" "$(pgd_port a)" 8 >"$dir/ds.out"
ok $? "a worker runs them"
diag "gearmand's replay:"; sed 's/^/#   /' "$dir/ref.out"
diag "dsjobd's:"; sed 's/^/#   /' "$dir/ds.out"
jobs_of() { grep -v '^after' "$1" | cut -d' ' -f2- | sort; }
is "$(jobs_of "$dir/ds.out")" "$(jobs_of "$dir/ref.out")" \
    "dsjobd ran the same 8 jobs as gearmand's own replay, payloads and all"
is "$(jobs_of "$dir/ds.out" | uniq -d)" "" "each once"
for f in q_a q_b; do
    is "$(grep " $f " "$dir/ds.out" | grep -v epoch | cut -d' ' -f3-)" "$(cat "$dir/want.$f")" \
        "$f's jobs in their rows' order: high, normal in submission order, low"
done
t=$(grep epoch "$dir/ds.out" | cut -d' ' -f1)
[ -n "$t" ] && [ "$t" -ge "$when" ]
ok $? "the epoch job ran at its time ($t >= $when), not before"
is "$(tail -1 "$dir/ds.out")" "after: NO_JOB" "then there is no job left"
pgd_stop a
is "$(q 'SELECT count(*) FROM queue_dsjob_import')" 8 "gearmand's table is kept, renamed, with its 8 rows"
is "$(q 'SELECT count(*) FROM dsjob.jobs WHERE state = 0')" 0 "no live job is left in dsjob.jobs"
pgd_start b --verbose NOTICE
! grep -q "took .* jobs of gearmand" "$(pgd_log b)"
ok $? "a second start takes nothing in again"
pgd_stop b

server_start gearmand -q Postgres --libpq-conninfo="$GDSN" --libpq-table=other_q || exit 1
"$PYTHON" "$dir/client.py" "$SERVER_PORT" >/dev/null
server_kill9
pgd_start c --verbose NOTICE --libpq-table=other_q
grep -q "took 8 jobs of gearmand's queue table other_q in" "$(pgd_log c)"
ok $? "with --libpq-table=other_q its 8 jobs are taken in"
pgd_stop c
done_testing
