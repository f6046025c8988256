#!/bin/sh
# --store-async-ends on the postgres store: whether a worker that ended a
# stored job gets more work before that end commits. Against a PostgreSQL
# 15 of the test's own (tests/lib/pg.sh) and a real `dsjob worker`; the
# commit is held back by a psql session that locks the ended job's row.
#
# Asserts, for dsjobd a (default) and b (--store-async-ends): job "first"
# runs until psql holds its row FOR UPDATE (a file says so), job "second"
# commits meanwhile and waits in the server's queue; psql holds the row
# until "second" has started (bounded), so that it starts before that: by
# default a worker's next job starts while its last end commits (it is
# held only at a second end before the first commits, which
# tests/unit/t_storage.c checks), and with --store-async-ends too. Both
# jobs' rows are gone at the end and each ran once. Every step waits for
# the one before it, so a loaded machine only makes it slower.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start
pgd_launch a --verbose NOTICE
pgd_launch b --verbose NOTICE --store-async-ends
pgd_wait_all_or_bail
# The worker's command: "NS-TIME PAYLOAD" as it starts; "first" lasts
# until the file $2 exists (psql holds its row), at most 120 s.
cat >"$T/rec.sh" <<'EOF'
ts=$(date +%s%N)
p=$(cat)
echo "$ts $p" >>"$1"
i=0
while [ "$p" = first ] && [ ! -e "$2" ] && [ $i -lt 1200 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ "$p" = first ] && date +%s%N >"$1.end"
exit 0
EOF
started() { awk -v p="$2" '$2 == p { print $1; exit }' "$1"; } # started FILE PAYLOAD: ns
has() { [ -n "$(started "$1" "$2")" ]; }

for n in a b; do
    f=end_$n
    : >"$T/ran.$n"
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port $n)" -f $f -- sh "$T/rec.sh" "$T/ran.$n" "$T/locked.$n" \
        2>/dev/null &
    track $!
    poll_s 10 pgd_registered $n $f
    ok $? "$n: a worker for $f is registered"
    h1=$("$DSJOB" -s "127.0.0.1:$(pgd_port $n)" submit -b $f first 2>&1)
    poll_s 10 has "$T/ran.$n" first
    ok $? "$n: first ($h1) runs"
    # second commits while the worker is busy: it waits in n's queue.
    h2=$("$DSJOB" -s "127.0.0.1:$(pgd_port $n)" submit -b $f second 2>&1)
    # Hold first's row, then let first end: its deletion cannot commit
    # while the row is held, until second has started (at most 120 s). The
    # time is taken while the lock is still held, just before COMMIT lets it
    # go: taken after psql exits, it raced the server's own commit and the
    # worker's start.
    hold="\\! i=0; while ! grep -q ' second\$' '$T/ran.$n' && [ \$i -lt 1200 ]; do sleep 0.1; i=\$((i + 1)); done"
    pg_psql >/dev/null 2>&1 <<EOF
BEGIN;
SELECT 1 FROM dsjob.jobs WHERE handle = '$h1' FOR UPDATE;
\! touch "$T/locked.$n"
$hold
\! date +%s%N >"$T/released.$n"
COMMIT;
EOF
    poll_s 15 has "$T/ran.$n" second
    ok $? "$n: second ($h2) runs"
    rel=$(cat "$T/released.$n")
    s2=$(started "$T/ran.$n" second)
    e1=$(cat "$T/ran.$n.end")
    diag "$n: second started $(((s2 - e1) / 1000000)) ms after first ended, $(((s2 - rel) / 1000000)) ms after psql's last moment holding first's row"
    [ "$s2" -lt "$rel" ]
    ok $? "$n: second started while first's deletion waited"
    gone() { [ "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle IN ('$h1', '$h2')")" = 0 ]; }
    poll_s 10 gone
    ok $? "$n: both rows are gone"
    is "$(wc -l <"$T/ran.$n" | tr -d ' ')" 2 "$n: each ran once"
done
reap
for n in a b; do
    pgd_stop $n
    ok $? "dsjobd $n stops on SIGTERM"
done
done_testing
