#!/bin/sh
# Batches (admin "batch", OPTION_REQ batch=, dsjob batch) with real workers
# (`gearman -w` for the members, `dsjob worker` for the callbacks, which
# gives the command the job's unique key in DSJOB_UNIQUE), on the sqlite
# store:
#
#   success     five jobs, closed, run: on_complete and on_success each
#               reach a worker once, with the summary as payload and the
#               keys batch:ID:complete and batch:ID:success
#   open        jobs join until the batch is closed; a submit to a closed
#               or unknown batch is refused
#   failure     jobs that fail: on_complete fires with their handles in the
#               summary, on_success does not
#   empty       a batch closed with no jobs fires at the close
#   nested      a callback's worker opens, fills and closes another batch,
#               whose callback fires
#   restart     after a restart the batches are back and no callback fires
#               again; a batch left half done completes after it
#   admin       /api/batches, the dashboard's table, drop needs an admin peer
#               (a dropped id opened again does not count the old jobs)
#   stores      without a store batches live in memory; memcached
#               refuses them, naming the store
#   gearmand    (when installed) gearmand 1.1.20 answers batch and batch=
#               with errors, as doc/protocol.md says
#
# Every wait is for an event (a job reaching a worker, a status line),
# bounded by 120 s.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

[ -x "$DSJOB" ] || {
    echo "1..0 # SKIP tools/dsjob is not built"
    exit 0
}
skip_unless_cmd "${GEARMAN:-gearman}" "the members' worker"
unset DSJOB_SERVERS
W=$T/work
CB=$T/callbacks

ds() { "$DSJOB" -s "127.0.0.1:$SERVER_PORT" -t 20000 "$@"; }
status() { ds batch status "$1" 2>/dev/null; }
# status_has ID PATTERN: batch ID's status line has PATTERN, text with ".*"
# for any characters between (made a shell pattern: a case, not a grep).
status_has() {
    _st=$(status "$1")
    _p=$2
    _g=
    while :; do
        case $_p in
        *".*"*)
            _g="$_g${_p%%".*"*}*"
            _p=${_p#*".*"}
            ;;
        *)
            _g="$_g$_p"
            break
            ;;
        esac
    done
    # shellcheck disable=SC2254 # _g is the pattern
    case $_st in *$_g*) return 0 ;; esac
    return 1
}
# has_str TEXT STRING: TEXT has STRING in it.
has_str() {
    case $1 in *"$2"*) return 0 ;; esac
    return 1
}
cb_count() {
    _c=$(grep -c "^batch:$1:$2 " "$CB" 2>/dev/null)
    echo "${_c:-0}"
}
cb_seen() { [ "$(cb_count "$1" "$2")" -ge 1 ]; }
# until_cb ID KIND: until batch ID's KIND callback reached the worker (one
# process watching the file, tests/lib/integ.sh).
until_cb() { wait_lines "$CB" 1 "^batch:$1:$2 "; }
cb_payload() { grep "^batch:$1:$2 " "$CB" | head -1 | cut -d' ' -f2-; }

cat >"$T/rec.sh" <<'EOF'
echo "$DSJOB_UNIQUE $(cat)" >> "$1"
EOF
# A callback that opens, fills and closes batch inner (nested).
cat >"$T/nest.sh" <<EOF
cat >/dev/null
"$DSJOB" -s "127.0.0.1:\$1" -t 20000 batch open --on-complete cb.fn inner >/dev/null &&
"$DSJOB" -s "127.0.0.1:\$1" -t 20000 batch add -n 2 inner work.ok x >/dev/null &&
"$DSJOB" -s "127.0.0.1:\$1" -t 20000 batch close inner
EOF
workers() {
    "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -c 2 -f cb.fn -f cb.ok -- \
        sh "$T/rec.sh" "$CB" 2>>"$T/worker.err" &
    track $!
    "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f nest.fn -- sh "$T/nest.sh" "$SERVER_PORT" \
        2>>"$T/worker.err" &
    track $!
    "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -c 2 -f work.fail -- sh -c 'cat >/dev/null; exit 3' \
        2>>"$T/worker.err" &
    track $!
    timeout 600 "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f work.ok -- cat >/dev/null 2>&1 &
    track $!
}

server_start dsjobd --store sqlite --work-dir "$W" --http-port 0 \
    --http-port-file "$T/http.port" --max-dead 100 || exit 1

# --- success and open --------------------------------------------------------------------
ds batch open --on-complete cb.fn --on-success cb.ok ok1 >/dev/null
ok $? "batch open ok1 with on-complete and on-success"
out=$(ds batch open ok1 2>&1)
[ $? -ne 0 ] && has_str "$out" BATCH_EXISTS
ok $? "opening it again is refused: $out"
n=$(ds batch add -n 3 ok1 work.ok a | grep -c .)
is "$n" 3 "three jobs added, three handles"
status_has ok1 "total=3 pending=3 done=0 failed=0 dead=0 closed=no"
ok $? "status: $(status ok1)"
n=$(ds batch add -n 2 ok1 work.ok b | grep -c .)
is "$n" 2 "two more while it is open"
ds batch close ok1 >/dev/null
ok $? "batch close ok1"
out=$(ds batch add ok1 work.ok c 2>&1)
[ $? -ne 0 ] && has_str "$out" "closed"
ok $? "a job for a closed batch is refused: $out"
out=$(ds batch add nosuch work.ok c 2>&1)
[ $? -ne 0 ] && has_str "$out" "no batch nosuch"
ok $? "a job for an unknown batch is refused: $out"
status_has ok1 "total=5 pending=5 .*closed=yes .*fired-complete=no fired-success=no"
ok $? "closed, nothing fired while its jobs wait: $(status ok1)"

workers
until_cb ok1 success
ok $? "on_success reached a worker"
until_cb ok1 complete
ok $? "on_complete reached a worker"
p=$(cb_payload ok1 complete)
has_str "$p" '"batch":"ok1","callback":"complete","total":5,"done":5,"failed":0,"dead":0,"failed_handles":[]'
ok $? "its payload is the summary: $p"
status_has ok1 "total=5 pending=0 done=5 failed=0 dead=0 closed=yes .*fired-complete=yes fired-success=yes"
ok $? "status after: $(status ok1)"

# --- failure -----------------------------------------------------------------------------
ds batch open --on-complete cb.fn --on-success cb.ok bad1 >/dev/null &&
    ds batch add -n 2 bad1 work.ok x >/dev/null &&
    h=$(ds batch add -n 2 bad1 work.fail y) && ds batch close bad1 >/dev/null
ok $? "batch bad1: two jobs that succeed, two that fail"
until_cb bad1 complete
ok $? "on_complete fires"
p=$(cb_payload bad1 complete)
fails=0
for x in $h; do has_str "$p" "\"$x\"" && fails=$((fails + 1)); done
has_str "$p" '"total":4,"done":2,' && [ "$fails" -eq 2 ]
ok $? "its summary counts them and lists both failed handles: $p"
poll status_has bad1 "pending=0"
status_has bad1 "done=2 failed=0 dead=2 .*fired-complete=yes fired-success=no"
ok $? "they are dead (--max-dead), on_success did not fire: $(status bad1)"

# --- empty and nested --------------------------------------------------------------------
ds batch open --on-complete cb.fn empty1 >/dev/null && ds batch close empty1 >/dev/null
until_cb empty1 complete
ok $? "a batch closed with no jobs fires at the close"
has_str "$(cb_payload empty1 complete)" '"total":0'
ok $? "with a summary of none"
ds batch open --on-complete nest.fn outer >/dev/null && ds batch add outer work.ok o >/dev/null &&
    ds batch close outer >/dev/null
ok $? "batch outer, whose on_complete opens batch inner"
until_cb inner complete
ok $? "the nested batch's callback fires"
has_str "$(cb_payload inner complete)" '"batch":"inner","callback":"complete","total":2,"done":2'
ok $? "with its own summary: $(cb_payload inner complete)"

# --- admin -------------------------------------------------------------------------------
if command -v curl >/dev/null 2>&1; then
    api=$(curl -s "http://127.0.0.1:$(cat "$T/http.port")/api/batches")
    echo "$api" | grep -q '"id":"ok1","total":5,"pending":0,"done":5'
    ok $? "/api/batches lists them: $(echo "$api" | cut -c1-200)"
    curl -s "http://127.0.0.1:$(cat "$T/http.port")/" | grep -q 'id="batches"'
    ok $? "the dashboard has the batches table"
else
    ok 0 "# SKIP no curl"
    ok 0 "# SKIP no curl"
fi
ds batch list --format tsv | grep -q "^ok1	5	0	5	0	0	closed	cb.fn	cb.ok	yes	yes$"
ok $? "dsjob batch list"

# --- restart -----------------------------------------------------------------------------
ds batch open --on-complete cb.fn half >/dev/null && ds batch add -n 2 half work.later z >/dev/null &&
    ds batch close half >/dev/null
ok $? "batch half: two jobs no worker does yet"
before=$(grep -c . "$CB")
reap
server_stop
server_start dsjobd --store sqlite --work-dir "$W" --admin-allow 192.0.2.1 || exit 1
status_has ok1 "total=5 pending=0 done=5 .*fired-complete=yes fired-success=yes"
ok $? "after a restart ok1 is back as it was"
status_has half "total=2 pending=2 done=0 .*closed=yes .*fired-complete=no"
ok $? "half is back with its two jobs pending: $(status half)"
workers
timeout 600 "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f work.later -- cat >/dev/null 2>&1 &
track $!
until_cb half complete
ok $? "half completes after the restart"
for b in ok1:complete ok1:success bad1:complete empty1:complete inner:complete half:complete; do
    c=$(cb_count "${b%%:*}" "${b#*:}")
    [ "$c" -eq 1 ] || break
done
ok $? "every callback reached a worker exactly once ($b: $c)"
cb_seen bad1 success
ok $((!$?)) "and bad1's on_success never"

out=$(ds batch drop ok1 2>&1)
[ $? -ne 0 ] && has_str "$out" PERMISSION_DENIED
ok $? "drop from a peer outside --admin-allow is refused: $out"
ds batch status ok1 >/dev/null 2>&1
ok $? "status is not"
reap
server_stop
server_start dsjobd --store sqlite --work-dir "$W" || exit 1
ds batch drop ok1 >/dev/null
ok $? "drop from an admin peer"
ds batch status ok1 >/dev/null 2>&1
ok $((!$?)) "it is gone"
# A dropped id opened again is a new batch: the old one's members are not counted in it.
ds batch open --on-complete cb.fn re1 >/dev/null && hold=$(ds batch add re1 work.old o) &&
    ds batch drop re1 >/dev/null && ds batch open --on-complete cb.fn re1 >/dev/null &&
    ds batch add re1 work.new n >/dev/null && ds batch close re1 >/dev/null
ok $? "batch re1 with one job, dropped, opened again with another, closed"
timeout 600 "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f work.old -- cat >/dev/null 2>&1 &
track $!
old_gone() { ! ds job "$hold" >/dev/null 2>&1; }
poll old_gone
ok $? "the old batch's job ran and ended"
status_has re1 "total=1 pending=1 done=0 .*fired-complete=no"
ok $? "the new batch did not count it: $(status re1)"
# Its worker goes before its server: a gearman -w whose server is gone
# reconnects in a loop that takes a core until it is stopped.
reap
server_stop
server_start dsjobd --store sqlite --work-dir "$W" || exit 1
ds batch status ok1 >/dev/null 2>&1
ok $((!$?)) "and stays gone after a restart"
server_stop

# --- other stores ------------------------------------------------------------------------
server_start dsjobd || exit 1
ds batch open --on-complete cb.fn mem1 >/dev/null && ds batch close mem1 >/dev/null
ok $? "without a store batches live in memory"
server_stop

mc=${MEMCACHED_BIN:-/usr/bin/memcached}
if [ -x "$mc" ]; then
    mcport=$(free_port)
    "$mc" -l 127.0.0.1 -p "$mcport" -U 0 -m 16 -u root &
    track $!
    wait_port "$mcport" && server_start dsjobd --store memcached \
        --memcached-servers "127.0.0.1:$mcport" || exit 1
    out=$(ds batch open mc1 2>&1)
    [ $? -ne 0 ] && echo "$out" | grep -q "store memcached keeps no batches"
    ok $? "the memcached store refuses batches, naming itself: $out"
    server_stop
    reap
else
    ok 0 "# SKIP no memcached"
fi

# --- gearmand ----------------------------------------------------------------------------
if [ -x "${GEARMAND:-}" ] && server_start gearmand 2>/dev/null; then
    out=$(timeout 20 perl -MIO::Socket::INET -e '
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $ARGV[0]) or exit 2;
        print $s "batch open g1\n";
        my $l = <$s>;
        print $l;' "$SERVER_PORT" 2>&1)
    echo "$out" | grep -q "^ERR"
    ok $? "gearmand answers the admin line batch with ERR: $out"
    out=$(gpacket 26 "batch=g1")
    echo "$out" | grep -q "^19 "
    ok $? "and OPTION_REQ batch= with ERROR: $out"
    server_stop
else
    ok 0 "# SKIP no gearmand"
    ok 0 "# SKIP no gearmand"
fi
done_testing
