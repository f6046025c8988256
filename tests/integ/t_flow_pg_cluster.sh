#!/bin/sh
# Flow control across three dsjobd sharing one PostgreSQL (tests/lib/pg.sh),
# with real workers (the gearman CLI, which is libgearman) on every server.
# Each worker appends "START-NS END-NS LABEL" to a file as a job ends; the
# test reads, after each part, the most jobs of a function that ran at
# once (every start is a sample) and the most starts in any window.
#
#   settings    a limit set on A answers OK after its commit and reaches B
#               and C (NOTIFY flow)
#   concurrency concurrency 2, jobs submitted round the three servers:
#               never more than 2 at once in the cluster
#   rate        rate 10/s burst 5, six workers: starts in any 3 s window
#               at most burst + rate x 3 s + the workers (dsjobd(8)'s bound)
#   kill -9     concurrency 3, one server killed mid-run: at most 3 plus
#               the jobs it was running at once; every job runs; after its
#               leases ran out the other two run 3 at once again
#   pause       A started again shows the stored settings; a pause on B
#               shows on A and C and holds on B and C: their workers run
#               another function's jobs and none of the paused one's;
#               resume on C runs them
#   deadline    a job submitted to A with --expire-in 1, no worker
#               anywhere: it lands in a dead set as expired, and the
#               workers that come later never run it
# Every wait is for an event, bounded by 120 s of nothing moving.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

skip_unless_gearman
pg_test_begin

LEASE=6
SERVER_ARGS="--pg-lease $LEASE --pg-poll-ms 200 --max-dead 100 --verbose NOTICE"
pg_start_or_bail
# shellcheck disable=SC2086 # SERVER_ARGS are words
pgd_start_all_or_bail "a b c" $SERVER_ARGS

ds() { # ds SERVER ARG...
    _s=$1
    shift
    timeout -k 2 60 "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" "$@"
}
settings_is() { [ "$(ds "$1" limit "$2" --format tsv 2>/dev/null | cut -f2)" = "$3" ]; }
lines() { cat "$@" 2>/dev/null | wc -l; }
# wait_lines N FILE: until FILE has N lines, bounded by 120 s of none added
# (one process: rawpeer until-lines).
wait_lines() { await_lines "$2" "$1"; }

# The workers' command: the job's start and end, its label, its payload.
cat >"$T/rec.sh" <<'EOS'
s=$(date +%s%N)
p=$(cat)
[ -z "$3" ] || sleep "$3"
echo "$s $(date +%s%N) $2 $p" >>"$1"
EOS
# worker SERVER FUNCTION... -- FILE LABEL [SLEEP]: one gearman -w.
worker() {
    _s=$1
    shift
    _fs=
    while [ "$1" != -- ]; do
        _fs="$_fs -f $1"
        shift
    done
    shift
    # shellcheck disable=SC2086 # _fs are words
    "$GEARMAN" -h 127.0.0.1 -p "$(pgd_port "$_s")" -w $_fs -- sh "$T/rec.sh" "$@" \
        >/dev/null 2>>"$T/worker.err" &
    track $!
}
# submit FUNCTION N: N background jobs, a third to each server, the three
# at once; before the workers come, so that the limits, not the submits,
# set the pace.
submit() {
    _pids=
    for _s in a b c; do
        (
            _i=1
            while [ "$_i" -le "$2" ]; do
                ds "$_s" submit -b "$1" "$1-$_s-$_i" >/dev/null ||
                    echo "submit $1-$_s-$_i to $_s failed" >&2
                _i=$((_i + 3))
            done
        ) &
        _pids="$_pids $!"
    done
    for _p in $_pids; do wait "$_p"; done
}
# most_at_once FILE [FROM-NS]: the most jobs running at once (of those
# that started at or after FROM-NS), sampled at every start.
most_at_once() {
    awk -v from="${2:-0}" '$1 >= from { print $1, 1; print $2, -1 }' "$1" | sort -k1,1n -k2,2n |
        awk '{ n += $2; if (n > m) m = n } END { print m + 0 }'
}
# most_in_window FILE MS: the most starts in any window of MS ms.
most_in_window() {
    awk '{ print $1 }' "$1" | sort -n | awk -v w="$2" '
        { t[NR] = $1 }
        END { j = 1; for (i = 1; i <= NR; i++) { while (t[i] - t[j] >= w * 1000000) j++;
              if (i - j + 1 > m) m = i - j + 1 } print m + 0 }'
}

# settings -----------------------------------------------------------------
ds a limit fc --concurrency 2 >"$T/limit.out" 2>&1
ok $? "limit on A answers OK"
is "$(pg_psql -c "SELECT settings FROM dsjob.flow WHERE name = 'fc'")" "concurrency 2" \
    "the row is committed when the OK comes"
poll settings_is b fc "concurrency 2"
ok $? "B follows the setting"
poll settings_is c fc "concurrency 2"
ok $? "C follows the setting"

# concurrency --------------------------------------------------------------
submit fc 30
for n in a b c; do
    worker "$n" fc -- "$T/fc" "fc.$n" 0.2
    worker "$n" fc -- "$T/fc" "fc.$n" 0.2
done
wait_lines 30 "$T/fc"
ok $? "30 jobs of fc ran"
m=$(most_at_once "$T/fc")
diag "fc: at most $m at once (limit 2); servers: $(awk '{ print $3 }' "$T/fc" | sort | uniq -c | tr '\n' ' ')"
[ "$m" -le 2 ]
ok $? "never more than 2 at once across the three servers (saw $m)"

# rate ---------------------------------------------------------------------
ds a limit fr --rate 10/s --burst 5 >/dev/null
ok $? "limit fr rate 10/s burst 5"
poll settings_is b fr "rate 10/s burst 5" && poll settings_is c fr "rate 10/s burst 5"
ok $? "B and C follow it"
submit fr 90
for n in a b c; do
    worker "$n" fr -- "$T/fr" "fr.$n"
    worker "$n" fr -- "$T/fr" "fr.$n"
done
wait_lines 90 "$T/fr"
ok $? "90 jobs of fr ran"
w=$(most_in_window "$T/fr" 3000)
diag "fr: at most $w starts in 3 s (bound 5 + 30 + 6 workers = 41)"
[ "$w" -le 41 ]
ok $? "starts in any 3 s window within the documented bound (saw $w)"

# kill -9 ------------------------------------------------------------------
ds b limit fk --concurrency 3 >/dev/null
ok $? "limit fk concurrency 3"
poll settings_is a fk "concurrency 3" && poll settings_is c fk "concurrency 3"
ok $? "A and C follow it"
submit fk 45
for n in a b c; do
    for _ in 1 2 3; do worker "$n" fk -- "$T/fk" "fk.$n" 1.5; done
done
# Mid-run: 9 jobs ended and A is running one (its limit line's RUNNING).
a_running() {
    [ "$(lines "$T/fk")" -ge 9 ] &&
        [ "$(ds a limit fk --format tsv 2>/dev/null | cut -f3)" -ge 1 ] 2>/dev/null
}
poll_moving 120 "lines $T/fk" a_running
ok $? "A runs a job of fk, 9 ended"
killed=$(date +%s%N)
pgd_kill9 a
diag "killed A at $killed"
distinct_fk() { [ "$(awk '{ print $4 }' "$T/fk" | sort -u | wc -l)" -ge 45 ]; }
poll_moving 120 "lines $T/fk" distinct_fk
ok $? "every job of fk ran (A's leased ones after its leases ran out)"
# The jobs that A's workers ran across the kill.
across=$(awk -v k="$killed" '$3 == "fk.a" && $1 <= k && $2 > k' "$T/fk" | wc -l)
m=$(most_at_once "$T/fk")
diag "fk: at most $m at once, $across running on A when it was killed"
[ "$m" -le $((3 + across)) ]
ok $? "at most the limit plus A's runs across the kill (saw $m, bound $((3 + across)))"
after=$((killed + LEASE * 1000000000))
m2=$(most_at_once "$T/fk" "$after")
n2=$(awk -v f="$after" '$1 >= f' "$T/fk" | wc -l)
diag "fk after A's leases ran out: $n2 jobs, at most $m2 at once"
[ "$m2" -le 3 ]
ok $? "after the lease: within the limit again (saw $m2)"
[ "$n2" -lt 6 ] || [ "$m2" -eq 3 ]
ok $? "after the lease: B and C run 3 at once again (saw $m2 of $n2 jobs)"

# pause --------------------------------------------------------------------
# shellcheck disable=SC2086 # SERVER_ARGS are words
pgd_start_or_bail a $SERVER_ARGS
poll settings_is a fk "concurrency 3"
ok $? "A started again with the stored settings"
ds b pause fp >/dev/null
ok $? "pause fp on B"
poll settings_is a fp paused && poll settings_is c fp paused
ok $? "A and C show it paused"
for n in b c; do worker "$n" fp fm -- "$T/fpm" "fpm.$n"; done
for n in b c; do poll pgd_registered "$n" fp 1; done
for n in b c; do ds "$n" submit -b fp "fp-$n" >/dev/null; done
# Markers of another function, submitted after, in two rounds: a worker
# that ran the first asked for work again with fp's jobs there, and would
# have started one of them before the second round's marker.
for n in b c; do ds "$n" submit -b fm "fm-$n-1" >/dev/null; done
wait_lines 2 "$T/fpm"
for n in b c; do ds "$n" submit -b fm "fm-$n-2" >/dev/null; done
await_lines "$T/fpm" 4 -E " fm-"
ok $? "the workers ran the other function's jobs"
is "$(grep -c " fp-" "$T/fpm")" 0 "and none of the paused function's"
ds c resume fp >/dev/null
ok $? "resume fp on C"
wait_lines 6 "$T/fpm"
ok $? "the paused jobs ran after resume"

# deadline -----------------------------------------------------------------
h=$(ds a submit -b --expire-in 1 fd stale 2>&1)
case $h in H:*) ok 0 "a submit with --expire-in 1 to A, no worker anywhere ($h)" ;;
*) ok 1 "a submit with --expire-in 1 to A: $h" ;; esac
dead_on() { # dead_on SERVER FUNC: "HANDLE ERROR" lines of its dead set
    ds "$1" dead list "$2" --format tsv 2>/dev/null | awk -F'\t' '$1 ~ /^H:/ { print $1, $9 }'
}
expired_somewhere() {
    for n in a b c; do dead_on "$n" fd | grep -q "^$h expired\$" && return 0; done
    return 1
}
poll expired_somewhere
ok $? "it shows in a server's dead set as expired"
for n in b c; do worker "$n" fd -- "$T/fd" "fd.$n"; done
ds b submit -b fd fresh >/dev/null
await_lines "$T/fd" 1 -E " fresh\$"
ok $? "the workers that came later run the next job"
! grep -q " stale\$" "$T/fd"
ok $? "and no server ran the expired one"
is "$(pg_psql -c "SELECT count(*) FROM dsjob.jobs WHERE handle = '$h' AND state = 0")" 0 \
    "its row is not live"
reap
pgd_stop_all
done_testing
