#!/bin/sh
# Expiring jobs, bounded retention and unique keys held after a job ends,
# with real workers (`dsjob worker`, the gearman
# CLI as worker and as client) against dsjobd on a SQLite work dir.
#
# Asserts: a background job submitted with --expire-in 1 while no worker
# exists lands in the dead set as "expired", and a worker that arrives
# afterwards never gets it (it gets a later job, which shows it asked);
# a job submitted already past its deadline (OPTION_REQ deadline=1) while
# a worker waits is not handed to it (the check at grab, before the tick);
# the deadline is stored (its SQLite row) and an expiry that is due after
# a kill -9 still happens after the restart, without a worker; a job
# that started before its deadline and was running at a kill -9 past it
# runs again after the restart, not expired (a deadline is for starting); a
# function's "maxage" expires a plain Gearman client's job too; past
# --max-kept the oldest kept result goes first and max_kept counts it,
# and past --dead-max-age a dead job goes; with "uniquefor", a submit of
# an ended job's key gets its handle and (gearman CLI, foreground) its
# result without running it again, and once the window is over a new job.
# Every wait polls for the event (at most 120 s under load); nothing
# asserts how long anything took.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

dsjob_test_begin "the gearman CLI is the plain Gearman worker and client"

dead_of() { # dead_of FUNC: "HANDLE ERROR" lines of its dead set
    ds dead list "$1" --format tsv 2>/dev/null | awk -F'\t' '$1 ~ /^H:/ { print $1, $9 }'
}
has_dead() { dead_of "$1" | grep -q "^$2 expired\$"; }
# until_dead FUNC HANDLE: until HANDLE is in FUNC's dead set (one rawpeer
# asking the server, where a poll started a dsjob, an awk and a grep a
# try), then has_dead: it is there as expired.
until_dead() { await_admin "show dead $1" "$2	*" && has_dead "$1" "$2"; }
stat_of() { ds stats --format tsv 2>/dev/null | awk -F'\t' -v n="$1" '$1 == n { print $NF }'; }
stat_is() { [ "$(stat_of "$1")" = "$2" ]; }
lines_of() { [ -f "$1" ] && wc -l <"$1" | tr -d ' ' || echo 0; }
has_line() { [ -f "$1" ] && grep -qx "$2" "$1"; }

W=$T/work
mkdir -p "$W"

# --- 6: a deadline per submit; the worker that comes later never sees it ---
server_start dsjobd --store sqlite --work-dir "$W" --max-dead 100 --verbose INFO ||
    exit 1
h1=$(ds submit -b --expire-in 1 fexp stale 2>&1)
case $h1 in H:*) ok 0 "a background submit with --expire-in 1 is taken ($h1)" ;;
*) ok 1 "a background submit with --expire-in 1 is taken: $h1" ;; esac
until_dead fexp "$h1"
ok $? "with no worker it lands in the dead set as expired ($(dead_of fexp))"
is "$(stat_of 'dsjob_jobs_expired_total{function="fexp"}')" 1 "dsjob_jobs_expired_total counts it"
grep -q 'job expired handle='"$h1" "$SERVER_LOG"
ok $? "the log says it expired"
# A plain Gearman worker (the gearman CLI) that arrives now, and a job for it.
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fexp -- sh -c "cat >>'$T/fexp.log'; echo >>'$T/fexp.log'" \
    >/dev/null 2>&1 &
track $!
h2=$(ds submit -b fexp fresh 2>&1)
wait_line "$T/fexp.log" fresh
ok $? "the worker that came later gets the next job ($h2)"
! grep -q stale "$T/fexp.log"
ok $? "and never the expired one"
# Its worker goes now: a gearman -w whose server is gone (the kill -9
# below) reconnects in a loop that takes a core until it is stopped.
reap

# --- 6: a job already past its deadline, with a worker waiting for work ---
# The raw protocol: OPTION_REQ deadline=1 (a second of 1970), then
# SUBMIT_JOB_BG; prints the handle of JOB_CREATED.
raw_submit_expired() {
    timeout 20 perl -MIO::Socket::INET -e '
        my ($port, $func, $data) = @ARGV;
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port) or exit 2;
        sub req { my ($t, $p) = @_; print $s "\0REQ" . pack("NN", $t, length $p) . $p; }
        sub res {
            my ($h, $d) = ("", "");
            while (length $h < 12) { sysread($s, $h, 12 - length $h, length $h) or exit 3; }
            my (undef, $t, $len) = unpack("a4NN", $h);
            while (length $d < $len) { sysread($s, $d, $len - length $d, length $d) or exit 3; }
            return ($t, $d);
        }
        req(26, "deadline=1");
        my ($t, $d) = res();
        exit 4 unless $t == 27;
        req(18, "$func\0\0$data");
        ($t, $d) = res();
        exit 5 unless $t == 8;
        print "$d\n";' "$SERVER_PORT" "$@"
}
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fgrab -- sh -c "cat >>'$T/fgrab.log'; echo >>'$T/fgrab.log'" \
    >/dev/null 2>&1 &
track $!
await_admin status "fgrab	0	0	1*"
ok $? "a gearman worker for fgrab waits for work"
h4=$(raw_submit_expired fgrab late)
case $h4 in H:*) ok 0 "OPTION_REQ deadline=1 then SUBMIT_JOB_BG is taken ($h4)" ;;
*) ok 1 "OPTION_REQ deadline=1 then SUBMIT_JOB_BG is taken: $h4" ;; esac
until_dead fgrab "$h4"
ok $? "the job past its deadline lands in the dead set"
ds submit -b fgrab ontime >/dev/null 2>&1
wait_line "$T/fgrab.log" ontime
ok $? "the waiting worker gets the next job"
! grep -q late "$T/fgrab.log"
ok $? "and was never handed the one past its deadline, though it asked at once"
reap

# --- 6: maxage per function, for a plain Gearman client's job ---
ds maxage fage 1 >/dev/null
is "$(ds maxage fage)" 1 "maxage fage 1 is set and shown"
gearman -h 127.0.0.1 -p "$SERVER_PORT" -b -f fage -- old >/dev/null 2>&1
await_admin "show dead fage" "H:*"
ok $? "a gearman -b job of fage, not started within its maxage, is in the dead set ($(dead_of fage))"

h5=$(ds submit -b --expire-in 3600 fshow x 2>&1)
ds job "$h5" --format tsv 2>/dev/null | grep -q "^deadline	[0-9]*\.[0-9][0-9][0-9]\$"
ok $? "dsjob job shows a waiting job's deadline"

# --- 6: the deadline survives a kill -9 ---
h3=$(ds submit -b --expire-in 2 fcrash later 2>&1)
server_kill9
row=$(sqlite3 "$W/dsjobd.db" "SELECT deadline_ms > 0 FROM jobs WHERE handle = '$h3'" 2>&1)
is "$row" 1 "its SQLite row holds the deadline"
server_start dsjobd --store sqlite --work-dir "$W" --max-dead 100 --verbose INFO || exit 1
until_dead fcrash "$h3"
ok $? "after kill -9 and a restart it expires with no worker ($(dead_of fcrash))"
is "$(ds maxage fage)" 1 "maxage is stored with the function"

# --- 6: a job that started before its deadline runs again after a crash ---
# A deadline is "has not started by": once the job started, its row keeps
# no deadline, and a kill -9 while it runs, past the deadline, replays it
# to run again (at least once), not to the dead set as expired.
t0=$(date +%s%3N)
h6=$(ds submit -b --expire-in 2 fstart once 2>&1)
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fstart -- sh -c \
    "cat >>'$T/fstart.log'; echo >>'$T/fstart.log'; i=0; while [ ! -f '$T/fstart.go' ] && [ \$i -lt 1200 ]; do sleep 0.1; i=\$((i + 1)); done" \
    >/dev/null 2>&1 &
track $!
wait_line "$T/fstart.log" once
ok $? "a worker started $h6 before its deadline"
row_cleared() { [ "$(sqlite3 "$W/dsjobd.db" "SELECT deadline_ms FROM jobs WHERE handle = '$h6'" 2>/dev/null)" = 0 ]; }
wait_for 120 row_cleared
ok $? "its SQLite row keeps no deadline once it started"
past() { [ "$(date +%s%3N)" -gt $((t0 + 2500)) ]; }
# The clock is the event: one sleep to about its time, then the check.
left=$((t0 + 2510 - $(date +%s%3N)))
[ "$left" -le 0 ] || sleep "$((left / 1000)).$(printf %03d $((left % 1000)))"
wait_for 120 past
server_kill9
touch "$T/fstart.go"
reap
server_start dsjobd --store sqlite --work-dir "$W" --max-dead 100 --verbose INFO || exit 1
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fstart -- sh -c "cat >>'$T/fstart.log'; echo >>'$T/fstart.log'" \
    >/dev/null 2>&1 &
track $!
wait_lines "$T/fstart.log" 2 '^once$'
ok $? "after kill -9 past its deadline and a restart it ran again"
! dead_of fstart | grep -q expired
ok $? "and did not expire ($(dead_of fstart))"
reap
server_stop

# --- 7: --max-kept drops the oldest first; --dead-max-age drops old dead jobs ---
server_start dsjobd --keep-results 3600 --max-kept 2 --max-dead 10 --dead-max-age 1 ||
    exit 1
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f fkeep -- sh -c 'printf "r:"; cat' \
    >/dev/null 2>&1 &
track $!
kept() { [ "$(ds result "$1" 2>/dev/null)" = "$2" ]; }
k1=$(ds submit -b fkeep one 2>&1)
wait_for 120 kept "$k1" r:one
ok $? "the first result is kept"
k2=$(ds submit -b fkeep two 2>&1)
wait_for 120 kept "$k2" r:two
k3=$(ds submit -b fkeep three 2>&1)
wait_for 120 kept "$k3" r:three
ok $? "so are the second and the third"
! ds result "$k1" >/dev/null 2>&1
ok $? "past --max-kept 2 the oldest is gone"
kept "$k2" r:two
ok $? "and the second stays"
is "$(stat_of 'dsjob_limit_hits_total{limit="max_kept"}')" 1 "limit_hits_total{max_kept} counts the eviction"
is "$(stat_of 'dsjob_jobs_kept{function="fkeep"}')" 2 "the jobs_kept gauge shows 2"
hd=$(ds submit -b --expire-in 0.001 fold x 2>&1)
dead_gone() { stat_is 'dsjob_limit_hits_total{limit="dead_max_age"}' 1 && [ -z "$(dead_of fold)" ]; }
wait_every 0.25 120 dead_gone
ok $? "a dead job ($hd) goes once older than --dead-max-age, counted by dead_max_age"
server_stop

# --- 8: uniquefor ---
server_start dsjobd --store sqlite --work-dir "$T/work8" || exit 1
ds uniquefor fu 3600 >/dev/null
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f fu -- sh -c "cat >>'$T/fu.log'; echo >>'$T/fu.log'; printf out" \
    >/dev/null 2>&1 &
track $!
u1=$(ds submit -b -u key fu first 2>&1)
wait_line "$T/fu.log" first
ok $? "a job with unique key 'key' runs ($u1)"
ran_once() { [ "$(lines_of "$T/fu.log")" = 1 ]; }
ended() { ds job "$u1" 2>/dev/null | grep -q 'outcome.*complete'; }
wait_for 120 ended
ok $? "and ends, kept for its key's window"
u2=$(ds submit -b -u key fu second 2>&1)
is "$u2" "$u1" "a background submit of the key within the window gets the ended job's handle"
out=$(timeout 60 gearman -h 127.0.0.1 -p "$SERVER_PORT" -f fu -u key -- third 2>&1)
is "$out" out "a plain Gearman client's foreground submit gets the ended job's result"
ran_once
ok $? "neither ran the job again"
ds uniquefor fu 1 >/dev/null
new_job() {
    u3=$(ds submit -b -u key fu fourth 2>&1)
    [ -n "$u3" ] && [ "$u3" != "$u1" ]
}
wait_every 0.25 120 new_job
ok $? "once the window (now 1 s) is over, the key makes a new job ($u3)"
wait_line "$T/fu.log" fourth
ok $? "which runs"
server_stop

done_testing
