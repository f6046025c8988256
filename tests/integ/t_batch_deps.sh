#!/bin/sh
# A batch whose members wait for other jobs (OPTION_REQ batch= and after=
# on one connection, through tests/lib/rawpeer's packets), on the sqlite
# store, with real workers (`dsjob worker`):
#
#   refused     a member after an unknown handle, and one after a parent
#               that failed for good (dead, --max-dead), are refused with
#               ERROR DEPENDENCY and are no members: the batch counts only
#               the members accepted (one held after a live parent, one
#               plain)
#   callbacks   closed and run: the held member runs after its parent,
#               the counts reach total 2, done 2, and on_complete and
#               on_success each reach a worker once, with total 2 in the
#               summary
#
# Every wait is for an event, bounded by 120 s (poll).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

dsjob_test_begin
CB=$T/callbacks
RAN=$T/ran
: >"$CB"
: >"$RAN"
ds() { "$DSJOB" -s "127.0.0.1:$SERVER_PORT" -t 20000 "$@"; }
status() { ds batch status "$1" 2>/dev/null; }
status_has() { status "$1" | grep -q "$2"; }
cb_count() {
    _c=$(grep -c "^batch:$1:$2 " "$CB" 2>/dev/null)
    echo "${_c:-0}"
}
cb_seen() { [ "$(cb_count "$1" "$2")" -ge 1 ]; }
member() { # member AFTER DATA: a background submit into batch bd after AFTER; its answer
    "$RAWPEER" "$SERVER_PORT" packets 26 batch=bd -- 26 "after=$1" -- 18 dep.kid "" "$2" |
        tail -1
}

server_start dsjobd --store sqlite --work-dir "$T/work" --max-dead 100 --job-retries 1 || exit 1

# A parent that fails for good, in the dead set.
hbad=$(ds submit -b dep.bad x)
ok $? "a parent that will fail: $hbad"
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f dep.bad -- sh -c 'cat >/dev/null; exit 3' \
    2>>"$T/worker.err" &
wbad=$!
track $wbad
is_dead() { "$RAWPEER" "$SERVER_PORT" admin "show dead dep.bad" | grep -q "^$hbad	"; }
poll is_dead
ok $? "it is in the dead set"
hpar=$(ds submit -b dep.par p)
ok $? "a live parent, no worker yet: $hpar"

ds batch open --on-complete cb.fn --on-success cb.ok bd >/dev/null
ok $? "batch bd opened"
out=$(member H:nosuch:1 a)
case $out in *DEPENDENCY*"no job H:nosuch:1"*) r=0 ;; *) r=1 ;; esac
ok $r "a member after an unknown handle is refused: $out"
out=$(member "$hbad" b)
case $out in *DEPENDENCY*"job $hbad failed"*) r=0 ;; *) r=1 ;; esac
ok $r "a member after a dead parent is refused: $out"
out=$(member "$hpar" c)
case $out in "8 H:"*) r=0 ;; *) r=1 ;; esac
ok $r "a member after the live parent is created: $out"
hkid=${out#8 }
out=$("$RAWPEER" "$SERVER_PORT" packets 26 batch=bd -- 18 dep.kid "" d | tail -1)
case $out in "8 H:"*) r=0 ;; *) r=1 ;; esac
ok $r "a plain member is created: $out"
status_has bd "total=2 pending=2 done=0 failed=0 dead=0 closed=no"
ok $? "bd counts the two members it took: $(status bd)"
ds batch close bd >/dev/null
ok $? "bd closed"

"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -c 2 -f cb.fn -f cb.ok -- \
    sh -c 'echo "$DSJOB_UNIQUE $(cat)" >>"$1"' sh "$CB" 2>>"$T/worker.err" &
track $!
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f dep.par -f dep.kid -- \
    sh -c 'cat >/dev/null; echo "$DSJOB_HANDLE" >>"$1"' sh "$RAN" 2>>"$T/worker.err" &
track $!
both() { cb_seen bd complete && cb_seen bd success; }
poll both
ok $? "on_complete and on_success reached a worker"
is "$(grep -x -e "$hpar" -e "$hkid" "$RAN" | tr '\n' ' ')" "$hpar $hkid " \
    "the held member ran after its parent"
status_has bd "total=2 pending=0 done=2 failed=0 dead=0 closed=yes .*fired-complete=yes fired-success=yes"
ok $? "bd's counts: $(status bd)"
grep "^batch:bd:complete " "$CB" | grep -q '"total":2,"done":2,"failed":0,"dead":0'
ok $? "the summary counts 2 members: $(grep "^batch:bd:complete " "$CB")"
# Exactly once: one more job through the callbacks' worker, then count.
ds submit -b -u last cb.fn end >/dev/null
poll grep -q "^last end" "$CB"
is "$(cb_count bd complete) $(cb_count bd success)" "1 1" "each callback ran once"
reap
done_testing
