#!/bin/sh
# Batches and dependencies across servers on the postgres store: three
# dsjobd share one PostgreSQL of the test's own (tests/lib/pg.sh), with
# real workers (`dsjob worker`, which gives the command DSJOB_HANDLE and
# DSJOB_UNIQUE). The store is the one copy of both: a member joins in the
# commit of its add, its end moves the counters in the commit of the end,
# and the end that leaves a closed batch with nothing pending inserts its
# callbacks; a child is held in the table, and the end of its last parent
# releases, fails or cancels it in the same commit.
#
#   admin       a batch opened on one server is known to the others (status,
#               list); opening it again anywhere is BATCH_EXISTS; a submit
#               to a batch no server opened is refused, naming it
#   kill -9     30 members (3 x WF_MEMBERS, 10; t_pg_workflow_long.sh
#               runs 340) submitted through the three servers, b killed
#               with -9 while its worker is mid-batch, the batch closed on
#               a third server: every acknowledged member runs, the counts
#               reach total 30, done 30, and on_complete and on_success each
#               reach a worker exactly once, with the summary as payload
#   failures    a batch closed before any member ran (no worker yet): the
#               end of its last member fires on_complete, with the failed
#               members' handles; on_success never fires; a submit to the
#               closed batch is refused; a dead member retried by hand is
#               not counted again
#   graph       a three-level graph (4, 2, 1 jobs) submitted through three
#               servers before any worker: the children are held in the
#               table with their 7 edges; a child of an unknown handle is
#               refused, naming it; one server killed with -9 while its
#               worker runs the first level: the graph runs to its end, no
#               job starts before its parents' last ends, no edge or held
#               job is left, and the last level reads its parents' kept
#               results (--keep-results)
#   after-fail  a parent that fails for good: its after-fail=fail child
#               goes to the dead set ("parent H failed") and so does that
#               child's child; its after-fail=cancel child is gone; its
#               after-fail=run child runs
#   sequence    with dsjob limit --sequence on the function, a child held
#               in its parent's key and an epoch job not yet due hold no
#               place: the parent, and the job behind the epoch job, run
#
# A wait for lines of a file is one rawpeer (await_lines, until-lines: 120
# s in which the file did not grow), the condition then checked by poll_s
# or poll_moving, which bound every other wait (at least 60 s
# of nothing moving); every process is started here and stopped by its pid.
# WF_MEMBERS (10) members go through each server: t_pg_workflow_long.sh
# (make check-long) runs it with 340, a batch of 1,020.
N=${WF_MEMBERS:-10}

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start "a b c" --pg-lease 3 --pg-poll-ms 500 --max-dead 100 --job-retries 1 --verbose INFO
RAN=$T/ran
CB=$T/callbacks
ACKED=$T/acked
: >"$RAN"
: >"$CB"
: >"$ACKED"

ds() { # ds NAME ARGS...: dsjob against that server
    _s=$1
    shift
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" -t 20000 "$@"
}
# A member: records its handle, fails if its payload says so.
cat >"$T/work.sh" <<'EOF'
IFS= read -r p || : # one line ("ok", "fail"): no cat a member
echo "$DSJOB_HANDLE" >>"$1"
case $p in fail*) exit 3 ;; esac
[ -z "$2" ] || sleep "$2"
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
ds b batch add -n "$N" --numbered b1 wf.work ok >>"$ACKED" 2>>"$T/add.err"
ok $? "$N members submitted through b"
hb=$(head -1 "$ACKED")
pb=${hb%:*}
b_ran() { [ "$(grep -c "^$pb:" "$RAN")" -ge 2 ]; }
await_lines "$RAN" 2 -E "^$pb:"
poll_s 60 b_ran
ok $? "b's worker is running b's members ($(grep -c "^$pb:" "$RAN") ran)"
pgd_kill9 b
kill "$wb" 2>/dev/null
diag "b killed with $(grep -c "^$pb:" "$RAN") of its $N members run"
for n in a c; do
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$n")" -c 2 -f wf.work -- sh "$T/work.sh" "$RAN" \
        2>>"$T/worker.err" &
    track $!
done
for n in a c; do
    ds "$n" batch add -n "$N" --numbered b1 wf.work ok >>"$ACKED" 2>>"$T/add.err"
    ok $? "$N members submitted through $n"
done
is "$(wc -l <"$ACKED" | tr -d ' ')" $((3 * N)) "$((3 * N)) members acknowledged"
out=$(ds c batch close b1 2>&1)
ok $? "b1 closed on c: $out"
all_ran() { # no acknowledged handle missing from RAN (one grep, not one a handle)
    ! grep -qvxFf "$RAN" "$ACKED"
}
await_lines "$RAN" $((3 * N)) -d
poll_moving 60 "wc -l <'$RAN'" all_ran
ok $? "every acknowledged member ran ($(sort -u "$RAN" | wc -l | tr -d ' ') distinct runs of $(wc -l <"$RAN" | tr -d ' '))"
fired() { [ "$(cb_count b1 complete)" -ge 1 ] && [ "$(cb_count b1 success)" -ge 1 ]; }
await_lines "$CB" 2 -E '^batch:b1:(complete|success) ' -d
poll_moving 60 "cat '$CB'; status_of a b1" fired
ok $? "b1's on_complete and on_success reached a worker"
is "$(counts_of a b1)" "$((3 * N)) 0 $((3 * N)) 0 0" "b1's counts (total pending done failed dead): $(status_of a b1)"
case $(cb_payload b1 complete) in
"{\"batch\":\"b1\",\"callback\":\"complete\",\"total\":$((3 * N)),\"done\":$((3 * N)),\"failed\":0,\"dead\":0,\"failed_handles\":[],\"failed_handles_omitted\":0}")
    r=0 ;;
*) r=1 ;;
esac
ok $r "on_complete's payload is the summary: $(cb_payload b1 complete)"
case $(cb_payload b1 success) in *"\"callback\":\"success\",\"total\":$((3 * N)),\"done\":$((3 * N)),"*) r=0 ;; *) r=1 ;; esac
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
await_lines "$CB" 1 -E '^batch:b2:complete '
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
hf=$(head -1 "$T/b2.fail")
out=$(ds c dead retry "$hf" 2>&1)
ok $? "a dead member retried by hand on c: $out"
twice() { [ "$(grep -c "^$hf\$" "$RAN")" -ge 2 ] && [ "$(q "SELECT state FROM dsjob.jobs WHERE handle = '$hf'")" = 1 ]; }
await_lines "$RAN" 2 -x "$hf"
poll_moving 60 "cat '$RAN'" twice
ok $? "it ran again and went back to the dead set"
is "$(counts_of a b2)" "5 0 3 0 2" "and is not counted again"

# --- a three-level graph across servers, one killed ------------------------------------
# a and c again, keeping results (--keep-results), and d in b's place; the
# graph's jobs are submitted through a, c and d before any worker for them
# is up. d's worker is slow, and d is killed with -9 while it runs the
# first level.
ARGS="--pg-lease 3 --pg-poll-ms 500 --keep-results 600 --max-dead 100 --job-retries 1 --verbose INFO"
pgd_stop a
pgd_stop c
# shellcheck disable=SC2086
pgd_start_all_or_bail "a c d" $ARGS
reap # the callback and member workers of servers a and c stopped
LOG=$T/deps.log
: >"$LOG"
cat >"$T/dep.sh" <<'EOF'
cat >/dev/null
echo "start $DSJOB_HANDLE $3" >>"$1"
sleep "$2"
echo "end $DSJOB_HANDLE $3" >>"$1"
printf 'result-%s' "$DSJOB_HANDLE"
EOF
EDGES=$T/edges
sub() { # sub SERVER [--after ...] FUNC DATA: a background job's handle
    _s=$1
    shift
    ds "$_s" submit -b "$@"
}
l1a=$(sub a dep.l1 a) && l1b=$(sub c dep.l1 b) && l1c=$(sub d dep.l1 c) && l1d=$(sub d dep.l1 d)
ok $? "four first-level jobs submitted through a, c and d"
l2a=$(sub c --after "$l1a,$l1b,$l1c" dep.l2 a) && l2b=$(sub d --after "$l1c,$l1d" dep.l2 b)
ok $? "two second-level jobs, waiting for three and two of them, through c and d"
l3=$(sub a --after "$l2a,$l2b" dep.l3 c)
ok $? "a third-level job waiting for both, through a"
printf '%s %s\n' "$l2a" "$l1a" "$l2a" "$l1b" "$l2a" "$l1c" "$l2b" "$l1c" "$l2b" "$l1d" \
    "$l3" "$l2a" "$l3" "$l2b" >"$EDGES"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE owner = '(held)'")" 3 \
    "the three children are held in the table"
is "$(q "SELECT count(*) FROM dsjob.deps WHERE state = 0")" 7 "with their seven edges"
out=$(ds c submit -b --after H:nosuch:1 dep.l2 x 2>&1)
r=$?
case $out in *"no job H:nosuch:1"*) [ $r -ne 0 ] ;; *) false ;; esac
ok $? "a child of an unknown handle is refused, naming it: $out"
# Workers: the first level on d first (slow: d takes what it can), d
# killed while its worker runs one; then every level on a and c.
"$DSJOB" worker -s "127.0.0.1:$(pgd_port d)" -f dep.l1 -- sh "$T/dep.sh" "$LOG" 4 d \
    2>>"$T/worker.err" &
wd=$!
track $wd
started_d() { grep -q "^start .* d\$" "$LOG"; }
await_lines "$LOG" 1 -E '^start .* d$'
poll_s 60 started_d
ok $? "d's worker runs a first-level job"
pgd_kill9 d
kill "$wd" 2>/dev/null
diag "d killed with its worker in a job; the log so far: $(tr '\n' ' ' <"$LOG")"
for n in a c; do
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$n")" -f dep.l1 -f dep.l2 -f dep.l3 -- \
        sh "$T/dep.sh" "$LOG" 0 "$n" 2>>"$T/worker.err" &
    track $!
done
done3() { grep -q "^end $l3 " "$LOG"; }
await_lines "$LOG" 1 -E "^end $l3 "
poll_moving 60 "cat '$LOG'" done3
ok $? "the graph runs to its end, through d's kill"
# No job started before each of its parents' last end on a or c: d's worker
# was killed in its first job, so d committed no end, and the orphan of that
# run writes its end line late; the run that counted is the last on a or c.
ordered() {
    perl -e '
        my %par; open my $e, "<", $ARGV[0] or die;
        while (<$e>) { my ($c, $p) = split; push @{$par{$c}}, $p; }
        my (%lastend, @starts); my $i = 0; open my $l, "<", $ARGV[1] or die;
        while (<$l>) {
            my ($w, $h, $by) = split; $i++;
            $lastend{$h} = $i if $w eq "end" && $by ne "d";
            push @starts, [$h, $i] if $w eq "start";
        }
        my $bad = 0;
        for my $s (@starts) {
            my ($h, $at) = @$s;
            for my $p (@{$par{$h} || []}) {
                next if $lastend{$p} && $lastend{$p} < $at;
                print "# $h started before $p ended\n";
                $bad++;
            }
        }
        exit($bad ? 1 : 0);' "$EDGES" "$LOG"
}
ordered
ok $? "no child started before its parents ended (their last run, for one run twice: $(awk '$1 == "start" { print $2 }' "$LOG" | sort | uniq -d | tr '\n' ' '))"
is "$(q "SELECT count(*) FROM dsjob.deps") $(q "SELECT count(*) FROM dsjob.jobs WHERE owner = '(held)'")" \
    "0 0" "no edge and no held job is left"
res() { ds a result "$1" 2>/dev/null || ds c result "$1" 2>/dev/null; }
is "$(res "$l2a")+$(res "$l2b")" "result-$l2a+result-$l2b" \
    "the last level can read its parents' kept results"

# after-fail: a parent that fails for good (--job-retries 1), and its children.
pbad=$(sub a dep.bad x)
fchild=$(sub c --after "$pbad" dep.l2 fail-child) &&
    gchild=$(sub a --after "$fchild" dep.l3 grandchild) &&
    cchild=$(sub c --after "$pbad" --after-fail cancel dep.l2 cancel-child) &&
    rchild=$(sub a --after "$pbad" --after-fail run dep.l3 run-child)
ok $? "children with after-fail fail, cancel and run, and a grandchild"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port c)" -f dep.bad -- sh -c 'cat >/dev/null; exit 3' \
    2>>"$T/worker.err" &
track $!
ran_run() { grep -q "^end $rchild " "$LOG"; }
await_lines "$LOG" 1 -E "^end $rchild "
poll_moving 60 "cat '$LOG'" ran_run
ok $? "the after-fail=run child runs once its parent failed"
is "$(q "SELECT state || ' ' || convert_from(result, 'UTF8') FROM dsjob.jobs WHERE handle = '$fchild'")" \
    "1 parent $pbad failed" "the after-fail=fail child is in the dead set: parent $pbad failed"
is "$(q "SELECT state FROM dsjob.jobs WHERE handle = '$gchild'")" 1 "and so is its child"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE handle = '$cchild'")" 0 \
    "the after-fail=cancel child is gone"
! grep -q -e "start $fchild " -e "start $gchild " -e "start $cchild " "$LOG"
ok $? "none of those three ran"

# A sequence (dsjobd limit --sequence) on a function whose child waits in
# its parent's key: the held child neither runs nor heads the key, so the
# parent runs, then the child.
ds a limit dep.sq --sequence=hold >/dev/null
ok $? "dsjob limit dep.sq --sequence=hold on a"
sp=$(sub a -u k:1 dep.sq parent) && sc=$(sub a -u k:2 --after "$sp" dep.sq child)
ok $? "a parent and its child in one key of dep.sq"
"$DSJOB" worker -s "127.0.0.1:$(pgd_port a)" -f dep.sq -- sh "$T/dep.sh" "$LOG" 0 a \
    2>>"$T/worker.err" &
track $!
ran_sq() { grep -q "^end $sc " "$LOG"; }
await_lines "$LOG" 1 -E "^end $sc "
poll_moving 60 "cat '$LOG'" ran_sq
ok $? "the parent ran, then its held child: the child did not hold up its key"
# An epoch job not due yet holds no place in its key's sequence either.
later=$(sub a -u k2:1 --at $(($(date +%s) + 3600)) dep.sq later) && now=$(sub a -u k2:2 dep.sq now)
ok $? "an epoch job due in an hour, then a job of the same key"
ran_now() { grep -q "^end $now " "$LOG"; }
await_lines "$LOG" 1 -E "^end $now "
poll_moving 60 "cat '$LOG'" ran_now
ok $? "the later-submitted job ran first: the epoch job holds no place until due"
! grep -q "^start $later " "$LOG"
ok $? "and the epoch job did not run"

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
