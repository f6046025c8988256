#!/bin/sh
# Both directions of interop with gearman-tools' `gearman` CLI (libgearman
# inside), against dsjobd and gearmand 1.1.20: our client with a
# `gearman -w` worker (result, binary-safe payload, a failing command),
# and our worker with the `gearman` client. peer_tool is the libraries'
# small command-line face (tests/client/peer_tool.c).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"

: "${GEARMAN:=$(command -v gearman 2>/dev/null)}"
if [ -z "$GEARMAN" ] || [ ! -x "$GEARMAN" ]; then
    echo "1..0 # SKIP gearman CLI (gearman-tools) not found"
    exit 0
fi
TOOL=$top_builddir/tests/client/peer_tool
T=$(test_tmpdir)

gm() { timeout 20 "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" "$@"; }
tool() { timeout 20 "$TOOL" "$@"; }

checks() { # checks KIND
    K=$1
    addr=127.0.0.1:$SERVER_PORT

    gm -w -f lib_up -c 1 -- tr a-z A-Z &
    w=$!
    out=$(tool submit "$addr" lib_up "hello world")
    is "$out" "HELLO WORLD" "$K: our client, gearman -w worker: the result"
    wait $w
    ok $? "$K: the gearman -w worker ran exactly our one job"

    gm -w -f lib_wc -c 1 -- wc -c &
    w=$!
    out=$(tool submit "$addr" lib_wc "0123456789" | tr -d ' ')
    is "$out" "10" "$K: our client's payload reaches the gearman worker's stdin intact"
    wait $w

    gm -w -f lib_false -c 1 -- false &
    w=$!
    tool submit "$addr" lib_false x >/dev/null 2>"$T/err"
    is "$?" "1" "$K: a failing gearman -w command is a failed job for our client"
    wait $w

    tool worker "$addr" lib_rev 2 &
    w=$!
    out=$(gm -f lib_rev "stressed")
    is "$out" "desserts" "$K: gearman client, our worker: the result"
    out=$(printf 'abc' | gm -f lib_rev)
    is "$out" "cba" "$K: gearman client with stdin payload, our worker"
    wait $w
    ok $? "$K: our worker did both jobs and exited 0"
}

for kind in dsjobd gearmand; do
    if server_start $kind; then
        checks $kind
        server_stop
    else
        rc=$?
        if [ $rc -eq 77 ]; then
            _tap_n=$((_tap_n + 1)); echo "ok $_tap_n # SKIP $kind not available"
        else
            ok 1 "$kind started"
        fi
    fi
done
done_testing
