#!/bin/sh
# Flow settings another server changed reach this one through NOTIFY, and
# a lease op that reads them does not take the function the old way: two
# dsjobd sharing one PostgreSQL (tests/lib/pg.sh), with --pg-lease 120
# and --pg-poll-ms 600000, so that only a NOTIFY (not a renewal every 40
# s, nor a poll) can make B look. In one transaction, as another server's
# commit would carry them, a function gets "sequence hold" in dsjob.flow
# and six jobs of one key arrive (dsjob.submit), with NOTIFY 'flow'. B,
# with a `dsjob worker -c 4` idle for the function, wakes at the
# NOTIFY: its first lease op reads the new settings, takes nothing of the
# function (it was made under the old ones), and the next takes by key:
# at every start at most one job of the function is under a lease in the
# whole table (the old way, a plain take leased four at once), and the
# six run in order, one at a time. Then a change made on A
# (admin limit) is followed by B before its first renewal.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

command -v flock >/dev/null 2>&1 || { echo "1..0 # SKIP no flock"; exit 0; }
pg_test_start "a b" --pg-lease 120 --pg-poll-ms 600000 --verbose NOTICE

ds() { # ds SERVER ARG...
    _s=$1
    shift
    timeout -k 2 60 "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" "$@"
}
settings_is() { [ "$(ds "$1" limit "$2" --format tsv 2>/dev/null | cut -f2)" = "$3" ]; }

# The job: its payload "N"; at its start, the jobs of fn under a lease in
# the table, then a run of a fifth of a second (long enough for four idle
# workers to overlap it, were the jobs handed out the old way).
cat >"$T/job.sh" <<EOF
#!/bin/sh
read -r n || true
leased=\$(PGCONNECT_TIMEOUT=5 "$PG_BIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PG_PORT" -U postgres \\
    -d dsjob -c "SELECT count(*) FROM dsjob.jobs WHERE func = 'fn' AND state = 0 AND owner IS NOT NULL")
flock "$T/lock" sh -c "echo 'S \$n \$leased' >>'$T/ev'"
sleep 0.2
flock "$T/lock" sh -c "echo 'E \$n' >>'$T/ev'"
EOF
chmod +x "$T/job.sh"
: >"$T/ev"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port b)" -c 4 -f fn -- "$T/job.sh" >/dev/null 2>&1 &
track $!
poll pgd_registered b fn 4
ok $? "B has four idle workers for fn"
is "$(ds b limit fn --format tsv | cut -f2)" "none" "fn has no settings on B"

q "BEGIN;
   INSERT INTO dsjob.flow VALUES ('fn', 'sequence hold')
    ON CONFLICT (name) DO UPDATE SET settings = excluded.settings;
   SELECT dsjob.submit('fn', convert_to(i::text, 'UTF8'), 'z:' || i) FROM generate_series(1, 6) i;
   SELECT pg_notify('dsjob', 'flow');
   COMMIT;" >/dev/null
ok $? "one transaction: fn gets sequence hold, six jobs of key z, NOTIFY flow"
done6() { [ "$(grep -c '^E ' "$T/ev")" -ge 6 ]; }
await_lines "$T/ev" 6 -E '^E '
poll done6
ok $? "B ran the six"
is "$(ds b limit fn --format tsv | cut -f2)" "sequence hold" "B follows the stored settings"
is "$(awk '$1 == "S" && $3 > m { m = $3 } END { print m + 0 }' "$T/ev")" 1 \
    "at every start at most one job of fn was under a lease (the old way took four at once)"
is "$(awk '$1 == "S" { printf "%s ", $2 }' "$T/ev")" "1 2 3 4 5 6 " "in order"
awk '$1 == "S" { if (run) bad = 1; run = 1 } $1 == "E" { run = 0 } END { exit bad }' "$T/ev"
ok $? "one at a time"
grep -q "function 'fn': flow settings 'sequence hold' from the store" "$(pgd_log b)"
ok $? "B's log says where the settings came from"

# A change made on A reaches B at its commit, through NOTIFY: B neither
# renews its leases (every 40 s) nor polls meanwhile.
ds a limit fn --concurrency 2 >/dev/null
ok $? "limit fn --concurrency 2 on A"
poll settings_is b fn "concurrency 2 sequence hold"
ok $? "B follows it"
reap
pgd_stop_all
done_testing
