#!/bin/sh
# The HTTP port's limits and descriptor exhaustion, against a real dsjobd:
# --http-timeout is a deadline for the whole request (a peer sending a
# byte at a time is closed at it, not kept while bytes trickle in);
# --http-max-connections holds the next connection back until one closes;
# under a small `ulimit -n` with many HTTP connections held open, the
# server neither spins nor floods its log (accept fails with EMFILE: the
# listeners rest and the log line is rate-limited: its CPU time over a
# window is read from /proc/PID/stat, with a bound far above what a
# resting server uses and far below a spinning one), and a Gearman ECHO
# sent meanwhile is answered once descriptors come free. Errors evhttp
# makes itself (a request that does not parse, headers too large, a body)
# come back as JSON like every other answer.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

HOLD=$top_srcdir/tests/integ/http_hold.pl
unset DSJOB_SERVERS

# cpu PID: the process's user + system time, in clock ticks.
cpu() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# A slow peer: one header byte every 0.2 s never completes a request; it is
# closed at --http-timeout 2 (the old per-byte timeout never fired).
server_start dsjobd --http-port 0 --http-port-file "$T/a.port" --http-timeout 2 \
    --http-max-connections 3 --verbose INFO
HTTP_PORT=$(cat "$T/a.port")
r=$(timeout 60 perl "$HOLD" trickle "$HTTP_PORT" 0.2 40)
case $r in
closed\ after\ *) s=${r#closed after }; s=${s%% *}
    [ "$s" -ge 1 ] && [ "$s" -le 30 ]
    ok $? "a peer sending a byte every 0.2 s is closed at the request deadline ($r)" ;;
*) ok 1 "a peer sending a byte every 0.2 s is closed at the request deadline: '$r'" ;;
esac
grep -q 'deadline' "$SERVER_LOG"
ok $? "the log says why"

# --http-max-connections 3: three silent connections hold every place; a
# fourth gets its answer only once one of them closes.
timeout 60 perl "$HOLD" cap "$HTTP_PORT" 3 >"$T/cap.out" 2>&1
r=$(cat "$T/cap.out")
is "$(echo "$r" | sed -n 1p)" "held 3; the 4th: no answer while they are open" \
    "at --http-max-connections 3 a 4th connection waits"
is "$(echo "$r" | sed -n 2p)" "after one closed: 200" "and is answered once one closes"
is "$("$RAWPEER" "$HTTP_PORT" http GET /healthz | head -1)" 200 "the port serves on"
server_stop

# Errors evhttp answers by itself are JSON, as the API's own.
server_start dsjobd --http-port 0 --http-port-file "$T/e.port"
HTTP_PORT=$(cat "$T/e.port")
jerr() { # jerr CODE DESC METHOD TARGET [FILLER]: that code, as JSON with an "error" string
    _c=$1 _d=$2
    shift 2
    "$RAWPEER" "$HTTP_PORT" http "$@" >"$T/jerr.out"
    perl -MJSON::PP -e '
        my $code = <STDIN>; my $type = <STDIN>; chomp($code, $type);
        my $d = eval { decode_json(join "", <STDIN>) };
        exit !($code eq $ARGV[0] && $type eq "application/json" && $d && $d->{error} ne "");' \
        "$_c" <"$T/jerr.out"
    ok $? "$_d: $(tr '\n' ' ' <"$T/jerr.out")"
}
# Just over the limit, so the server has read it all when it answers (more
# would still be unread at the close, and the reset could lose the answer).
jerr 400 "headers over 8192 bytes: 400 in JSON" GET /healthz 8200
HTTP_HEADER='a header line without a colon' jerr 400 "a header that does not parse: 400 in JSON" GET /healthz
HTTP_BODY=0123456789 jerr 413 "a request with a body: 413 in JSON" POST /api/status
jerr 501 "an unknown method: 501 in JSON" BREW /healthz
jerr 405 "TRACE: 405 in JSON" TRACE /healthz
jerr 404 "an unknown page: 404 in JSON" GET /nope
is "$("$RAWPEER" "$HTTP_PORT" http GET /healthz | head -1)" 200 "the port serves on"
server_stop

# Descriptor exhaustion: 150 HTTP connections held open (a byte every
# second) against a server allowed 40 descriptors, so accept fails with
# EMFILE on both ports. --http-timeout 300: nothing is closed by the
# deadline during the window. The log is standard error, where libevent's
# own warnings go too.
pf=$T/x.port
hpf=$T/x.hport
log=$T/x.log
(ulimit -n 40 && exec "$DSJOBD" -L 127.0.0.1 -p 0 --port-file "$pf" --http-port 0 \
    --http-port-file "$hpf" --http-timeout 300 --verbose NOTICE -l stderr 2>"$log") &
XPID=$!
track $XPID
i=0
while [ ! -s "$hpf" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
XPORT=$(cat "$pf")
XHTTP=$(cat "$hpf")
perl "$HOLD" hold "$XHTTP" 150 600 >"$T/hold.out" 2>&1 &
HPID=$!
track $HPID
# Causal: until the server has said accept failed (at most 60 s).
i=0
while ! grep -q 'Too many open files' "$log" && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
grep -q 'accept on the HTTP port: Too many open files' "$log"
ok $? "accept fails with EMFILE, and the log says so: $(grep 'accept on the' "$log" | head -1)"
# An ECHO on the Gearman port, sent while no descriptor is free.
timeout 60 perl "$HOLD" echo "$XPORT" >"$T/echo.out" 2>&1 &
EPID=$!
track $EPID
sleep 1 # let the HTTP listener meet EMFILE too (not a wait for an event: a window)
l0=$(wc -l <"$log")
c0=$(cpu $XPID)
# The measuring window, not a wait for an event: 2 s, eight of the
# listeners' 250 ms rests; a spinning server fills it (a log line or a CPU
# tick at a time), whatever its length.
win=2
sleep $win
l1=$(wc -l <"$log")
c1=$(cpu $XPID)
tck=$(getconf CLK_TCK)
diag "over $win s of EMFILE: $((l1 - l0)) log lines, $((c1 - c0)) CPU ticks (of $((win * tck)))"
[ $((l1 - l0)) -le 3 ]
ok $? "the log stays small: $((l1 - l0)) lines in $win s (before: about 32,000 a second)"
[ $((c1 - c0)) -lt $((win * tck / 4)) ]
ok $? "the server does not spin: $((c1 - c0)) ticks of CPU in $win s (bound $((win * tck / 4)))"
kill -0 $XPID 2>/dev/null
ok $? "dsjobd still runs"
# Descriptors come free: the holder leaves. The ECHO must be answered.
kill -TERM $HPID
wait $HPID 2>/dev/null
wait $EPID
is "$(cat "$T/echo.out")" "ECHO_RES hello" "the Gearman ECHO sent meanwhile is answered once descriptors free up"
r=$("$RAWPEER" "$XHTTP" http GET /healthz | head -1)
is "$r" 200 "and HTTP serves again"
kill -TERM $XPID
wait $XPID
reap
done_testing
