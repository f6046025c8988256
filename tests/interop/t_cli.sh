#!/bin/sh
# The `gearman` command-line tool from gearman-tools, as client and as worker,
# against dsjobd (make check) and gearmand 1.1.20, the reference
# (t_cli_gearmand.sh, make check-long; INTEROP_SERVERS): foreground jobs run
# through a `gearman -w` worker command, payloads from stdin (with a NUL, and
# large), background jobs, high/low priorities, `-c N` workers, unique keys,
# several functions, line mode, failing commands and abandoned jobs. This is
# what shell scripts built on the CLI see, so dsjobd must give the same
# answers; every check is made against gearmand too.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

if [ -z "$GEARMAN" ] || [ ! -x "$GEARMAN" ]; then
    echo "1..0 # SKIP gearman CLI (gearman-tools) not found"
    exit 0
fi
if [ -z "$GEARADMIN" ] || [ ! -x "$GEARADMIN" ]; then
    echo "1..0 # SKIP gearadmin (gearman-tools) not found"
    exit 0
fi

CHECKS=27

status_is() { # status_is FUNC LINE
    [ "$(status_of "$1")" = "$2" ]
}

checks() {
    d="$T/$K"
    mkdir -p "$d"

    # A foreground job through a worker command.
    gm -w -f cli_up -c 1 -- tr a-z A-Z &
    w=$!
    track $w
    out=$(gm -f cli_up "hello world")
    same "$out" "HELLO WORLD" "gearman -w worker runs its command on the payload"
    wait $w
    ok $? "$K: gearman -w -c 1 exits 0 after its one job"

    # The payload from stdin, with a NUL byte; and a large one.
    gm -w -f cli_wc -c 1 -- wc -c &
    track $!
    out=$(printf 'abc\000def\n' | gm -f cli_wc | tr -d ' ')
    same "$out" "8" "payload from stdin with a NUL reaches the worker byte for byte"

    head -c 300000 /dev/urandom >"$d/big"
    gm -w -f cli_md5 -c 1 -- md5sum &
    track $!
    out=$(gm -f cli_md5 <"$d/big")
    same "$out" "$(md5sum <"$d/big")" "300 kB random payload from stdin round-trips"

    # No command: the worker prints the payload and answers with nothing.
    gm -w -f cli_echo -c 1 >"$d/echo" &
    w=$!
    track $w
    out=$(gm -f cli_echo "echo-me")
    wait $w
    same "[$out] [$(cat "$d/echo")]" "[] [echo-me]" \
        "gearman -w without a command prints the payload, the client gets an empty result"

    # Background jobs, queued while no worker exists.
    gm -b -f cli_bg "bg1"
    ok $? "$K: gearman -b returns at once when no worker exists"
    out=$(gm -v -b -f cli_bg "bg2")
    echo "$out" | grep -Eq '^Task created: H:[^[:space:]]+:[0-9]+$'
    rc=$?
    ok $rc "$K: gearman -v -b prints 'Task created: H:...:N'"
    [ $rc -eq 0 ] || diag "  got '$out'"
    same "$(status_of cli_bg)" "cli_bg	2	0	0" "status counts the 2 queued background jobs"
    gm -w -f cli_bg -c 2 -- sh -c "cat >>'$d/bg'; echo >>'$d/bg'"
    same "$(cat "$d/bg" 2>/dev/null)" "bg1
bg2" "a later worker runs the background jobs, first in first out"
    check "status drops to 0 once the background jobs ran" \
        eval 'await_admin status "cli_bg	0	0	0" && status_is cli_bg "cli_bg	0	0	0"'

    # Priorities: -I (high) before normal before -L (low), FIFO in each.
    gm -b -L -f cli_pri low1 && gm -b -L -f cli_pri low2 &&
        gm -b -f cli_pri norm1 && gm -b -I -f cli_pri high1 &&
        gm -b -f cli_pri norm2 && gm -b -I -f cli_pri high2
    ok $? "$K: six background jobs at three priorities queued"
    gm -w -f cli_pri -c 6 -- sh -c "cat >>'$d/pri'; echo >>'$d/pri'"
    same "$(tr '\n' ' ' <"$d/pri" 2>/dev/null)" "high1 high2 norm1 norm2 low1 low2 " \
        "a worker gets high, then normal, then low jobs, FIFO within each"

    gm -w -f cli_fpri -c 2 -- tr a-z A-Z &
    track $!
    out="$(gm -I -f cli_fpri "hi") $(gm -L -f cli_fpri "lo")"
    same "$out" "HI LO" "foreground -I and -L jobs get their results"

    # -c N: exactly N jobs, then exit.
    for i in 1 2 3 4; do gm -b -f cli_cnt "j$i"; done
    gm -w -f cli_cnt -c 3 -- sh -c "cat >>'$d/cnt'; echo >>'$d/cnt'"
    rc=$?
    same "$rc $(tr '\n' ' ' <"$d/cnt" 2>/dev/null)" "0 j1 j2 j3 " "gearman -w -c 3 runs 3 jobs and exits 0"
    # (polled: the server may not have seen the worker's disconnect yet)
    check "the 4th job is still queued after the -c 3 worker left" \
        eval 'await_admin status "cli_cnt	1	0	0" && status_is cli_cnt "cli_cnt	1	0	0"'

    # Unique keys: two foreground clients with the same -u share one job.
    gm -f cli_uniq -u KEY1 "payload" >"$d/u1" &
    c1=$!
    track $c1
    gm -f cli_uniq -u KEY1 "payload" >"$d/u2" &
    c2=$!
    track $c2
    check "two foreground clients with one -u: one job, 2 waiting clients (GET_STATUS_UNIQUE)" \
        await_packet "42 KEY1|1|0|0|0|2" 41 KEY1
    same "$(status_of cli_uniq)" "cli_uniq	1	0	0" "status shows one job for the two unique clients"
    gm -w -f cli_uniq -c 1 -- sh -c "cat >>'$d/uw'; echo >>'$d/uw'; echo RESULT" &
    track $!
    wait $c1
    wait $c2
    same "$(cat "$d/u1") $(cat "$d/u2")" "RESULT RESULT" "both clients of the coalesced job get the single result"
    same "$(cat "$d/uw")" "payload" "the worker ran the coalesced job once"

    gm -b -u KEY2 -f cli_ubg "a" && gm -b -u KEY2 -f cli_ubg "a"
    same "$(status_of cli_ubg)" "cli_ubg	1	0	0" "two background submits with the same -u make one job"

    # Several functions.
    gm -w -f cli_fa -f cli_fb -c 2 -- tr a-z A-Z &
    track $!
    out="$(gm -f cli_fa "one") $(gm -f cli_fb "two")"
    same "$out" "ONE TWO" "one worker with two -f functions serves both"

    gm -w -f cli_pa -f cli_pb -c 2 -- sh -c 'echo "[$(cat)]"' &
    track $!
    out=$(gm -P -f cli_pa -f cli_pb "z" | sort | tr '\n' ' ')
    same "$out" "cli_pa: [z] cli_pb: [z] " "a client with two -f and -P gets a prefixed result from each"

    # A worker of two functions: the function order of 1.1.20 (--priority
    # function, the default): the one it registered last (the CLI registers
    # its -f in reverse) first, by priority within it.
    gm -b -f cli_oa a1 && gm -b -f cli_ob b1 && gm -b -f cli_oa a2 &&
        gm -b -L -f cli_ob l1 && gm -b -I -f cli_oa h1 && gm -b -f cli_ob b2
    gm -w -f cli_oa -f cli_ob -c 6 -- sh -c "cat >>'$d/ord'; echo >>'$d/ord'"
    same "$(tr '\n' ' ' <"$d/ord" 2>/dev/null)" "h1 a1 a2 b1 b2 l1 " \
        "a worker of two functions drains one, by priority, then the other"

    # Line mode.
    gm -w -f cli_lines -c 6 -- wc -c &
    track $!
    out=$(printf 'l1\nl2\nl3\n' | gm -n -f cli_lines | tr -d ' ' | tr '\n' ' ')
    same "$out" "3 3 3 " "gearman -n sends one job per line, newline kept"
    out=$(printf 'l1\nl2\nl3\n' | gm -N -f cli_lines | tr -d ' ' | tr '\n' ' ')
    same "$out" "2 2 2 " "gearman -N sends one job per line, newline stripped"

    # A worker command that fails: the client sees WORK_FAIL.
    gm -w -f cli_fail -c 1 -- sh -c 'cat >/dev/null; exit 3' 2>/dev/null &
    track $!
    gm -f cli_fail "x" >/dev/null 2>"$d/fail.err"
    rc=$?
    [ $rc -ne 0 ] && grep -q "Job failed" "$d/fail.err"
    ok $? "$K: a failing worker command makes the client print 'Job failed' and exit non-zero"

    # A foreground job whose client gave up is never handed to a worker.
    gm -t 300 -f cli_gone "abandoned" >/dev/null 2>&1
    gm -b -f cli_gone "after"
    gm -w -f cli_gone -c 1 -- sh -c "cat >>'$d/gone'; echo >>'$d/gone'"
    same "$(cat "$d/gone" 2>/dev/null)" "after" "a foreground job whose client left is not given to a worker"
}

run_servers
