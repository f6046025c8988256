#!/bin/sh
# Batches across servers on the postgres store: three dsjobd share one
# PostgreSQL of the test's own (tests/lib/pg.sh), with real workers
# (`dsjob worker`, which gives the command DSJOB_HANDLE and DSJOB_UNIQUE).
# The store is the batches' one copy: a member joins in the commit of its
# add, its end moves the counters in the commit of the end, and the end
# that leaves a closed batch with nothing pending inserts its callbacks.
#
#   admin       a batch opened on one server is known to the others (status,
#               list); opening it again anywhere is BATCH_EXISTS; a submit
#               to a batch no server opened is refused, naming it
#   kill -9     60 members submitted through the three servers, b killed
#               with -9 while its worker is mid-batch, the batch closed on
#               a third server: every acknowledged member runs, the counts
#               reach total 60, done 60, and on_complete and on_success each
#               reach a worker exactly once, with the summary as payload
#   failures    a batch closed before any member ran (no worker yet): the
#               end of its last member fires on_complete, with the failed
#               members' handles; on_success never fires; a submit to the
#               closed batch is refused
#
# Every wait is for an event, bounded by poll_s / poll_moving (at least 60 s
# of nothing moving); every process is started here and stopped by its pid.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_begin
pg_start_or_bail
RAN=$T/ran
CB=$T/callbacks
ACKED=$T/acked
: >"$RAN"
: >"$CB"
: >"$ACKED"
for n in a b c; do
    pgd_launch "$n" --pg-lease 3 --pg-poll-ms 500 --max-dead 100 --job-retries 1 --verbose INFO
done
for n in a b c; do
    pgd_wait "$n" || {
        echo "Bail out! dsjobd $n did not start"
        exit 1
    }
done

ds() { # ds NAME ARGS...: dsjob against that server
    _s=$1
    shift
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" -t 20000 "$@"
}
# A member: records its handle, fails if its payload says so.
cat >"$T/work.sh" <<'EOF'
p=$(cat)
echo "$DSJOB_HANDLE" >>"$1"
case $p in fail*) exit 3 ;; esac
sleep "${2:-0}"
EOF
cat >"$T/rec.sh" <<'EOF'
echo "$DSJOB_UNIQUE $(cat)" >>"$1"
EOF
cb_count() { grep -c "^batch:$1:$2 " "$CB" 2>/dev/null || true; }
cb_payload() { grep "^batch:$1:$2 " "$CB" | head -1 | cut -d' ' -f2-; }
status_of() { ds "$1" batch status "$2" 2>/dev/null | tail -1; }
counts_of() { # counts_of NAME ID: "total pending done failed dead"
    status_of "$1" "$2" |
        sed -n 's/.* total=\([0-9]*\) pending=\([0-9]*\) done=\([0-9]*\) failed=\([0-9]*\) dead=\([0-9]*\) .*/\1 \2 \3 \4 \5/p'
}
# Callback workers on a and c only: b is killed.
for n in a c; do
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$n")" -f cb.fn -f cb.ok -- sh "$T/rec.sh" "$CB" \
        2>>"$T/worker.err" &
    track $!
done

# --- admin across servers ----------------------------------------------------------------
out=$(ds a batch open --on-complete cb.fn --on-success cb.ok b1 2>&1)
ok $? "batch b1 opened on a: $out"
out=$(ds c batch open b1 2>&1)
case $out in *BATCH_EXISTS*) r=0 ;; *) r=1 ;; esac
ok $r "opening b1 again on c: BATCH_EXISTS ($out)"
st=$(status_of b b1)
case $st in id=b1\ *) r=0 ;; *) r=1 ;; esac
ok $r "b knows b1: $st"
ds c batch list --format tsv 2>/dev/null | grep -q "^b1	"
ok $? "c lists b1"
out=$(ds b batch add nosuch wf.work x 2>&1)
r=$?
case $out in *"batch nosuch is not open"*) [ $r -ne 0 ] ;; *) false ;; esac
ok $? "a submit to a batch no server opened is refused, naming it: $out"

# --- kill -9 mid-batch -------------------------------------------------------------------
# b's worker is slow (0.2 s a job) and leases what is submitted to b.
"$DSJOB" worker -s "127.0.0.1:$(pgd_port b)" -f wf.work -- sh "$T/work.sh" "$RAN" 0.2 \
    2>>"$T/worker.err" &
wb=$!
track $wb
poll_s 60 pgd_registered b wf.work
ok $? "b has a worker for wf.work"
ds b batch add -n 20 --numbered b1 wf.work ok >>"$ACKED" 2>>"$T/add.err"
ok $? "20 members submitted through b"
hb=$(head -1 "$ACKED")
pb=${hb%:*}
b_ran() { [ "$(grep -c "^$pb:" "$RAN")" -ge 2 ]; }
poll_s 60 b_ran
ok $? "b's worker is running b's members ($(grep -c "^$pb:" "$RAN") ran)"
pgd_kill9 b
kill "$wb" 2>/dev/null
diag "b killed with $(grep -c "^$pb:" "$RAN") of its 20 members run"
for n in a c; do
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$n")" -c 2 -f wf.work -- sh "$T/work.sh" "$RAN" \
        2>>"$T/worker.err" &
    track $!
done
for n in a c; do
    ds "$n" batch add -n 20 --numbered b1 wf.work ok >>"$ACKED" 2>>"$T/add.err"
    ok $? "20 members submitted through $n"
done
is "$(wc -l <"$ACKED" | tr -d ' ')" 60 "60 members acknowledged"
out=$(ds c batch close b1 2>&1)
ok $? "b1 closed on c: $out"
all_ran() {
    while read -r h; do grep -qx "$h" "$RAN" || return 1; done <"$ACKED"
}
poll_moving 60 "wc -l <'$RAN'" all_ran
ok $? "every acknowledged member ran ($(sort -u "$RAN" | wc -l | tr -d ' ') distinct runs of $(wc -l <"$RAN" | tr -d ' '))"
fired() { [ "$(cb_count b1 complete)" -ge 1 ] && [ "$(cb_count b1 success)" -ge 1 ]; }
poll_moving 60 "cat '$CB'; status_of a b1" fired
ok $? "b1's on_complete and on_success reached a worker"
is "$(counts_of a b1)" "60 0 60 0 0" "b1's counts (total pending done failed dead): $(status_of a b1)"
case $(cb_payload b1 complete) in
'{"batch":"b1","callback":"complete","total":60,"done":60,"failed":0,"dead":0,"failed_handles":[],"failed_handles_omitted":0}')
    r=0 ;;
*) r=1 ;;
esac
ok $r "on_complete's payload is the summary: $(cb_payload b1 complete)"
case $(cb_payload b1 success) in *'"callback":"success","total":60,"done":60,'*) r=0 ;; *) r=1 ;; esac
ok $r "on_success's payload is the summary: $(cb_payload b1 success)"

# --- failures, and the last end fires ------------------------------------------------------
out=$(ds c batch open --on-complete cb.fn --on-success cb.ok b2 2>&1)
ok $? "batch b2 opened on c: $out"
ds a batch add -n 3 --numbered b2 wf.later ok >>"$T/b2" 2>>"$T/add.err" &&
    ds c batch add -n 2 --numbered b2 wf.later fail >"$T/b2.fail" 2>>"$T/add.err"
ok $? "3 members that succeed and 2 that fail submitted through a and c"
out=$(ds a batch close b2 2>&1)
ok $? "b2 closed on a before any member ran: $out"
out=$(ds c batch add b2 wf.later ok 2>&1)
r=$?
case $out in *"batch b2 is not open"*) [ $r -ne 0 ] ;; *) false ;; esac
ok $? "a submit to closed b2 is refused: $out"
is "$(counts_of c b2)" "5 5 0 0 0" "b2: 5 members pending"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port c)" -f wf.later -- sh "$T/work.sh" "$RAN" \
    2>>"$T/worker.err" &
track $!
fired2() { [ "$(cb_count b2 complete)" -ge 1 ]; }
poll_moving 60 "cat '$RAN'; status_of a b2" fired2
ok $? "b2's on_complete reached a worker once its last member ended"
is "$(counts_of a b2)" "5 0 3 0 2" "b2: 5 members, none pending, 3 done, 2 dead (--job-retries 1): $(status_of a b2)"
p2=$(cb_payload b2 complete)
bad=0
for h in $(cat "$T/b2.fail"); do
    case $p2 in *"\"$h\""*) ;; *) bad=1 ;; esac
done
case $p2 in *'"total":5,"done":3,'*) ;; *) bad=1 ;; esac
ok $bad "its payload counts 3 done and lists the 2 failed handles: $p2"

# --- exactly once, counted at the end --------------------------------------------------
is "$(cb_count b1 complete) $(cb_count b1 success) $(cb_count b2 complete) $(cb_count b2 success)" \
    "1 1 1 0" "each callback ran exactly once, and b2's on_success never"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE uniq IN ('batch:b1:complete', 'batch:b1:success', 'batch:b2:complete', 'batch:b2:success')")" \
    0 "no callback job is left in the table"
reap
for n in a c; do
    pgd_stop "$n"
    ok $? "dsjobd $n stops on SIGTERM"
done
done_testing
