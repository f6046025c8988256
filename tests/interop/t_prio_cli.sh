#!/bin/sh
# Refusing work no worker can do, and priorities across functions, as the
# `gearman` CLI (libgearman) sees them, on
# dsjobd alone (gearmand has neither): with --reject-no-worker a foreground
# and a background submit for a function nobody can do come back at once
# with the server's ERROR (NO_WORKER, naming the function) instead of
# waiting, and make no function; a function with a worker is served as
# before; --priority global hands a worker of two functions the highest
# priority over both, oldest first; and with the defaults the same submit
# is queued to wait for a worker, as in gearmand 1.1.20.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

if [ -z "$GEARMAN" ] || [ ! -x "$GEARMAN" ] || [ -z "$GEARADMIN" ] || [ ! -x "$GEARADMIN" ]; then
    echo "1..0 # SKIP gearman CLI or gearadmin (gearman-tools) not found"
    exit 0
fi
if [ ! -x "$DSJOBD" ]; then
    echo "1..0 # SKIP dsjobd not built ($DSJOBD)"
    exit 0
fi
K=dsjobd
d=$T

has_workers() { # has_workers FUNC N
    status_of "$1" | grep -q "	$2\$"
}

server_start dsjobd --reject-no-worker || { echo "Bail out! dsjobd did not start"; exit 1; }
gm -f pc_none "x" >"$d/fg.out" 2>"$d/fg.err"
rc=$?
[ $rc -ne 124 ] && grep -q "NO_WORKER" "$d/fg.err" && grep -q "no worker can do pc_none" "$d/fg.err"
ok $? "--reject-no-worker: a gearman foreground submit nobody can do returns with NO_WORKER"
[ $rc -eq 124 ] && diag "  it waited 20 s"
diag "  stderr: $(cat "$d/fg.err")"
gm -b -f pc_none "x" >"$d/bg.out" 2>"$d/bg.err"
rc=$?
[ $rc -ne 124 ] && grep -q "NO_WORKER" "$d/bg.err" && grep -q "no worker can do pc_none" "$d/bg.err"
ok $? "a gearman -b submit: the same error"
status_of pc_none >/dev/null
[ $? -ne 0 ]
ok $? "the refused submits made no function (gearadmin --status)"
gm -w -f pc_up -c 1 -- tr a-z A-Z &
track $!
check "a gearman -w worker registers" poll has_workers pc_up 1
same "$(gm -f pc_up hello 2>&1)" "HELLO" "a function with a worker is served as before"
reap
server_stop

server_start dsjobd --priority global || { echo "Bail out! dsjobd did not start"; exit 1; }
gm -b -f pc_oa a1 && gm -b -f pc_ob b1 && gm -b -f pc_oa a2 &&
    gm -b -L -f pc_ob l1 && gm -b -I -f pc_oa h1 && gm -b -f pc_ob b2
gm -w -f pc_oa -f pc_ob -c 6 -- sh -c "cat >>'$d/ord'; echo >>'$d/ord'"
same "$(tr '\n' ' ' <"$d/ord" 2>/dev/null)" "h1 a1 b1 a2 b2 l1 " \
    "--priority global: high first, then normal of both functions oldest first, then low"
server_stop

server_start dsjobd || { echo "Bail out! dsjobd did not start"; exit 1; }
gm -b -f pc_none "x" 2>"$d/def.err"
[ ! -s "$d/def.err" ] && [ "$(status_of pc_none)" = "pc_none	1	0	0" ]
ok $? "defaults: the same background submit is queued to wait for a worker (1.1.20)"
server_stop
done_testing
