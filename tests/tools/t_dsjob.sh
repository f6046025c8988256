#!/bin/sh
# The dsjob command line, every verb, against dsjobd (make check) and
# gearmand 1.1.20, the reference (t_dsjob_gearmand.sh, make check-long;
# INTEROP_SERVERS), with the helpers of tests/interop/lib.sh:
# submit (binary stdin, streamed WORK_DATA, warnings, fail, exception,
# timeout, no server, usage errors, background, priorities, unique
# coalescing, --at), worker (fd 3 status, environment, -c 2 overlap proven
# by two jobs that wait for each other, graceful SIGTERM; --stream, --chunk
# and --warnings packet by packet through rawpeer's job, a line streamed
# before the command goes on, the failure text as WORK_WARNING + WORK_FAIL
# and as WORK_EXCEPTION, to clients with and without exceptions), interop both
# ways with the gearman CLI, the admin verbs in table, tsv and json (the
# json parsed with JSON::PP), cancel, shutdown, and the progress bar (with
# DSJOB_PROGRESS=force, and on a real terminal under script(1) if present).
# Every wait is a bounded poll; every process is started here, tracked and
# stopped at the end.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

export DSJOB
FAKE_WORKER=$top_srcdir/tests/tools/fake_worker.pl
if [ ! -x "$DSJOB" ]; then
    echo "1..0 # SKIP dsjob not built ($DSJOB)"
    exit 0
fi
if ! perl -MJSON::PP -e 1 2>/dev/null; then
    echo "1..0 # SKIP perl with JSON::PP not found"
    exit 0
fi
HAVE_GEARMAN=yes
[ -n "$GEARMAN" ] && [ -x "$GEARMAN" ] || HAVE_GEARMAN=
HAVE_SCRIPT=yes
command -v script >/dev/null 2>&1 || HAVE_SCRIPT=
# Progress must be decided by the test, not by the terminal it runs in.
unset DSJOB_PROGRESS DSJOB_SERVERS

LIFECYCLE_CHECKS=27 # lifecycle_verbs
CHECKS=$((104 + LIFECYCLE_CHECKS))

# ds ARG...: dsjob pointed at the server under test, bounded: by dsjob
# itself when it waits only for the server's answers (ds_bounded in
# tests/lib/server.sh), and a foreground submit by its -t (20 s for the
# job in all; a -t of ARG comes later and wins), which costs no timeout(1)
# process a submit; a worker (its verb first) by timeout(1).
ds() {
    if ds_bounded "$@"; then
        "$DSJOB" -s "127.0.0.1:$SERVER_PORT" "$@"
    elif [ "$1" = worker ]; then
        timeout -k 5 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" "$@"
    else
        "$DSJOB" -s "127.0.0.1:$SERVER_PORT" -t 20000 "$@"
    fi
}

# dsw ARG...: a `dsjob worker` in the background, tracked; its pid in $W.
# --foreground: a signal sent to $W reaches dsjob once; without it timeout
# forwards it and then signals its whole group, so dsjob would see two (the
# second one means "hurry": terminate the running commands). The bound is
# wide: on a loaded machine the script takes minutes to reach its last use
# of a worker started at its top.
dsw() {
    timeout --foreground -k 5 180 "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" "$@" &
    W=$!
    track $W
}

# packets [-e] FUNCTION DATA: the packets of one foreground job as
# `rawpeer PORT job` shows them (tests/lib/rawpeer.c), joined by '|' (-e:
# after OPTION_REQ exceptions).
packets() {
    # (rawpeer bounds itself: 30 s)
    "$RAWPEER" "$SERVER_PORT" job "$@" | {
        _p=
        while IFS= read -r _l; do _p=${_p:+$_p|}$_l; done
        printf '%s\n' "$_p"
    }
}

# Waits for a tracked process to end; its exit status. (The clients and
# workers are bounded by their timeout(1); a loop of kill -0 and sleep
# that stood here ended in this wait all the same.)
wait_bounded() {
    wait "$1"
}

# $GO_WAIT FILE, in a worker's command: waits (120 s at most) until the test
# makes FILE, in one process (tests/lib/rawpeer.c) rather than a sleep a try.
GO_WAIT="RAWPEER_UNTIL_S=120 '$RAWPEER' until-file"

# json EXPR [ARG]... < JSON: true if the perl EXPR holds for the decoded
# array $j (ARGs in @a).
json() {
    perl -MJSON::PP -e 'local $/; my $j = decode_json(<STDIN>); my ($e, @a) = @ARGV;
        my $r = eval $e; die $@ if $@; exit(!$r);' "$@"
}

# A port that nothing listens on (it was free a moment ago).
closed_port() {
    free_port
}

checks() {
    d="$T/$K"
    mkdir -p "$d"
    addr=127.0.0.1:$SERVER_PORT

    # --- submit and worker, the basics ---------------------------------
    dsw -f t_cat -- cat
    head -c 200000 /dev/urandom >"$d/bin"
    printf 'a\000b\000\000c' >>"$d/bin"
    ds submit t_cat <"$d/bin" >"$d/bin.out"
    rc=$?
    cmp -s "$d/bin" "$d/bin.out"
    ok $? "$K: submit: binary payload from stdin (NULs, 200 kB) comes back byte for byte (rc $rc)"
    same "$(ds submit t_cat 'from the argument')" "from the argument" "submit: DATA from the argument"
    same "$(DSJOB_SERVERS="127.0.0.1:1, $addr" timeout 20 "$DSJOB" submit t_cat env)" "env" \
        "submit: servers from DSJOB_SERVERS (the first one down)"

    # --- streaming, warnings, exception, fail --------------------------
    timeout -k 5 60 perl "$FAKE_WORKER" "$SERVER_PORT" t_fake 3 &
    track $!
    ds submit t_fake "stream:$d/go" >"$d/stream.out" 2>"$d/stream.err" &
    c=$!
    track $c
    check "submit: a WORK_DATA chunk reaches stdout before the job ends" \
        await_file "$d/stream.out" chunk1
    touch "$d/go"
    wait_bounded $c
    rc=$?
    same "$rc $(cat "$d/stream.out")" "0 chunk1chunk2end" "submit: data chunks then the result on stdout, exit 0"
    same "$(cat "$d/stream.err")" "careful" "submit: the warning goes to stderr, as sent"
    ds submit t_fake exception >"$d/exc.out" 2>"$d/exc.err"
    rc=$?
    [ $rc -eq 1 ] && holds "$d/exc.err" "bad thing happened" && [ ! -s "$d/exc.out" ]
    ok $? "$K: submit: an exception exits 1 with its text on stderr (rc $rc)"
    ds submit t_fake fail >/dev/null 2>"$d/fail.err"
    rc=$?
    [ $rc -eq 1 ] && holds "$d/fail.err" "failed"
    ok $? "$K: submit: WORK_FAIL exits 1 and says so on stderr (rc $rc)"

    dsw -f t_exit -- sh -c 'cat >/dev/null; echo "from the command" >&2; exit 3' 2>"$d/exitw.err"
    ds submit t_exit x >/dev/null 2>"$d/exit.err"
    rc=$?
    same "$rc" "1" "worker: a command exiting 3 is a failed job for the client"
    check "worker: the command's stderr passes through; the exit status is reported" \
        eval 'await_file "$d/exitw.err" "from the command" && await_file "$d/exitw.err" "exited with status 3"'
    dsw -f t_sig -- sh -c 'kill -9 $$' 2>"$d/sig.err"
    ds submit t_sig x >/dev/null 2>&1
    rc=$?
    same "$rc" "1" "worker: a command killed by a signal is a failed job"
    check "worker: the death by signal is reported on the worker's stderr" \
        await_file "$d/sig.err" "killed by signal 9"

    # --- worker --stream, --chunk, --warnings, the failure text ------
    # A line goes out as it is written: the command writes its second line
    # only once the client has the first (or "late" after 10 s).
    dsw --stream -f t_stream -- sh -c "cat >/dev/null; echo one; $GO_WAIT '$d/sw.go'
        [ -e '$d/sw.go' ] && echo two || echo late; printf tail"
    ds submit t_stream x >"$d/sw.out" 2>"$d/sw.err" &
    c=$!
    track $c
    check "worker --stream: the first line reaches submit's stdout while the command runs" \
        await_file "$d/sw.out" one
    touch "$d/sw.go"
    wait_bounded $c
    rc=$?
    printf 'one\ntwo\ntail' | cmp -s - "$d/sw.out"
    ok $? "$K: worker --stream: submit prints all of stdout once, in order, exit $rc ($(cat "$d/sw.out" | tr '\n' ' '))"
    dsw --stream -f t_lines -- sh -c "cat >/dev/null; echo one; printf 'two\n\nthree'; printf ' and more'"
    same "$(packets t_lines x)" 'DATA one\n|DATA two\n|DATA \n|DATA three and more|COMPLETE ' \
        "worker --stream: a WORK_DATA a line, the unterminated tail last, WORK_COMPLETE empty"
    dsw --chunk 4 -f t_chunk -- sh -c "cat >/dev/null; printf abc; sleep 0.1; printf 'de\nfghij'"
    same "$(packets t_chunk x)" 'DATA abcd|DATA e\nfg|DATA hij|COMPLETE ' \
        "worker --chunk 4: WORK_DATA of 4 bytes whatever the writes and newlines, then the rest"
    dsw --warnings -f t_warn -- sh -c "cat >/dev/null; echo w1 >&2; printf result
        printf 'w2 no newline' >&2" 2>"$d/warnw.err"
    same "$(packets t_warn x)" 'WARNING w1\n|WARNING w2 no newline|COMPLETE result' \
        "worker --warnings: each stderr line a WORK_WARNING; without --stream the result as before"
    check "worker --warnings: stderr is still copied to the worker's own stderr" \
        eval 'await_file "$d/warnw.err" "w2 no newline" && grep -qx w1 "$d/warnw.err"'
    dsw --warnings -f t_wfail -- sh -c "cat >/dev/null; echo e1 >&2; exit 2" 2>/dev/null
    same "$(packets t_wfail x)" "WARNING e1\\n|WARNING 'sh' exited with status 2\\n|FAIL " \
        "worker --warnings: a failure's own WORK_WARNING has the status line only"

    dsw -f t_tail -- sh -c 'cat >/dev/null; for i in 1 2 3 4 5 6; do echo err$i >&2; done; exit 3' \
        2>/dev/null
    same "$(packets t_tail x)" \
        "WARNING 'sh' exited with status 3\\nerr3\\nerr4\\nerr5\\nerr6\\n|FAIL " \
        "worker: a failure sends the status and the last 4 stderr lines as WORK_WARNING, then WORK_FAIL"
    ds submit t_tail x >"$d/tail.out" 2>"$d/tail.err"
    rc=$?
    [ $rc -eq 1 ] && [ ! -s "$d/tail.out" ] &&
        [ "$(head -5 "$d/tail.err" | tr '\n' ' ')" = "'sh' exited with status 3 err3 err4 err5 err6 " ] &&
        holds "$d/tail.err" "of 't_tail' failed"
    ok $? "$K: submit: the failure text, then 'failed', on stderr, exit 1 (rc $rc)"
    if [ -n "$HAVE_GEARMAN" ]; then
        gm -f t_tail x >/dev/null 2>"$d/gmtail.err"
        rc=$?
        [ $rc -ne 0 ] && holds "$d/gmtail.err" "exited with status 3" && grep -qx err6 "$d/gmtail.err"
        ok $? "$K: gearman CLI: a failed dsjob worker job fails, the text on its stderr (rc $rc)"
        same "$(gm -f t_lines x)" "$(printf 'one\ntwo\n\nthree and more')" \
            "gearman CLI: prints the WORK_DATA lines of a --stream worker"
    else
        skip_n 2 "$K: gearman CLI not installed"
    fi

    dsw --exceptions -f t_exc -- sh -c "cat >/dev/null; echo why >&2; exit 4" 2>/dev/null
    same "$(packets -e t_exc x)" "EXCEPTION 'sh' exited with status 4\\nwhy" \
        "worker --exceptions: WORK_EXCEPTION with the status and stderr, to a client that asked"
    case $K in
    gearmand) want='FAIL \0' ;;
    *) want='FAIL ' ;;
    esac
    same "$(packets t_exc x)" "$want" \
        "worker --exceptions: a client that did not ask gets WORK_FAIL (gearmand: with a stray NUL)"
    ds submit t_exc x >"$d/exc2.out" 2>"$d/exc2.err"
    rc=$?
    [ $rc -eq 1 ] && [ ! -s "$d/exc2.out" ] &&
        grep -q "of 't_exc' raised an exception: 'sh' exited with status 4\$" "$d/exc2.err" &&
        grep -qx why "$d/exc2.err"
    ok $? "$K: submit: the exception's text on stderr, exit 1 (rc $rc)"
    if [ -z "$HAVE_GEARMAN" ]; then
        skip_n 1 "$K: gearman CLI not installed"
    elif [ "$K" = gearmand ]; then
        # gearmand 1.1.20's WORK_FAIL with the stray NUL: libgearman waits on (dsjob(1) CAVEATS).
        skip_n 1 "$K: the gearman CLI never hears the end of an exception from gearmand 1.1.20"
    else
        gm -f t_exc x >/dev/null 2>&1
        rc=$?
        [ $rc -ne 0 ]
        ok $? "$K: gearman CLI (no exceptions): a --exceptions job fails (rc $rc)"
    fi
    dsw --exceptions -f t_exsig -- sh -c 'kill -9 $$' 2>/dev/null
    same "$(packets -e t_exsig x)" "EXCEPTION 'sh' was killed by signal 9" \
        "worker --exceptions: death by a signal, no stderr: the status line alone"
    dsw --exceptions -f t_long -- perl -e 'print STDERR "x" x 3000, "\n"; exit 1' 2>/dev/null
    same "$(packets -e t_long x)" \
        "EXCEPTION 'perl' exited with status 1\\n...$(printf '%1023s' '' | tr ' ' x)" \
        "worker --exceptions: of a 3000-byte stderr line, '...' and the last 1 KiB"
    ds worker --chunk 0 -f x -- cat >/dev/null 2>"$d/chunk0.err"
    rc=$?
    [ $rc -eq 2 ] && holds "$d/chunk0.err" "'--chunk'"
    ok $? "$K: usage: worker --chunk 0 exits 2 naming the option (rc $rc)"

    # --- errors of the command line ------------------------------------
    p=$(closed_port)
    timeout 20 "$DSJOB" -s "127.0.0.1:$p" submit t_cat x >/dev/null 2>"$d/down.err"
    rc=$?
    [ $rc -eq 3 ] && holds "$d/down.err" "no server reachable"
    ok $? "$K: submit: no server reachable exits 3 (rc $rc)"
    "$DSJOB" -s "127.0.0.1:$p" status >/dev/null 2>&1
    same "$?" "3" "status: no server reachable exits 3"
    # A peer that accepts and never answers was reached: a failure (1), not unreachable (3).
    timeout 10 perl -MIO::Socket::INET -e '
        my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 5,
            ReuseAddr => 1) or die; open(my $f, ">", $ARGV[0]) or die; print $f $l->sockport;
        close $f; my $c = $l->accept; sleep 8' "$d/mute.port" &
    track $!
    check "a mute listener is up" await_file "$d/mute.port" ""
    "$DSJOB" -s "127.0.0.1:$(cat "$d/mute.port")" -t 300 status >/dev/null 2>"$d/mute.err"
    rc=$?
    [ $rc -eq 1 ] && holds "$d/mute.err" "no complete reply"
    ok $? "$K: status: a server that accepts and never answers exits 1, saying so (rc $rc)"
    ds submit -p urgent t_cat x >/dev/null 2>"$d/usage.err"
    rc=$?
    [ $rc -eq 2 ] && holds "$d/usage.err" "'-p'"
    ok $? "$K: usage: a bad -p exits 2 naming the option (rc $rc)"
    ds status --bogus >/dev/null 2>"$d/usage2.err"
    rc=$?
    [ $rc -eq 2 ] && holds "$d/usage2.err" "'--bogus'"
    ok $? "$K: usage: an unknown option exits 2 naming it (rc $rc)"
    rc=0
    ds worker -f x >/dev/null 2>&1 || rc=$?
    ds frobnicate >/dev/null 2>&1 || rc="$rc $?"
    ds submit >/dev/null 2>&1 || rc="$rc $?"
    ds worker -c 0 -f x -- cat >/dev/null 2>&1 || rc="$rc $?"
    same "$rc" "2 2 2 2" "usage: no command, unknown verb, no function, -c 0 all exit 2"
    rc=0
    ds -s 127.0.0.1:99999 status >/dev/null 2>&1 || rc=$?
    ds submit -u "$(printf '%065d' 0)" t_cat x >/dev/null 2>"$d/u65.err" || rc="$rc $?"
    holds "$d/u65.err" "'-u'" || rc="$rc no-u"
    ds submit --format json t_cat x >/dev/null 2>&1 || rc="$rc $?"
    same "$rc" "2 2 2" "usage: a port over 65535, a -u over 64 bytes (naming -u), submit --format: exit 2"
    same "$(ds submit t_cat -- -5)" "-5" "submit: DATA that starts with '-' after --"
    # A closed stdout: the result must not go to the server's socket, which
    # would take fd 1; and a reader that goes away is exit 1, not SIGPIPE.
    (ds submit t_cat x >&-) 2>"$d/closed.err"
    rc=$?
    [ $rc -eq 1 ] && holds "$d/closed.err" "standard output"
    ok $? "$K: submit with stdout closed exits 1 and says why (rc $rc)"
    head -c 3000000 /dev/urandom >"$d/big"
    rc=$( (ds submit t_cat <"$d/big" 2>/dev/null; echo $? >"$d/pipe.rc") | head -c 1 >/dev/null; cat "$d/pipe.rc")
    same "$rc" "1" "submit: a reader that closes the pipe early: exit 1, not death by SIGPIPE"
    # Until it says it retries (120 s at most), then stopped: it would retry for ever.
    timeout -k 5 180 "$DSJOB" -s "127.0.0.1:$(closed_port)" worker -f x -- cat 2>"$d/wdown.err" &
    wdown=$!
    await_file "$d/wdown.err" retrying
    kill "$wdown" 2>/dev/null
    wait "$wdown" 2>/dev/null
    holds "$d/wdown.err" "retrying"
    ok $? "$K: worker: a server that cannot be reached is named on stderr, and retried"
    ds -t 300 submit t_nobody x >/dev/null 2>"$d/to.err"
    rc=$?
    [ $rc -eq 1 ] && holds "$d/to.err" "did not end within 300 ms"
    ok $? "$K: submit -t: a job that does not end in time exits 1 (rc $rc)"

    # --- background, priorities, unique, --at --------------------------
    h=$(ds submit -b t_bg bg-one)
    rc=$?
    echo "$h" | grep -Eq '^H:[^[:space:]]+:[0-9]+$'
    ok $? "$K: submit -b prints the job handle (got '$h', rc $rc)"
    ds jobs --format tsv | grep -q "^$h	"
    ok $? "$K: jobs lists the background job's handle"
    dsw -f t_bg -- sh -c "cat >>'$d/bg'"
    check "a worker runs the background job" await_file "$d/bg" bg-one

    ds submit -b -p low t_pri low1 >/dev/null && ds submit -b t_pri norm1 >/dev/null &&
        ds submit -b -p high t_pri high1 >/dev/null && ds submit -b -p low t_pri low2 >/dev/null &&
        ds submit -b -p normal t_pri norm2 >/dev/null && ds submit -b --priority high t_pri high2 >/dev/null
    ok $? "$K: six background jobs at three priorities"
    dsw -f t_pri -- sh -c "cat >>'$d/pri'; echo >>'$d/pri'"
    w_pri=$W
    check "the worker ran all six" await_admin status "t_pri	0	0	1"
    same "$(tr '\n' ' ' <"$d/pri")" "high1 high2 norm1 norm2 low1 low2 " \
        "priorities: high, then normal, then low, FIFO within each"
    kill -TERM $w_pri
    wait_bounded $w_pri
    same "$?" "0" "worker: SIGTERM while idle exits 0"

    ds submit -u KEY1 t_uniq payload >"$d/u1" &
    c1=$!
    track $c1
    ds submit -u KEY1 t_uniq payload >"$d/u2" &
    c2=$!
    track $c2
    check "unique: two foreground submits with one -u make one job" \
        await_packet "42 KEY1|1|0|0|0|2" 41 KEY1
    dsw -f t_uniq -- sh -c "cat >>'$d/uw'; echo >>'$d/uw'; printf RESULT"
    wait_bounded $c1
    r1=$?
    wait_bounded $c2
    same "$r1 $? $(cat "$d/u1") $(cat "$d/u2")" "0 0 RESULT RESULT" "unique: both clients get the one result"
    same "$(cat "$d/uw")" "payload" "unique: the worker ran the coalesced job once"

    at=$(($(date +%s) + 3600))
    h=$(ds submit --at $at t_at later)
    rc=$?
    echo "$h" | grep -Eq '^H:[^[:space:]]+:[0-9]+$'
    ok $? "$K: submit --at prints a handle (got '$h', rc $rc)"
    if [ "$K" = gearmand ]; then
        skip_n 1 "$K: show jobs has no state or run-at time"
    else
        same "$(ds jobs --format tsv | grep "^$h	" | cut -f2,4,6)" "t_at	scheduled	$at" \
            "jobs: a --at job is scheduled, at its run-at time"
    fi
    ds submit --at 1 -p high t_at x >/dev/null 2>&1
    same "$?" "2" "submit --at with -p is a usage error"

    # --- worker: fd 3, environment, progress ---------------------------
    dsw -f t_env -- sh -c "cat >/dev/null; echo \"\$DSJOB_FUNCTION \$DSJOB_HANDLE \$DSJOB_UNIQUE\" >'$d/env'
        echo 1/4 >&3; echo 2/4 >&3; echo 4/4 >&3; echo 'not a status' >&3; printf done" 2>"$d/envw.err"
    out=$(DSJOB_PROGRESS=force COLUMNS=70 timeout 20 "$DSJOB" -s "$addr" submit -u U-ENV t_env x 2>"$d/prog.err")
    same "$out" "done" "worker: the command's stdout is the result"
    echo "$(cat "$d/env")" | grep -Eq '^t_env H:[^[:space:]]+:[0-9]+ U-ENV$'
    ok $? "$K: worker: DSJOB_FUNCTION, DSJOB_HANDLE, DSJOB_UNIQUE ($(cat "$d/env"))"
    grep -q ' 1/4  25% ' "$d/prog.err" && grep -q ' 4/4 100% ' "$d/prog.err"
    ok $? "$K: worker: fd 3 N/D lines become WORK_STATUS (the client's bar shows 1/4 and 4/4)"
    # The bar: CR-redrawn lines of at most 69 columns, "[###...]" first, blanked at the end.
    perl -e 'local $/; $_ = <STDIN>; my @l = split /\r/, $_, -1; shift @l;
        my $last = pop @l; my $ok = @l >= 2 && $last eq "";
        for (@l[0 .. $#l - 1]) { $ok &&= /^\[[#.]+\] \d+\/\d+ +\d+% \S+\/s \d+:\d\d *$/ && length($_) <= 69 }
        $ok &&= $l[-1] =~ /^ +$/; exit !$ok' <"$d/prog.err"
    ok $? "$K: progress: a CR-redrawn bar with count, percent, rate and elapsed, cleared at the end"
    # A worker that reports more than its total: its numbers, but no more than 100%.
    dsw -f t_over -- sh -c "cat >/dev/null; echo 7/3 >&3; printf over" 2>/dev/null
    out=$(DSJOB_PROGRESS=force COLUMNS=70 timeout 20 "$DSJOB" -s "$addr" submit t_over x 2>"$d/over.err")
    same "$out" "over" "progress: the over-reporting job completes"
    grep -q ' 7/3 100% ' "$d/over.err" && grep -q '\[#*\]' "$d/over.err" && ! grep -q '233%' "$d/over.err"
    ok $? "$K: progress: a WORK_STATUS of 7/3 shows 7/3 at 100% with a full bar, not 233%"
    out=$(ds submit -u U-ENV2 t_env x 2>"$d/noprog.err")
    ! grep -q "$(printf '\r')" "$d/noprog.err" && ! grep -q '1/4' "$d/noprog.err"
    ok $? "$K: progress: no bar when stderr is not a terminal"
    if [ -n "$HAVE_SCRIPT" ]; then
        TERM=dumb timeout 20 script -qec "'$DSJOB' -s '$addr' submit t_env x 2>&1 >/dev/null" \
            /dev/null >"$d/tty.out" 2>&1
        grep -q '4/4 100%' "$d/tty.out"
        ok $? "$K: progress: the bar is drawn on a real terminal (script)"
    else
        skip_n 1 "$K: script(1) not installed"
    fi
    check "worker: a bad fd 3 line is reported on the worker's stderr" \
        await_file "$d/envw.err" "not N/D: 'not a status'"

    # -c 2: each job waits (at most 10 s) for the other to start.
    dsw -c 2 -f t_pair -- sh -c "me=\$(cat); touch '$d/pair.'\$me; other=a; [ \$me = a ] && other=b
        $GO_WAIT '$d/pair.'\$other
        [ -e '$d/pair.'\$other ] && printf together || printf alone"
    ds submit t_pair a >"$d/pa" &
    ca=$!
    track $ca
    ds submit t_pair b >"$d/pb" &
    cb=$!
    track $cb
    wait_bounded $ca
    wait_bounded $cb
    same "$(cat "$d/pa") $(cat "$d/pb")" "together together" \
        "worker -c 2: two jobs run at the same time (each saw the other start)"
    same "$(ds status --format tsv | grep '^t_pair	' | cut -f4)" "2" "worker -c 2 registers as two workers"

    # SIGTERM while a job runs: it finishes, its result is sent, then exit 0.
    dsw -f t_slow -- sh -c "cat >/dev/null; touch '$d/slow.started'; RAWPEER_UNTIL_S=120 '$RAWPEER' until-file '$d/slow.go'; printf finished"
    w_slow=$W
    ds submit t_slow x >"$d/slow.out" &
    c=$!
    track $c
    # (its command has started: a job only assigned would be given back)
    check "the slow job is running" await_file "$d/slow.started"
    kill -TERM $w_slow
    sleep 0.2
    touch "$d/slow.go"
    wait_bounded $c
    rc=$?
    same "$rc $(cat "$d/slow.out")" "0 finished" "worker: SIGTERM lets the running job finish and deliver"
    wait_bounded $w_slow
    same "$?" "0" "worker: and then exits 0"
    # A second signal terminates the commands, even one that closed its stdout and fd 3.
    dsw -f t_deaf -- sh -c "exec >&- 3>&-; touch '$d/deaf.started'; sleep 30" 2>"$d/deaf.err"
    w_deaf=$W
    ds submit -b t_deaf x >/dev/null
    check "the job that closed its stdout is running" await_file "$d/deaf.started"
    kill -TERM $w_deaf
    sleep 0.2
    kill -TERM $w_deaf
    wait_bounded $w_deaf
    rc=$?
    [ $rc -eq 0 ] && holds "$d/deaf.err" "killed by signal 15"
    ok $? "$K: worker: a second SIGTERM terminates a command with its outputs closed (rc $rc)"
    check "worker: after SIGTERM the worker is gone from status" await_admin status "t_slow	0	0	0"

    # --- interop with the gearman CLI -----------------------------------
    if [ -n "$HAVE_GEARMAN" ]; then
        gm -w -f t_gmw -c 1 -- tr a-z A-Z &
        track $!
        same "$(ds submit t_gmw 'hello gearman')" "HELLO GEARMAN" "interop: dsjob submit, gearman -w worker"
        dsw -f t_dsw -- tr a-z A-Z
        same "$(gm -f t_dsw 'hello dsjob')" "HELLO DSJOB" "interop: gearman client, dsjob worker"
        dsw -f t_gmcat -- cat
        same "$(printf 'abc\000def' | gm -f t_gmcat | od -An -c | tr -d ' \n')" 'abc\0def' \
            "interop: gearman client with a NUL in stdin, dsjob worker"
    else
        skip_n 3 "$K: gearman CLI not installed"
    fi

    # --- admin verbs ------------------------------------------------------
    dsw -i dsjob-test-id -f t_adm_w -- cat
    check "the t_adm_w worker is registered" await_admin status "t_adm_w	0	0	1"
    hq=$(ds submit -b t_adm_q queued-job)
    ds status >"$d/st.table"
    head -1 "$d/st.table" | grep -Eq '^FUNCTION +TOTAL +RUNNING +WORKERS$' &&
        grep -Eq '^t_adm_q +1 +0 +0$' "$d/st.table"
    ok $? "$K: status: aligned table with a header"
    same "$(ds status --format tsv | grep '^t_adm_q	')" "t_adm_q	1	0	0" "status --format tsv: no header, tab-separated"
    ds status --format json >"$d/st.json"
    json 'my ($q) = grep { $_->{function} eq "t_adm_q" } @$j; my ($w) = grep { $_->{function} eq "t_adm_w" } @$j;
          $q && $q->{total} == 1 && $q->{running} == 0 && $q->{workers} == 0 && $w && $w->{workers} == 1
          && $q->{server} eq $a[0]' "$addr" <"$d/st.json"
    ok $? "$K: status --format json: numbers and the server"
    ds workers >"$d/wk.table"
    head -1 "$d/wk.table" | grep -Eq '^ *FD +IP +ID +FUNCTIONS$' &&
        grep -Eq '^ *[0-9]+ +[0-9.]+ +dsjob-test-id +t_adm_w$' "$d/wk.table"
    ok $? "$K: workers: table with the worker's id and functions"
    ds workers --format tsv | grep -q '^[0-9]*	127\.0\.0\.1	dsjob-test-id	t_adm_w$'
    ok $? "$K: workers --format tsv"
    ds workers --format json >"$d/wk.json"
    json 'my ($w) = grep { $_->{id} eq "dsjob-test-id" } @$j;
          $w && ref $w->{functions} eq "ARRAY" && "@{$w->{functions}}" eq "t_adm_w" && $w->{fd} =~ /^\d+$/' \
        <"$d/wk.json"
    ok $? "$K: workers --format json: functions as an array"
    # gearmand has no "show jobs detail": its old columns.
    ds jobs >"$d/jobs.table"
    if [ "$K" = gearmand ]; then
        head -1 "$d/jobs.table" | grep -Eq '^HANDLE +RETRIES +IGNORE +QUEUED$' &&
            grep -Eq "^$hq +0 +0 +1\$" "$d/jobs.table"
        ok $? "$K: jobs: table with the queued background job (show jobs' columns)"
        same "$(ds jobs --format tsv | grep "^$hq	")" "$hq	0	0	1" "jobs --format tsv"
        ds jobs --format json >"$d/jobs.json"
        json 'my ($x) = grep { $_->{handle} eq $a[0] } @$j; $x && $x->{queued} == 1 &&
            $x->{retries} == 0 && !exists $x->{state}' "$hq" <"$d/jobs.json"
        ok $? "$K: jobs --format json"
    else
        head -1 "$d/jobs.table" |
            grep -Eq '^HANDLE +FUNCTION +PRIORITY +STATE +ATTEMPTS +RUN_AT +BACKGROUND +UNIQUE$' &&
            grep -Eq "^$hq +t_adm_q +normal +queued +0 +0 +1 *\$" "$d/jobs.table"
        ok $? "$K: jobs: table with function, priority, state and run-at time"
        same "$(ds jobs --format tsv | grep "^$hq	")" "$hq	t_adm_q	normal	queued	0	0	1	" \
            "jobs --format tsv"
        ds jobs --format json >"$d/jobs.json"
        json 'my ($x) = grep { $_->{handle} eq $a[0] } @$j; $x && $x->{function} eq "t_adm_q" &&
            $x->{state} eq "queued" && $x->{priority} eq "normal" && $x->{attempts} == 0 &&
            $x->{run_at} == 0 && $x->{background} == 1 && $x->{unique} eq ""' \
            "$hq" <"$d/jobs.json"
        ok $? "$K: jobs --format json: the detail columns, numbers as numbers"
    fi
    want=$(ds version --format tsv)
    case $K:$want in
    gearmand:1.1.20*) rc=0 ;;
    dsjobd:"$("$DSJOB" --version | sed 's/^dsjob \([^ ]*\).*/\1/')") rc=0 ;;
    *) rc=1 ;;
    esac
    ok $rc "$K: version --format tsv: the server's version ($want)"
    same "$(ds version | tr '\n' ' ' | sed 's/  */ /g')" "VERSION $want " "version: table"
    ds version --format json | json '@$j == 1 && $j->[0]{version} eq $a[0]' "$want"
    ok $? "$K: version --format json"
    ds -s "localhost:$SERVER_PORT" status >"$d/two.table"
    head -1 "$d/two.table" | grep -Eq '^SERVER +FUNCTION +TOTAL' &&
        grep -Eq "^127\.0\.0\.1:$SERVER_PORT +t_adm_q +1 " "$d/two.table" &&
        grep -Eq "^localhost:$SERVER_PORT +t_adm_q +1 " "$d/two.table"
    ok $? "$K: status with two servers labels the rows with the server"
    ds -s "127.0.0.1:$p" status --format tsv >"$d/half.tsv" 2>"$d/half.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q "^127\.0\.0\.1:$SERVER_PORT	t_adm_q	1	0	0\$" "$d/half.tsv" &&
        holds "$d/half.err" "127.0.0.1:$p"
    ok $? "$K: status with one server down: the other's rows, the error, exit 1 (rc $rc)"

    # cancel: the job is not run; an unknown handle is an error.
    ds cancel "$hq"
    same "$?" "0" "cancel HANDLE exits 0"
    ds cancel "H:nowhere:999999" 2>"$d/cancel.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q UNKNOWN_JOB "$d/cancel.err"
    ok $? "$K: cancel of an unknown handle: ERR on stderr, exit 1 (rc $rc)"
    ds cancel 'two words' >/dev/null 2>&1
    same "$?" "2" "cancel with a handle holding a space is a usage error"
    ds submit -b t_adm_q after >/dev/null
    dsw -f t_adm_q -- sh -c "cat >>'$d/cancelled'; echo >>'$d/cancelled'"
    check "after cancel, a worker runs only the later job" await_file "$d/cancelled" after
    same "$(cat "$d/cancelled")" "after" "the cancelled job never ran"

    lifecycle_verbs

    # A command that is not there is refused at start, naming it (exit 2).
    "$DSJOB" worker -s "$addr" -f t_typo -- "$d/nonexistent-typo" 2>"$d/typo.err"
    rc=$?
    [ $rc -eq 2 ] && holds "$d/typo.err" "cannot run '$d/nonexistent-typo'"
    ok $? "$K: worker: a command that does not exist: exit 2 naming it (rc $rc)"
    # One that goes away while the worker runs gives its jobs back: none fails, and they run
    # once it is back.
    printf '#!/bin/sh\ncat >>"%s"; echo >>"%s"\n' "$d/vanish.out" "$d/vanish.out" >"$d/vanish.sh"
    chmod +x "$d/vanish.sh"
    timeout --foreground -k 5 60 "$DSJOB" worker -s "$addr" -f t_vanish -- "$d/vanish.sh" \
        2>"$d/vanish.err" &
    wv=$!
    track $wv
    check "the t_vanish worker is registered" await_admin status "t_vanish	0	0	1"
    mv "$d/vanish.sh" "$d/vanish.away"
    for v in v1 v2 v3; do ds submit -b t_vanish "$v" >/dev/null; done
    check "a job whose command is gone is given back" await_file "$d/vanish.err" "giving the job back"
    same "$(ds status --format tsv | grep '^t_vanish	' | cut -f2)" "3" \
        "and all three jobs are still held"
    mv "$d/vanish.away" "$d/vanish.sh"
    check "once the command is back, the three jobs run" \
        eval 'await_file "$d/vanish.out" v1 && await_file "$d/vanish.out" v2 &&
            await_file "$d/vanish.out" v3 && [ "$(sort "$d/vanish.out" | tr "\n" " ")" = "v1 v2 v3 " ]'
    kill "$wv" 2>/dev/null
    wait_bounded "$wv"

    # shutdown: dsjobd stops; gearmand 1.1.20 (Debian) has no such command.
    case $K in
    dsjobd)
        _pid=$SERVER_PID _port=$SERVER_PORT
        server_start dsjobd || return 1
        s2=$SERVER_PID p2=$SERVER_PORT
        SERVER_PID=$_pid SERVER_PORT=$_port
        "$DSJOB" -s "127.0.0.1:$p2" shutdown
        rc=$?
        wait_bounded "$s2"
        same "$rc $?" "0 0" "shutdown: exit 0, and the server exits"
        dsw -f t_grace -- sh -c "cat >/dev/null; touch '$d/grace.started'; RAWPEER_UNTIL_S=120 '$RAWPEER' until-file '$d/grace.go'; printf graceful"
        ds submit t_grace x >"$d/grace.out" &
        c=$!
        track $c
        await_file "$d/grace.started"
        ds shutdown --graceful
        rc=$?
        touch "$d/grace.go"
        wait_bounded $c
        same "$rc $? $(cat "$d/grace.out")" "0 0 graceful" "shutdown --graceful: the running job still delivers"
        wait_bounded "$SERVER_PID"
        ok $? "$K: after shutdown --graceful the server exits"
        ;;
    *)
        ds shutdown 2>"$d/shut.err"
        rc=$?
        [ $rc -eq 1 ] && grep -q UNKNOWN_COMMAND "$d/shut.err"
        ok $? "$K: shutdown: gearmand answers ERR, exit 1 (rc $rc)"
        ds shutdown --graceful 2>/dev/null
        same "$?" "1" "shutdown --graceful: also ERR"
        same "$(ds version --format tsv)" "$want" "the server is still running"
        ;;
    esac
}

# ndead FUNCTION N: FUNCTION's dead set has N jobs.
ndead() {
    [ "$(ds dead list "$1" --format tsv | wc -l)" -eq "$2" ]
}

# The verbs of dsjobd's lifecycle (dsjob(1): job, result, dead), against
# dsjobd with --max-dead and --keep-results (server_args); gearmand has
# none of them, and each must say so.

lifecycle_verbs() {
    rc=0
    ds dead >/dev/null 2>&1 || rc=$?
    ds dead frob x >/dev/null 2>&1 || rc="$rc $?"
    ds job >/dev/null 2>&1 || rc="$rc $?"
    ds result -f t_x >/dev/null 2>&1 || rc="$rc $?"
    ds job 'a b' >/dev/null 2>&1 || rc="$rc $?"
    ds status -u x >/dev/null 2>&1 || rc="$rc $?"
    same "$rc" "2 2 2 2 2 2" \
        "usage: dead alone or frob, job without a handle, -f without -u, a spaced handle, status -u"
    if [ "$K" = gearmand ]; then
        for v in "dead list" "dead retry t_x" "dead drop t_x" "job H:x:1" "result H:x:1" \
            "job -f t_x -u u"; do
            # shellcheck disable=SC2086
            ds $v >"$d/gm.out" 2>"$d/gm.err"
            rc=$?
            [ $rc -eq 1 ] && [ ! -s "$d/gm.out" ] && holds "$d/gm.err" "a dsjobd admin command"
            ok $? "$K: $v: exit 1, nothing on stdout, stderr says it is dsjobd's (rc $rc)"
        done
        out=$(ds dead list --format json 2>/dev/null)
        same "$? $out" "1 []" "dead list --format json: an empty array, exit 1"
        skip_n $((LIFECYCLE_CHECKS - 8)) "$K: no dead sets or kept results"
        return
    fi

    # Three background jobs whose command fails: dead (--max-dead).
    dsw -f t_dead -- sh -c 'cat >/dev/null; echo "it broke" >&2; exit 3' 2>/dev/null
    w_dead=$W
    h1=$(ds submit -b -u 'key one' t_dead p1)
    h2=$(ds submit -b -u k2 t_dead p2)
    h3=$(ds submit -b t_dead p3)
    check "dead: the three failed jobs are in the dead set" eval 'await_admin "show dead t_dead" "$h1	*" &&
        await_admin "show dead t_dead" "$h2	*" && await_admin "show dead t_dead" "$h3	*" && ndead t_dead 3'
    kill $w_dead
    wait_bounded $w_dead
    ds dead list >"$d/dead.table"
    head -1 "$d/dead.table" |
        grep -Eq '^HANDLE +FUNCTION +PRIORITY +ATTEMPTS +FIRST_FAILURE +LAST_FAILURE +SIZE +UNIQUE +ERROR +DROPPED$' &&
        grep -Eq "^$h1 +t_dead +normal +[0-9]+ +[0-9]{10} +[0-9]{10} +2 +key one +'sh' exited with status 3\\\\nit broke +0\$" \
            "$d/dead.table"
    ok $? "$K: dead list: a table, the unique key and error unescaped, then escaped as dsjob does (the trailing newline left out)"
    same "$(ds dead list t_dead --format tsv | grep "^$h2	" | cut -f2,3,7,8,9)" \
        "t_dead	normal	2	k2	'sh' exited with status 3\nit broke\n" "dead list FUNCTION --format tsv"
    ds dead list --format json >"$d/dead.json"
    json 'my ($x) = grep { $_->{handle} eq $a[0] } @$j; $x && $x->{unique} eq "key one" &&
        $x->{error} eq "'"'sh'"' exited with status 3\nit broke\n" && $x->{size} == 2 &&
        $x->{first_failure} > 1e9 && $x->{first_failure} <= $x->{last_failure} &&
        $x->{dropped} == 0' "$h1" <"$d/dead.json" &&
        grep -q '"first_failure": [0-9]*,' "$d/dead.json"
    ok $? "$K: dead list --format json: real newlines in the error, numbers as numbers"
    same "$(ds dead list t_nothing --format tsv; echo "rc $?")" "rc 0" \
        "dead list of a function with no dead jobs: nothing, exit 0"

    ds job "$h1" >"$d/job.table"
    head -1 "$d/job.table" | grep -Eq '^FIELD +VALUE$' && grep -Eq '^state +dead$' "$d/job.table" &&
        grep -Eq '^unique +key one$' "$d/job.table" &&
        [ "$(grep -A1 '^error' "$d/job.table")" = "$(printf "error          'sh' exited with status 3\n               it broke")" ]
    ok $? "$K: job HANDLE: field by field, state dead, the unique key and the error, a line a line"
    ds job "$h2" --format json >"$d/job.json"
    json '@$j == 1 && $j->[0]{handle} eq $a[0] && $j->[0]{function} eq "t_dead" &&
        $j->[0]{state} eq "dead" && $j->[0]{payload_size} == 2 && $j->[0]{unique} eq "k2"' \
        "$h2" <"$d/job.json" && grep -q '"payload_size": 2,' "$d/job.json"
    ok $? "$K: job --format json: one object, its fields as keys, sizes as numbers"
    ds job H:nowhere:1 >"$d/nojob.out" 2>"$d/nojob.err"
    rc=$?
    [ $rc -eq 1 ] && [ ! -s "$d/nojob.out" ] && grep -q UNKNOWN_JOB "$d/nojob.err"
    ok $? "$K: job of an unknown handle: UNKNOWN_JOB on stderr, exit 1 (rc $rc)"
    ds result "$h1" >"$d/deadres.out" 2>"$d/deadres.err"
    rc=$?
    [ $rc -eq 1 ] && [ ! -s "$d/deadres.out" ] && holds "$d/deadres.err" "NOT_DONE job is dead"
    ok $? "$K: result of a dead job: NOT_DONE, exit 1 (rc $rc)"

    same "$(ds dead drop "$h3" --format tsv)" "1" "dead drop HANDLE: one dropped"
    same "$(ds dead list t_dead --format tsv | cut -f1 | sort | tr '\n' ' ')" \
        "$(printf '%s\n' "$h1" "$h2" | sort | tr '\n' ' ')" "dead drop: the job is gone from the list"
    ds dead drop "$h3" >"$d/drop2.out" 2>"$d/drop2.err"
    rc=$?
    [ $rc -eq 1 ] && [ ! -s "$d/drop2.out" ] && grep -q UNKNOWN_JOB "$d/drop2.err"
    ok $? "$K: dead drop of a dropped job: UNKNOWN_JOB, exit 1 (rc $rc)"
    ds dead retry t_nothing >/dev/null 2>&1
    same "$?" "1" "dead retry of an unknown function: exit 1"
    # A dead job whose unique key a live job holds stays dead.
    hlive=$(ds submit -b -u k2 t_dead live)
    ds dead retry "$h2" --format tsv >"$d/left.out" 2>"$d/left.err"
    rc=$?
    [ $rc -eq 1 ] && [ "$(cat "$d/left.out")" = "0	1" ] &&
        holds "$d/left.err" "not: a live job holds the unique key"
    ok $? "$K: dead retry while a live job holds the unique key: left dead, why, exit 1 (rc $rc)"
    ds cancel "$hlive"

    # Retried with a command that works, they complete, and their results are kept.
    dsw -f t_dead -- sh -c 'cat; printf "\000end\n\n"'
    ds dead retry t_dead >"$d/retry.table"
    rc=$?
    [ $rc -eq 0 ] && head -1 "$d/retry.table" | grep -Eq '^RETRIED +LEFT$' &&
        tail -n 1 "$d/retry.table" | grep -Eq '^ +2 +0$'
    ok $? "$K: dead retry FUNCTION: both put back, a table, exit 0 (rc $rc)"
    check "the retried jobs complete" await_admin "show job $h1" "state done"
    check "both of them" await_admin "show job $h2" "state done"
    same "$(ds dead list --format tsv | grep -c "	t_dead	")" "0" "the dead set is empty"
    ds result "$h1" >"$d/res.out"
    rc=$?
    printf 'p1\000end\n\n' | cmp -s - "$d/res.out"
    ok $? "$K: result HANDLE: the bytes exactly (a NUL, trailing newlines), exit $rc"
    same "$rc" "0" "result of a completed job exits 0"
    ds result --format json -f t_dead -u k2 >"$d/res.json"
    json '@$j == 1 && $j->[0]{outcome} eq "complete" && $j->[0]{size} == 8 && $j->[0]{kept} == 8 &&
        $j->[0]{result} eq "p2"' <"$d/res.json"
    ok $? "$K: result -f -u --format json: outcome, size, kept, the result (to its NUL)"
    same "$(ds job -f t_dead -u k2 --format tsv | grep -E '^(handle|state|outcome)	' | tr '\t\n' '= ')" \
        "handle=$h2 state=done outcome=complete " "job -f FUNCTION -u UNIQUE: the kept job"

    # Outcomes that are not a success: an exception's text, a failure, a cut result.
    _pid=$SERVER_PID _port=$SERVER_PORT
    server_start dsjobd --keep-results 600 --max-result-size 32 || return 1
    s2=$SERVER_PID
    dsw --exceptions -f t_kx -- sh -c 'cat >/dev/null; exit 5' 2>/dev/null
    dsw -f t_kf -- sh -c 'cat >/dev/null; exit 6' 2>/dev/null
    dsw -f t_kl -- sh -c 'cat >/dev/null; printf 0123456789abcdef0123456789abcdefXYZ'
    hx=$(ds submit -b t_kx x)
    hf=$(ds submit -b t_kf x)
    hl=$(ds submit -b t_kl x)
    check "the three jobs end" eval 'await_admin "show job $hx" "state done" &&
        await_admin "show job $hf" "state done" && await_admin "show job $hl" "state done"'
    ds result "$hx" >"$d/rx.out" 2>"$d/rx.err"
    rc=$?
    [ $rc -eq 1 ] && [ ! -s "$d/rx.out" ] &&
        holds "$d/rx.err" "job $hx raised an exception: 'sh' exited with status 5"
    ok $? "$K: result of an exception: its text on stderr, exit 1 (rc $rc)"
    ds result "$hf" >"$d/rf.out" 2>"$d/rf.err"
    rc=$?
    [ $rc -eq 1 ] && [ ! -s "$d/rf.out" ] && holds "$d/rf.err" "job $hf failed"
    ok $? "$K: result of a failed job: exit 1, saying so (rc $rc)"
    ds result "$hl" >"$d/rl.out" 2>"$d/rl.err"
    rc=$?
    [ $rc -eq 1 ] && [ "$(cat "$d/rl.out")" = 0123456789abcdef0123456789abcdef ] &&
        holds "$d/rl.err" "kept only 32 of its 35 result bytes"
    ok $? "$K: result cut by --max-result-size: the 32 bytes kept, exit 1, saying so (rc $rc)"
    server_stop
    SERVER_PID=$_pid SERVER_PORT=$_port
    wait "$s2" 2>/dev/null
}

# Once, before the servers, when dsjobd is one of them: the address forms
# of -s and what dsjob prints with no server up. (These verbs wait only for
# the server's answers, which dsjob bounds itself: no timeout(1), as
# ds_bounded in tests/lib/server.sh.) A host without a port means 4730 (as
# with the gearman tools) for the admin verbs and for the libraries alike; 4730 on
# 127.0.0.1 may be another server's, so this dsjobd listens on a loopback
# address of its own, picked from our pid.
address_checks() {
    K=addr
    p=$(closed_port)
    out=$("$DSJOB" -s "127.0.0.1:$p" jobs --format json 2>/dev/null)
    rc=$?
    same "$rc $out" "3 []" "jobs --format json with no server up prints [] and exits 3"
    out=$("$DSJOB" -s "127.0.0.1:$p" status --format json 2>/dev/null)
    same "$? $out" "3 []" "status --format json with no server up prints [] too"
    out=$("$DSJOB" -s "127.0.0.1:$p" status 2>/dev/null)
    same "$? $out" "3 " "status as a table with no server up prints nothing, exits 3"
    for bad in "host:" ":4730" "127.0.0.1:0" "[::1" "[::1]x" "1:2:3"; do
        "$DSJOB" -s "$bad" status >/dev/null 2>"$T/bad.err"
        rc=$?
        [ $rc -eq 2 ] && grep -q "bad server address" "$T/bad.err"
        ok $? "addr: -s '$bad' is a usage error (rc $rc)"
    done

    ip=127.$((1 + $$ % 250)).$((1 + $$ / 250 % 250)).$((2 + $$ / 62500 % 250))
    pf=$T/addr.port
    "$DSJOBD" -L "$ip" -p 4730 --port-file "$pf" -l "$T/addr.log" &
    apid=$!
    _server_pids="$_server_pids $apid"
    await_file "$pf" "" "$apid"
    if [ -s "$pf" ]; then
        "$DSJOB" -s "$ip" status >/dev/null
        same "$?" "0" "dsjob -s $ip status (no port) reaches dsjobd on $ip:4730"
        h=$("$DSJOB" -s "$ip" submit -b t_addr x)
        rc=$?
        [ $rc -eq 0 ] && [ -n "$h" ]
        ok $? "addr: dsjob -s $ip submit -b (the library, no port) queues a job ($h)"
        row=$("$DSJOB" -s "$ip:4730" status --format tsv | grep "^t_addr	")
        same "$row" "t_addr	1	0	0" "the job is queued on $ip:4730"
        "$DSJOB" -s "$ip:4730" jobs --format json |
            json 'grep { $_->{handle} eq $a[0] } @$j' "$h"
        ok $? "addr: jobs --format json lists it"
    else
        skip_n 4 "dsjobd could not listen on $ip:4730"
    fi
    kill -TERM "$apid" 2>/dev/null
    wait "$apid" 2>/dev/null

    server_start dsjobd -L ::1 || return 1
    want=$("$DSJOB" -s "127.0.0.1:$SERVER_PORT" version --format tsv)
    got=$("$DSJOB" -s "[::1]:$SERVER_PORT" version --format tsv)
    same "$? $got" "0 $want" "dsjob -s '[::1]:$SERVER_PORT' version: the same server over IPv6"
    server_stop
}

# dsjobd keeps dead jobs and results for lifecycle_verbs.
server_args() {
    [ "$1" = dsjobd ] && echo "--max-dead 10 --keep-results 600"
}

if runs_against dsjobd; then
    address_checks
fi
run_servers
