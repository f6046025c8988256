#!/bin/sh
# The take of a keyed function on the postgres store reads each key's
# first jobs through the key column's indexes (k, schema version 5), not
# every live row of the function: 10,000 queued jobs of one key and one
# job of another; key_take.sql (store_postgres.c's statement, taken from
# the source tree) run under EXPLAIN ANALYZE with key-concurrency 1 reads
# a few rows of dsjob.jobs, not 10,001, and takes one job of each key.
# dsjob.key_fill keys rows already there, the trigger jobs_keyed the rows
# inserted after, and a separator that changes keys them again. Against a
# PostgreSQL of the test's own (tests/lib/pg.sh).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

if ! perl -MJSON::PP -e 1 2>/dev/null; then
    echo "1..0 # SKIP perl with JSON::PP not found"
    exit 0
fi
pg_test_start a --verbose NOTICE
pgd_stop a

q "INSERT INTO dsjob.jobs (handle, func, uniq, data)
   SELECT 'H:t:big:' || i, 'kf', convert_to('big:' || i, 'UTF8'), '' FROM generate_series(1, 10000) i" \
    >/dev/null
q "INSERT INTO dsjob.jobs (handle, func, uniq, data) VALUES ('H:t:small', 'kf', 'small:1', '')" >/dev/null
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'kf' AND k IS NULL")" 10001 \
    "10,001 rows of kf, no key yet (no server took kf by key)"
is "$(q "SELECT dsjob.key_fill(ARRAY['kf'], ARRAY[':'])")" 10001 "key_fill keys them all"
is "$(q "SELECT dsjob.key_fill(ARRAY['kf'], ARRAY[':'])")" 0 "and again: nothing to do"
is "$(q "SELECT string_agg(convert_from(k, 'UTF8') || '=' || n, ' ' ORDER BY k)
         FROM (SELECT k, count(*) AS n FROM dsjob.jobs WHERE func = 'kf' GROUP BY k) x")" \
    "big=10000 small=1" "two keys: big with 10,000 jobs, small with one"

q "ANALYZE dsjob.jobs" >/dev/null
# key_take.sql as the server sends it, prepared: kf, 2 jobs wanted, ':',
# no sequence, key-concurrency 1, owner tester, 30 s lease, no key rate.
{
    printf 'PREPARE kt AS\n'
    cat "$top_srcdir/server/sql/key_take.sql"
    printf ';\n'
} >"$T/kt.sql"
args="ARRAY['kf'], ARRAY[2], ARRAY[':'], ARRAY[0], ARRAY[1], 'tester', 30, ARRAY[0], ARRAY[0], ARRAY[0]"
run_take() { # run_take SQL: SQL after the PREPARE, in a transaction rolled back
    { echo "BEGIN;"; cat "$T/kt.sql"; echo "$1"; echo "ROLLBACK;"; } | pg_psql -f - 2>&1
}
taken=$(run_take "EXECUTE kt($args);" | cut -d'|' -f2 | sort | tr '\n' ' ')
is "$taken" "H:t:big:1 H:t:small " "a take of 2 gets one job of each key: big's first and small's"
run_take "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE kt($args);" >"$T/plan.json"
read_rows=$(perl -MJSON::PP -e '
    my $t = join "", <STDIN>; $t =~ s/^[^\[]*//s;
    my $p = decode_json($t); my $n = 0;
    sub walk { my $x = shift;
        if (($x->{"Relation Name"} // "") eq "jobs") {
            my $r = (($x->{"Actual Rows"} // 0) + ($x->{"Rows Removed by Filter"} // 0)
                + ($x->{"Rows Removed by Index Recheck"} // 0)) * ($x->{"Actual Loops"} // 1);
            $n += $r;
            printf STDERR "%s %s: %d\n", $x->{"Node Type"}, $x->{"Index Name"} // "-", $r;
        }
        walk($_) for @{$x->{Plans} // []};
    }
    walk($p->[0]{Plan}); print $n' <"$T/plan.json" 2>"$T/nodes.txt")
[ -n "$read_rows" ] && [ "$read_rows" -lt 100 ]
ok $? "the take read $read_rows rows of dsjob.jobs, not the 10,001 live ones"
while read -r line; do diag "  $line"; done <"$T/nodes.txt"
grep -q '"jobs_key' "$T/plan.json"
ok $? "through the key indexes"

# Rows inserted once kf is keyed get their key from the trigger jobs_keyed.
q "INSERT INTO dsjob.jobs (handle, func, uniq, data) VALUES ('H:t:new', 'kf', 'other:9', ''),
   ('H:t:nokey', 'kf', NULL, ''), ('H:t:plain', 'pf', 'x:1', '')" >/dev/null
is "$(q "SELECT string_agg(handle || '=' || coalesce(convert_from(k, 'UTF8'), 'NULL'), ' ' ORDER BY handle)
         FROM dsjob.jobs WHERE handle IN ('H:t:new', 'H:t:nokey', 'H:t:plain')")" \
    "H:t:new=other H:t:nokey= H:t:plain=NULL" \
    "an insert is keyed by the trigger; a job without a unique key is key ''; another function's is not keyed"
h=$(q "SELECT dsjob.submit('kf', 'x'::bytea, 'viasql:1')")
is "$(q "SELECT convert_from(k, 'UTF8') FROM dsjob.jobs WHERE handle = '$h'")" viasql \
    "so is a dsjob.submit"
# A separator that changes keys the rows again.
is "$(q "SELECT dsjob.key_fill(ARRAY['kf'], ARRAY['-'])")" 10004 "separator - : every row keyed again"
is "$(q "SELECT convert_from(k, 'UTF8') FROM dsjob.jobs WHERE handle = 'H:t:small'")" "" \
    "small:1 has no - : key ''"
done_testing
