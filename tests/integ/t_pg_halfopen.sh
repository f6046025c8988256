#!/bin/sh
# A connection to PostgreSQL that breaks on one side only, or stops
# answering. Against a PostgreSQL 15 of the test's own (tests/lib/pg.sh),
# dsjobd connects through a small TCP proxy (tests/integ/pg_gear.py proxy)
# that can close the client side of its connections with an RST and keep
# the upstream side open (a NAT or firewall that forgot the flow: the old
# backend lives on, holding the start's advisory lock), or stop
# forwarding altogether (a peer gone without a word; the proxy's own
# kernel still acknowledges, so TCP keepalives cannot tell).
#
# Asserts: dsjobd's connections have TCP keepalives on (ss shows a
# keepalive timer); after the cut, a background submit is answered
# JOB_CREATED within 20 s (the live lock is tried, and the old backend,
# this server's own lost session, is ended), and the old backend is gone;
# with the connection frozen, a submit waits, /healthz answers 503 with
# "a commit has not ended" within 40 s and the log says so; and SIGTERM
# stops dsjobd by itself (dsjobd(8): the database gets --pg-stop-grace-ms
# to answer once the server stops, peers 2 s to read).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/lib/pg.sh"

skip_unless_cmd "$PYTHON" "tests/integ/pg_gear.py is the test's proxy"
skip_unless_cmd curl
pg_test_start
pg_proxy_start
CTL=$PG_PROXY_CTL
PROXY_PORT=$PG_PROXY_PORT
diag "proxy on 127.0.0.1:$PROXY_PORT (pid $PG_PROXY_PID) to PostgreSQL's $PG_PORT"
DIRECT_DSN=$PG_DSN
PG_DSN="host=127.0.0.1 port=$PROXY_PORT dbname=dsjob user=postgres"
pgd_start_or_bail a --verbose INFO --http-port 0 --http-port-file "$TEST_TMPDIR/http.port" \
    --store-stuck-after 3 --pg-stop-grace-ms 1000
PG_DSN=$DIRECT_DSN
HTTP=127.0.0.1:$(cat "$TEST_TMPDIR/http.port")
A=127.0.0.1:$(pgd_port a)
writer() {
    q "SELECT pid FROM pg_locks WHERE locktype = 'advisory'
        AND classid = 1685285425::oid AND objsubid = 2 AND granted"
}

h1=$("$DSJOB" -s "$A" -t 20000 submit -b hx one 2>&1)
case $h1 in H:*) ok 0 "a submit through the proxy: $h1" ;; *) ok 1 "a submit through the proxy: $h1" ;; esac
old=$(writer)
ss -tnpo state established "( dport = :$PROXY_PORT )" >"$TEST_TMPDIR/ss" 2>&1
diag "$(grep -c "pid=$(pgd_pid a)," "$TEST_TMPDIR/ss") connections of dsjobd to the proxy;" \
    "$(grep "pid=$(pgd_pid a)," "$TEST_TMPDIR/ss" | grep -o 'timer:([^)]*)' | tr '\n' ' ')"
[ "$(grep "pid=$(pgd_pid a)," "$TEST_TMPDIR/ss" | grep -c 'timer:(keepalive')" -ge 1 ]
ok $? "dsjobd's connections to PostgreSQL have TCP keepalives on"

touch "$CTL/cut"
poll_s 10 sh -c "! test -e '$CTL/cut'"
t0=$(date +%s%N)
h2=$("$DSJOB" -s "$A" -t 20000 submit -b hx two 2>&1)
ms=$((($(date +%s%N) - t0) / 1000000))
case $h2 in H:*) ok 0 "after the cut, a submit is answered JOB_CREATED in $ms ms: $h2" ;;
*) ok 1 "after the cut, a submit is answered JOB_CREATED (got '$h2' after $ms ms)" ;; esac
is "$(q "SELECT count(*) FROM pg_stat_activity WHERE pid = '${old:-0}'")" 0 \
    "the old writer backend ($old), still holding the live lock after the cut, is gone"
new=$(writer)
[ -n "$new" ] && [ "$new" != "$old" ]
ok $? "the new writer connection holds the live lock ($new)"

touch "$CTL/freeze"
poll_s 10 sh -c "! test -e '$CTL/freeze'"
"$DSJOB" -s "$A" -t 60000 submit -b hx three >"$TEST_TMPDIR/three" 2>&1 &
sub=$!
stuck() {
    curl -s -m 5 "http://$HTTP/healthz" >"$TEST_TMPDIR/healthz" 2>&1
    grep -q '"reason":"store: a commit has not ended after' "$TEST_TMPDIR/healthz"
}
poll_s 40 stuck
ok $? "with the connection frozen, /healthz says so: $(cat "$TEST_TMPDIR/healthz")"
is "$(curl -s -m 5 -o /dev/null -w '%{http_code}' "http://$HTTP/healthz")" 503 "with status 503"
grep -q 'store: a commit of .* jobs has not ended after 3 s (--store-stuck-after' "$(pgd_log a)"
ok $? "the log says a commit has not ended: $(grep 'has not ended' "$(pgd_log a)" | head -1)"
t0=$(date +%s%N)
pgd_stop a
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
# It exits by itself (pgd_stop would kill it after 15 s): --pg-stop-grace-ms
# 1000 for the database, then 2 s for peers to read. The time is printed.
[ $rc -eq 0 ]
ok $? "SIGTERM stops dsjobd by itself while its commit hangs ($ms ms; --pg-stop-grace-ms 1000)"
wait $sub 2>/dev/null
diag "the frozen submit got: $(cat "$TEST_TMPDIR/three")"
done_testing
