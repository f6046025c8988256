#!/bin/sh
# The job lifecycle beyond gearmand (dsjobd(8) JOBS): with every default, a
# background job a worker fails is gone at once on gearmand 1.1.20 and on
# dsjobd alike; with --retry-on fail it runs again after --retry-backoff, a
# restart in the middle of the backoff keeps its schedule and the text of
# its failure, --max-dead keeps it in a dead set that survives kill -9
# (with its failure times) and that retry dead puts back, and
# --keep-results keeps its outcome. Across kill -9 on --work-dir, a
# function's retry setting and a kept result survive and a dropped dead job
# stays gone. Also: show jobs detail, show job/result
# unique, --max-result-size, kept results expiring, --retry-on timeout and
# without crash, and the changing commands refused outside --admin-allow.
# The workers are Perl's Gearman::Worker, the submits and status requests
# plain binary packets.

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
    "$RAWPEER" "$SERVER_PORT" admin "$1"
}

# field JOB NAME: one field of show job (its lines taken apart by the
# shell: this runs a hundred times).
field() {
    _fr=$(admin "show job $1")
    while IFS= read -r _fl; do
        case $_fl in "$2 "*) printf '%s\n' "${_fl#"$2 "}" ;; esac
    done <<EOT
$_fr
EOT
}

# submit_bg FUNCTION UNIQUE PAYLOAD: SUBMIT_JOB_BG; prints the handle.
submit_bg() {
    _sb=$(gpacket 18 "$1" "$2" "$3")
    case $_sb in "8 "*) printf '%s\n' "${_sb#8 }" ;; esac
}

# worker FUNCTION FAILS CALLS LOG [MODE]: a Perl worker in the background,
# forked by the test's one lifecycle_worker.pl --serve (whose Gearman::Worker
# is loaded once); reap stops and waits for its workers too.
mkfifo "$T/.wq" "$T/.wa" || { echo "Bail out! mkfifo"; exit 1; }
perl "$WORKER" --serve "$T/.wq" "$T/.wa" >/dev/null &
_ws_pid=$!
exec 7>"$T/.wq" 6<"$T/.wa"
worker() {
    _wl=$SERVER_PORT
    for _wa in "$@"; do _wl="$_wl	$_wa"; done
    printf '%s\n' "$_wl" >&7
    read -r _wp <&6 || { echo "Bail out! the worker spawner is gone"; exit 1; }
}
# reap: lib.sh's, after the spawner's workers.
reap() {
    echo reap >&7
    read -r _wp <&6
    for _p in $_bg_pids; do kill -TERM "$_p" 2>/dev/null; done
    for _p in $_bg_pids; do wait "$_p" 2>/dev/null; done
    _bg_pids=""
}
# At the end: the spawner ends its workers and itself at the end of its input.
trap 'reap; exec 7>&- 6<&-; wait $_ws_pid; server_stop_all; rm -rf "$TEST_TMPDIR"' EXIT

calls() { # calls LOG: its lines, counted by the shell
    _n=0
    if [ -f "$1" ]; then
        while IFS= read -r _l; do _n=$((_n + 1)); done <"$1"
    fi
    echo $_n
}

has_calls() { # has_calls LOG N: waits (bounded) until LOG has N lines
    await_lines "$1" "$2"
}

state_is() { # state_is HANDLE STATE: waits (bounded) until show job says so
    await_admin "show job $1" "state $2"
}

no_jobs_of() { # no_jobs_of FUNCTION: waits (bounded) until status shows no job of it
    await_admin status "$1	0	0	*"
}

# --- 1.1.20's behaviour, on both servers: a failed background job is gone.
defaults() {
    h=$(submit_bg lc_fail "" payload)
    check "a background submit is answered" [ -n "$h" ]
    worker lc_fail 99 1 "$T/$K.defaults.log"
    check "the worker is called" has_calls "$T/$K.defaults.log" 1
    check "after WORK_FAIL the job is gone from status" no_jobs_of lc_fail
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
server_start dsjobd --retry-on fail --retry-backoff 2 -j 5 --keep-results 60 ||
    { echo "Bail out! dsjobd did not start"; exit 1; }
h=$(submit_bg lc_retry u-retry x)
worker lc_retry 2 3 "$T/retry.log"
check "retry: the job completes on its third attempt" has_calls "$T/retry.log" 3
check "retry: and is then done" state_is "$h" done
same "$(field "$h" attempts)" 2 "retry: show job counts two failed attempts"
same "$(field "$h" outcome)" complete "retry: its outcome is complete"
# The waits: a random point in the upper half of 2 s doubled per attempt
# already failed (1-2 s, then 2-4 s), rounded up to whole seconds and fired
# at the start of the due second: never under a second.
gaps=$(awk 'NR > 1 { printf "%s ", ($1 - prev >= 1.0) ? "ok" : "short" } { prev = $1 }' \
    "$T/retry.log")
same "$gaps" "ok ok " "retry: each retry came after its backoff, not at once"
same "$(admin "show result $h")" "OK complete 6 0 0 6
done:x" "retry: show result gives the kept result"
same "$(gpacket 15 "$h")" "20 $h|1|0|0|0" "retry: GET_STATUS still knows it, not running"
same "$(gpacket 41 u-retry)" "42 u-retry|1|0|0|0|0" "retry: GET_STATUS_UNIQUE too"
same "$(admin "show result unique lc_retry u-retry")" "OK complete 6 0 0 6
done:x" "show result unique FUNCTION UNIQUE: the same kept result"
same "$(admin "show job unique lc_retry u-retry" | sed -n 's/^\(handle\|state\|outcome\) //p' |
    tr '\n' ' ')" "$h done complete " "show job unique FUNCTION UNIQUE: the kept job"
same "$(admin "show job unique lc_retry nope")" "ERR UNKNOWN_JOB" "show job unique: an unknown key"
hq=$(submit_bg lc_idle u-idle q)
same "$(admin "show jobs detail" | grep -v "^$h	" | grep -v '^\.$' | cut -f1-5,7,8)" \
    "$hq	lc_idle	normal	queued	0	1	u-idle" "show jobs detail: a queued job's line"
same "$(admin "show jobs detail" | grep "^$h	" | cut -f1-5,7,8)" \
    "$h	lc_retry	normal	done	2	1	u-retry" "show jobs detail: the kept job's line, after the live ones"
same "$(admin "show jobs detail" | tail -n 2 | cut -f1)" "$h
." "show jobs detail: the kept job comes last"
reap
server_stop

# --- A restart in the middle of a backoff keeps the schedule.
args="--work-dir $T/wd --retry-on fail --retry-backoff 60 -j 5"
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not start"; exit 1; }
h=$(submit_bg lc_sched "" y)
worker lc_sched 1 1 "$T/sched.log"
check "backoff: the job is retrying after its first failure" state_is "$h" retrying
at=$(field "$h" run_at)
check "backoff: its run-at time is ahead" [ "$at" -gt "$(date +%s)" ]
same "$(field "$h" error)" WORK_FAIL "backoff: show job gives its failure's text"
reap
server_kill9
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not restart"; exit 1; }
same "$(field "$h" state)" retrying "backoff: after kill -9 and a restart it is still retrying"
same "$(field "$h" run_at)" "$at" "backoff: at the same run-at time"
same "$(field "$h" attempts)" 1 "backoff: with its attempt counted"
same "$(field "$h" error)" WORK_FAIL "backoff: and its failure's text, kept in its row"
same "$(admin "show jobs detail" | grep "^$h	")" "$h	lc_sched	normal	retrying	1	$at	1	-" \
    "show jobs detail: the retrying job, its run-at time, no unique key"
# The admin priority command rewrites a stored job too, unacknowledged; the
# store commits in order, so a background submit acknowledged after it is
# proof that the rewrite is on disk (a fixed sleep raced a slow fsync).
h3=$(submit_bg lc_prio "" z)
same "$(admin "priority $h3 high")" "OK" "priority: a queued stored job moves to high"
check "priority: a later acknowledged submit (the commit barrier)" [ -n "$(submit_bg lc_sync "" s0)" ]
server_kill9
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not restart"; exit 1; }
same "$(field "$h3" priority)" high "priority: after kill -9 and a restart it is still high"
same "$(admin prioritystatus | grep '^lc_prio' | cut -f2)" 1 "priority: and queued as high"
server_stop

# --- The dead set survives kill -9, and retry dead puts a job back; so do a
# function's retry setting and a kept result, and a dropped dead job stays
# gone. A background submit is acknowledged once its row is committed, and
# the store commits in order: its handle is proof that the writes before it
# (the setting, the drop) are on disk too.
args="--work-dir $T/wd2 --retry-on fail -j 2 --max-dead 10 --keep-results 600"
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not start"; exit 1; }
h=$(submit_bg lc_dead u-dead pay)
hd=$(submit_bg lc_dead "" drop-me)
worker lc_dead 99 4 "$T/dead.log"
check "dead: after its two attempts the job is dead" state_is "$h" dead
check "dead: so is the second one" state_is "$hd" dead
same "$(admin "drop dead $hd")" "OK 1" "drop dead HANDLE drops it"
failed=$(admin "show dead lc_dead" | grep "^$h	" | cut -f5,6)
same "$(admin "retry lc_set 4 1.5 30")" "OK" "durable: retry FUNCTION N BASE MAX is set"
hk=$(submit_bg lc_keep u-keep k)
worker lc_keep 0 1 "$T/keep.log"
check "durable: a kept job is done" state_is "$hk" done
check "durable: a later acknowledged submit (the commit barrier)" [ -n "$(submit_bg lc_sync "" s)" ]
reap
server_kill9
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not restart"; exit 1; }
line=$(admin "show dead lc_dead" | grep "^$h	")
same "$(echo "$line" | cut -f2,3,4,7,8,9)" "lc_dead	normal	2	3	u-dead	WORK_FAIL" \
    "dead: after kill -9 show dead lists it: function, priority, attempts, size, unique, error"
echo "$failed" | grep -Eq '^[0-9]{10}	[0-9]{10}$'
ok $? "dead: it had its first and last failure times ($failed)"
same "$(echo "$line" | cut -f5,6)" "$failed" "dead: after kill -9 they are the same"
same "$(field "$h" first_failure) $(field "$h" last_failure)" "$(echo "$failed" | tr '\t' ' ')" \
    "dead: show job has them too"
same "$(admin "show job $hd")" "ERR UNKNOWN_JOB" "drop dead: the dropped job is not back after kill -9"
same "$(admin "show dead lc_dead" | cut -f1)" "$h
." "drop dead: the dead set has only the other one"
same "$(admin "retry lc_set")" "OK 4 1.500 30.000" "durable: the retry setting survives kill -9"
same "$(admin "show result $hk")" "OK complete 6 0 0 6
done:k" "durable: the kept result survives kill -9"
same "$(gpacket 15 "$hk")" "20 $hk|1|0|0|0" "durable: GET_STATUS still knows the kept job"
same "$(gpacket 41 u-keep)" "42 u-keep|1|0|0|0|0" "durable: GET_STATUS_UNIQUE too"
same "$(gpacket 15 "$h")" "20 $h|1|0|0|0" "dead: GET_STATUS knows it, not running"
same "$(admin "retry dead lc_dead")" "OK 1" "dead: retry dead puts it back"
worker lc_dead 0 1 "$T/dead2.log"
check "dead: a worker gets it again" has_calls "$T/dead2.log" 1
same "$(tail -n 1 "$T/dead2.log" | cut -d' ' -f2)" pay "dead: with its payload"
check "dead: and it is gone once done" no_jobs_of lc_dead
same "$(admin "show dead")" "." "dead: the dead set is empty"
reap
server_stop

# --- --max-dead drops the oldest; a foreground job is never retried.
server_start dsjobd --retry-on fail,exception -j 1 --max-dead 1 ||
    { echo "Bail out! dsjobd did not start"; exit 1; }
h1=$(submit_bg lc_trim "" one)
h2=$(submit_bg lc_trim "" two)
worker lc_trim 99 2 "$T/trim.log"
check "max-dead: both jobs ran" has_calls "$T/trim.log" 2
check "max-dead: the newer one is dead" state_is "$h2" dead
same "$(admin "show dead" | cut -f1)" "$h2
." "max-dead: only the newer one is kept"
same "$(admin "show job $h1")" "ERR UNKNOWN_JOB" "max-dead: the older one is dropped"
same "$(admin "show dead lc_trim" | cut -f10)" "1
." "max-dead: and counted, in show dead's last field"
reap
worker lc_fg 99 1 "$T/fg.log"
gm -f lc_fg fg-payload > /dev/null 2>&1
check "foreground: the client is told of the failure" [ $? -ne 0 ]
reap
same "$(calls "$T/fg.log")" 1 "foreground: --retry-on fail does not run it again"
# dsjob worker says why a command failed (a WORK_WARNING before WORK_FAIL,
# or WORK_EXCEPTION with --exceptions): that text is what the dead set keeps.
hw=$(submit_bg lc_sh "" w)
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f lc_sh -- sh -c 'echo oops-stderr >&2; exit 4' \
    2> /dev/null &
track $!
check "dsjob worker: its failed job is dead" state_is "$hw" dead
check "dsjob worker: the dead set keeps the command's stderr and status" \
    sh -c "printf '%s' \"\$1\" | grep -q 'oops-stderr' && printf '%s' \"\$1\" | grep -q 'status\\\\x204'" \
    _ "$(admin "show dead lc_sh" | cut -f9)"
he=$(submit_bg lc_ex "" e)
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker --exceptions -f lc_ex -- sh -c 'echo ex-text >&2; false' \
    2> /dev/null &
track $!
check "dsjob worker --exceptions: its failed job is dead" state_is "$he" dead
check "dsjob worker --exceptions: the dead set keeps the exception's text" \
    sh -c "printf '%s' \"\$1\" | grep -q 'ex-text'" _ "$(admin "show dead lc_ex" | cut -f9)"
reap
same "$(admin "retry lc_trim 3 0.5 10")" "OK" "retry FUNCTION N BASE MAX is accepted"
same "$(admin "retry lc_trim")" "OK 3 0.500 10.000" "retry FUNCTION prints the setting"
server_stop

# --- --max-result-size cuts a kept result.
server_start dsjobd --keep-results 600 --max-result-size 4 ||
    { echo "Bail out! dsjobd did not start"; exit 1; }
hc=$(submit_bg lc_cut "" abcdef)
worker lc_cut 0 1 "$T/cut.log"
check "max-result-size: the job is done" state_is "$hc" done
same "$(admin "show result $hc")" "OK complete 4 0 0 11
done" "max-result-size: show result has its first 4 bytes of 11"
same "$(field "$hc" result_size)" 11 "max-result-size: show job has the size the worker sent"
reap
server_stop

# --- --keep-results 1: a kept result goes after a second (the check above
# shows that one is kept; this one waits, bounded, for it to go).
server_start dsjobd --keep-results 1 || { echo "Bail out! dsjobd did not start"; exit 1; }
hx=$(submit_bg lc_exp u-exp e)
worker lc_exp 0 1 "$T/exp.log"
check "keep-results: the job ran" has_calls "$T/exp.log" 1
check "keep-results 1: the kept result expires" await_admin "show result $hx" "ERR UNKNOWN_JOB"
same "$(gpacket 15 "$hx")" "20 $hx|0|0|0|0" "keep-results 1: GET_STATUS no longer knows it"
same "$(gpacket 41 u-exp)" "42 u-exp|0|0|0|0|0" "keep-results 1: nor GET_STATUS_UNIQUE"
reap
server_stop

# --- --retry-on timeout: a job whose CAN_DO_TIMEOUT expires runs again,
# but with crash left out a crashed worker's job fails at once; and
# --retry-on crash alone fails a timed-out job at once.
server_start dsjobd --retry-on timeout -j 5 --max-dead 10 ||
    { echo "Bail out! dsjobd did not start"; exit 1; }
ht=$(submit_bg lc_to "" t)
worker lc_to 0 1 "$T/to.log" timeout:1
queued_again() { await_admin "show job $ht" "attempts 1" && state_is "$ht" queued; }
check "retry-on timeout: after its CAN_DO_TIMEOUT the job is queued again, one attempt" \
    queued_again
same "$(calls "$T/to.log")" 1 "retry-on timeout: the worker had it once (it still sleeps on it)"
hcr=$(submit_bg lc_crash "" c)
worker lc_crash 0 1 "$T/crash.log" crash
check "retry-on timeout: a crashed worker's job is dead at once" state_is "$hcr" dead
same "$(calls "$T/crash.log")" 1 "retry-on timeout: the crashed job ran once"
reap
server_stop
server_start dsjobd --retry-on crash -j 5 --max-dead 10 ||
    { echo "Bail out! dsjobd did not start"; exit 1; }
ht=$(submit_bg lc_to "" t)
worker lc_to 0 1 "$T/to2.log" timeout:1
check "retry-on crash: a timed-out job is dead at once" state_is "$ht" dead
field "$ht" error | grep -q CAN_DO_TIMEOUT
ok $? "retry-on crash: its error says the CAN_DO_TIMEOUT expired"
reap
server_stop

# --- Outside --admin-allow, the commands that change jobs are refused.
server_start dsjobd --admin-allow 10.0.0.0/8 --max-dead 10 ||
    { echo "Bail out! dsjobd did not start"; exit 1; }
hp=$(submit_bg lc_deny "" p)
for cmd in "retry lc_deny 3" "retry dead lc_deny" "drop dead lc_deny" "priority $hp high"; do
    admin "$cmd" | grep -q "^ERR PERMISSION_DENIED ${cmd%% *}+is+not+allowed+from+127\.0\.0\.1"
    ok $? "admin-allow: '$cmd' from 127.0.0.1 is refused"
done
admin "retry lc_deny" | grep -q "^ERR PERMISSION_DENIED"
ok $? "admin-allow: so is retry FUNCTION alone, which only prints (retry is privileged)"
same "$(field "$hp" priority)" normal "admin-allow: nor the job's priority"
same "$(admin "show dead")" "." "admin-allow: show dead is open to everyone"
server_stop

done_testing
