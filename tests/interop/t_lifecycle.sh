#!/bin/sh
# The job lifecycle beyond gearmand (dsjobd(8) JOBS): with every default, a
# background job a worker fails is gone at once on gearmand 1.1.20 and on
# dsjobd alike; with --retry-on fail it runs again after --retry-backoff, a
# restart in the middle of the backoff keeps its schedule, --max-dead keeps
# it in a dead set that survives kill -9 and that retry dead puts back, and
# --keep-results keeps its outcome. The workers are Perl's Gearman::Worker,
# the submits and status requests plain binary packets.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

if ! perl -MGearman::Worker -e 1 2>/dev/null; then
    echo "1..0 # SKIP Perl Gearman::Worker not installed"
    exit 0
fi
WORKER="$top_srcdir/tests/interop/lifecycle_worker.pl"

# admin LINE: one admin command; prints the reply up to its "." line, or its
# one OK or ERR line (and, for show result, the bytes after it).
admin() {
    timeout 20 perl -MIO::Socket::INET -e '
        my ($port, $line) = @ARGV;
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port) or exit 2;
        print $s "$line\n";
        while (defined(my $l = <$s>)) {
            if ($line =~ /^show result/ && $l =~ /^OK \S+ (\d+) \d+ \d+ \d+\n$/) {
                my ($n, $b) = ($1, ""); read($s, $b, $n + 1); print $l, $b; last;
            }
            $l =~ s/\r\n$/\n/;
            print $l;
            last if $l eq ".\n" || ($l =~ /^(OK|ERR)/ && $line !~ /^show (dead|jobs)/);
        }' "$SERVER_PORT" "$1"
}

# field JOB NAME: one field of show job.
field() {
    admin "show job $1" | sed -n "s/^$2 //p"
}

# submit_bg FUNCTION UNIQUE PAYLOAD: SUBMIT_JOB_BG; prints the handle.
submit_bg() {
    gpacket 18 "$1" "$2" "$3" | sed -n 's/^8 //p'
}

# worker FUNCTION FAILS CALLS LOG: start a Perl worker in the background.
worker() {
    perl "$WORKER" "$SERVER_PORT" "$@" &
    track $!
}

calls() {
    [ -f "$1" ] && wc -l < "$1" | tr -d ' ' || echo 0
}

has_calls() { # has_calls LOG N
    [ "$(calls "$1")" -ge "$2" ]
}

state_is() { # state_is HANDLE STATE
    [ "$(field "$1" state)" = "$2" ]
}

no_jobs_of() { # no_jobs_of FUNCTION: status shows no job of it
    status_of "$1" | grep -q "^$1	0	0	"
}

# --- 1.1.20's behaviour, on both servers: a failed background job is gone.
defaults() {
    h=$(submit_bg lc_fail "" payload)
    check "a background submit is answered" [ -n "$h" ]
    worker lc_fail 99 1 "$T/$K.defaults.log"
    check "the worker is called" poll has_calls "$T/$K.defaults.log" 1
    check "after WORK_FAIL the job is gone from status" poll no_jobs_of lc_fail
    same "$(gpacket 15 "$h")" "20 $h|0|0|0|0" "GET_STATUS: unknown once failed"
    reap
    same "$(calls "$T/$K.defaults.log")" 1 "it ran once: WORK_FAIL is not retried"
}
if [ -x "$GEARMAND" ]; then
    K=gearmand
    server_start gearmand || { echo "Bail out! gearmand did not start"; exit 1; }
    defaults
    server_stop
else
    skip_n 5 "gearmand not installed"
fi
K=dsjobd
server_start dsjobd || { echo "Bail out! dsjobd did not start"; exit 1; }
defaults
same "$(admin "show job $h")" "ERR UNKNOWN_JOB" "show job: the failed job is unknown"
server_stop

# --- --retry-on fail with a backoff, and --keep-results.
server_start dsjobd --retry-on fail --retry-backoff 3 -j 5 --keep-results 60 ||
    { echo "Bail out! dsjobd did not start"; exit 1; }
h=$(submit_bg lc_retry u-retry x)
worker lc_retry 2 3 "$T/retry.log"
check "retry: the job completes on its third attempt" poll has_calls "$T/retry.log" 3
check "retry: and is then done" poll state_is "$h" done
same "$(field "$h" attempts)" 2 "retry: show job counts two failed attempts"
same "$(field "$h" outcome)" complete "retry: its outcome is complete"
# The waits: each at least half of 3 s doubled per attempt, rounded to whole
# seconds and fired at the start of the due second: never under a second.
gaps=$(awk 'NR > 1 { printf "%s ", ($1 - prev >= 1.0) ? "ok" : "short" } { prev = $1 }' \
    "$T/retry.log")
same "$gaps" "ok ok " "retry: each retry came after its backoff, not at once"
same "$(admin "show result $h")" "OK complete 6 0 0 6
done:x" "retry: show result gives the kept result"
same "$(gpacket 15 "$h")" "20 $h|1|0|0|0" "retry: GET_STATUS still knows it, not running"
same "$(gpacket 41 u-retry)" "42 u-retry|1|0|0|0|0" "retry: GET_STATUS_UNIQUE too"
reap
server_stop

# --- A restart in the middle of a backoff keeps the schedule.
args="--work-dir $T/wd --retry-on fail --retry-backoff 60 -j 5"
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not start"; exit 1; }
h=$(submit_bg lc_sched "" y)
worker lc_sched 1 1 "$T/sched.log"
check "backoff: the job is retrying after its first failure" poll state_is "$h" retrying
at=$(field "$h" run_at)
check "backoff: its run-at time is ahead" [ "$at" -gt "$(date +%s)" ]
reap
server_kill9
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not restart"; exit 1; }
same "$(field "$h" state)" retrying "backoff: after kill -9 and a restart it is still retrying"
same "$(field "$h" run_at)" "$at" "backoff: at the same run-at time"
same "$(field "$h" attempts)" 1 "backoff: with its attempt counted"
# The admin priority command rewrites a stored job too (the rewrite commits
# within 10 ms, unacknowledged: a second is plenty).
h3=$(submit_bg lc_prio "" z)
same "$(admin "priority $h3 high")" "OK" "priority: a queued stored job moves to high"
sleep 1
server_kill9
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not restart"; exit 1; }
same "$(field "$h3" priority)" high "priority: after kill -9 and a restart it is still high"
same "$(admin prioritystatus | grep '^lc_prio' | cut -f2)" 1 "priority: and queued as high"
server_stop

# --- The dead set survives kill -9, and retry dead puts a job back.
args="--work-dir $T/wd2 --retry-on fail -j 2 --max-dead 10"
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not start"; exit 1; }
h=$(submit_bg lc_dead u-dead pay)
worker lc_dead 99 2 "$T/dead.log"
check "dead: after its two attempts the job is dead" poll state_is "$h" dead
reap
server_kill9
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not restart"; exit 1; }
line=$(admin "show dead lc_dead" | grep "^$h	")
same "$(echo "$line" | cut -f2,3,4,7,8,9)" "lc_dead	normal	2	3	u-dead	WORK_FAIL" \
    "dead: after kill -9 show dead lists it: function, priority, attempts, size, unique, error"
same "$(gpacket 15 "$h")" "20 $h|1|0|0|0" "dead: GET_STATUS knows it, not running"
same "$(admin "retry dead lc_dead")" "OK 1" "dead: retry dead puts it back"
worker lc_dead 0 1 "$T/dead2.log"
check "dead: a worker gets it again" poll has_calls "$T/dead2.log" 1
same "$(tail -n 1 "$T/dead2.log" | cut -d' ' -f2)" pay "dead: with its payload"
check "dead: and it is gone once done" poll no_jobs_of lc_dead
same "$(admin "show dead")" "." "dead: the dead set is empty"
reap
server_stop

# --- --max-dead drops the oldest; a foreground job is never retried.
server_start dsjobd --retry-on fail -j 1 --max-dead 1 ||
    { echo "Bail out! dsjobd did not start"; exit 1; }
h1=$(submit_bg lc_trim "" one)
h2=$(submit_bg lc_trim "" two)
worker lc_trim 99 2 "$T/trim.log"
check "max-dead: both jobs ran" poll has_calls "$T/trim.log" 2
check "max-dead: the newer one is dead" poll state_is "$h2" dead
same "$(admin "show dead" | cut -f1)" "$h2
." "max-dead: only the newer one is kept"
same "$(admin "show job $h1")" "ERR UNKNOWN_JOB" "max-dead: the older one is dropped"
reap
worker lc_fg 99 1 "$T/fg.log"
gm -f lc_fg fg-payload > /dev/null 2>&1
check "foreground: the client is told of the failure" [ $? -ne 0 ]
reap
same "$(calls "$T/fg.log")" 1 "foreground: --retry-on fail does not run it again"
same "$(admin "retry lc_trim 3 0.5 10")" "OK" "retry FUNCTION N BASE MAX is accepted"
same "$(admin "retry lc_trim")" "OK 3 0.500 10.000" "retry FUNCTION prints the setting"
server_stop

done_testing
