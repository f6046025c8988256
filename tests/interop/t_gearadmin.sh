#!/bin/sh
# gearadmin (gearman-tools) against dsjobd (make check) and gearmand 1.1.20,
# the reference (t_gearadmin_gearmand.sh, make check-long): --status,
# --priority-status, --workers, --show-jobs, --show-unique-jobs, --getpid,
# --server-version, --server-verbose, --create-function, --drop-function and
# --cancel-job. gearadmin is the
# reference consumer of the text admin protocol, so its parsed output must be
# the same; the checks assert the content (counts, handles, function lists),
# and only the shape where the answer legitimately differs (version, pid).
# gearadmin exits 0 even when the server answered ERR, so only its output
# tells the cases apart.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

if [ -z "$GEARADMIN" ] || [ ! -x "$GEARADMIN" ]; then
    echo "1..0 # SKIP gearadmin (gearman-tools) not found"
    exit 0
fi
if [ -z "$GEARMAN" ] || [ ! -x "$GEARMAN" ]; then
    echo "1..0 # SKIP gearman CLI (gearman-tools) not found"
    exit 0
fi

CHECKS=28
CR=$(printf '\r')

status_is() { # status_is FUNC LINE
    [ "$(status_of "$1")" = "$2" ]
}

workers_has() { # workers_has EXTENDED-REGEX
    adm --workers | grep -Eq "$1"
}

text_cmd() { # text_cmd LINE: one text admin command, the raw first answer line
    timeout 20 perl -MIO::Socket::INET -e '
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $ARGV[0]) or exit 2;
        print $s "$ARGV[1]\r\n";
        my $l = <$s>;
        $l =~ s/\r/\\r/g;
        $l =~ s/\n/\\n/g;
        print $l, "\n";' "$SERVER_PORT" "$1"
}

checks() {
    d="$T/$K"
    mkdir -p "$d"

    # Server identity.
    out=$(adm --server-version)
    echo "$out" | grep -Eq '^[0-9]+\.[0-9]+[^[:space:]]*$'
    rc=$?
    ok $rc "$K: --server-version prints one version word"
    [ $rc -eq 0 ] || diag "  got '$out'"
    same "$(adm --getpid)" "$SERVER_PID" "--getpid prints the server's process id"
    out=$(adm --server-verbose)
    echo "$out" | grep -Eq '^[A-Z]+$'
    rc=$?
    ok $rc "$K: --server-verbose prints the verbosity name"
    [ $rc -eq 0 ] || diag "  got '$out'"
    same "$(adm --status)" "." "--status of a fresh server is an empty listing"
    same "$(adm --show-jobs)" "." "--show-jobs of a fresh server is an empty listing"

    # Queued background jobs, no worker.
    for i in 1 2 3; do
        gm -v -b -f ga_f "job$i" | sed -n 's/^Task created: //p' >>"$d/handles"
    done
    same "$(status_of ga_f)" "ga_f	3	0	0" "--status after 3 background jobs: ga_f, 3 total, 0 running, 0 workers"
    want=$(sed 's/$/	0	0	1/' "$d/handles" | sort)
    same "$(adm --show-jobs | grep -v '^\.$' | sort)" "$want" \
        "--show-jobs lists each queued handle as HANDLE 0 0 1 (retries, ignored, queued)"
    same "$(adm --show-jobs | tail -n 1)" "." "--show-jobs ends with a '.' line"

    gm -b -L -f ga_p l1 && gm -b -L -f ga_p l2 && gm -b -f ga_p n1 &&
        gm -b -I -f ga_p h1 && gm -b -f ga_p n2 && gm -b -f ga_p n3
    same "$(adm --priority-status | grep '^ga_p	')" "ga_p	1	3	2	0" \
        "--priority-status: FUNCTION HIGH NORMAL LOW WORKERS"
    same "$(status_of ga_p)" "ga_p	6	0	0" "--status counts all priorities together"

    gm -b -u ga_key_1 -f ga_u x && gm -b -u ga_key_2 -f ga_u y
    same "$(adm --show-unique-jobs | grep '^ga_key_' | sort | tr '\n' ' ')" "ga_key_1 ga_key_2 " \
        "--show-unique-jobs lists the unique keys of queued jobs"

    # Workers.
    gm -w -f ga_w1 -f ga_w2 -c 1 >/dev/null &
    track $!
    check "--workers shows 'FD 127.0.0.1 - : ga_w1 ga_w2' for a worker of two functions" \
        eval 'await_admin workers "* : ga_w1 ga_w2" &&
            workers_has "^[0-9]+ 127\.0\.0\.1 - : ga_w1 ga_w2\$"'
    adm --workers | grep -Eq '^[0-9]+ 127\.0\.0\.1 - :$'
    ok $? "$K: --workers shows a connection without functions as 'FD 127.0.0.1 - :'"
    same "$(adm --workers | tail -n 1)" "." "--workers ends with a '.' line"
    same "$(status_of ga_w1) $(status_of ga_w2)" "ga_w1	0	0	1 ga_w2	0	0	1" \
        "--status counts one available worker for each of its functions"
    same "$(adm --drop-function ga_w1 2>&1)" "Error: there are still connected workers or executing clients$CR" \
        "--drop-function refuses a function that has a worker (on stderr, with the server's CR)"

    # A running job.
    gm -w -f ga_r -c 1 -- sh -c "cat >/dev/null; i=0; while [ ! -e '$d/go' ] && [ \$i -lt 400 ]; do sleep 0.05; i=\$((i+1)); done; echo done" &
    w=$!
    track $w
    gm -b -f ga_r "x"
    check "--status shows ga_r 1 total, 1 running, 1 worker while the job runs" \
        eval 'await_admin status "ga_r	1	1	1" && status_is ga_r "ga_r	1	1	1"'
    same "$(adm --priority-status | grep '^ga_r	')" "ga_r	0	0	0	1" \
        "--priority-status counts only queued jobs, not the running one"
    touch "$d/go"
    wait $w
    check "--status drops to ga_r 0 0 0 once the job is done and the worker gone" \
        eval 'await_admin status "ga_r	0	0	0" && status_is ga_r "ga_r	0	0	0"'

    # Functions created and dropped by hand.
    same "$(adm --create-function ga_new)" "OK" "--create-function prints OK"
    same "$(status_of ga_new)" "ga_new	0	0	0" "a created function is listed by --status"
    same "$(adm --drop-function ga_new)" "OK" "--drop-function of an idle function prints OK"
    status_of ga_new >/dev/null
    ok $((!$?)) "$K: a dropped function is no longer listed by --status"
    same "$(adm --drop-function ga_nosuch 2>&1)" "Error: function not found$CR" \
        "--drop-function of an unknown function prints (on stderr, with the server's CR) 'Error: function not found'"

    # Cancelling a queued job.
    gm -v -b -f ga_c c1 | sed -n 's/^Task created: //p' >"$d/c1"
    gm -b -f ga_c c2
    same "$(adm --cancel-job "$(cat "$d/c1")")" "OK" "--cancel-job of a queued job prints OK"
    gm -w -f ga_c -c 1 -- sh -c "cat >>'$d/cw'; echo >>'$d/cw'"
    same "$(cat "$d/cw" 2>/dev/null)" "c2" "a cancelled job is not given to the worker, the next one is"
    same "$(adm --cancel-job H:nosuch:12345 2>&1)" "Error: UNKNOWN_JOB$CR" \
        "--cancel-job of an unknown handle prints (on stderr, with the server's CR) 'Error: UNKNOWN_JOB'"

    # Raw text protocol details that gearadmin hides.
    same "$(text_cmd bogus)" 'ERR UNKNOWN_COMMAND Unknown+server+commandbogus\r\n' \
        "an unknown text command gets gearmand's ERR line"
}

run_servers
