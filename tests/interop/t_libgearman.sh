#!/bin/sh
# Runs lg_interop, the libgearman interop checks (see lg_interop.c), against
# gearmand 1.1.20, the reference, and dsjobd, in one TAP stream: starts the
# servers on loopback ports and passes them as KIND:PORT; a server not in
# INTEROP_SERVERS is not passed, one that is not installed or not built is
# passed as KIND:- and its checks are skipped. As t_cli.sh's: make check
# runs them against dsjobd, t_libgearman_gearmand.sh (make check-long,
# which CI runs) against gearmand, which validates their expectations.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

LG_INTEROP=${LG_INTEROP:-$top_builddir/tests/interop/lg_interop}
if [ ! -x "$LG_INTEROP" ]; then
    echo "1..0 # SKIP lg_interop not built (needs libgearman-dev)"
    exit 0
fi

args=""
diag "servers: $INTEROP_SERVERS (INTEROP_SERVERS; make check runs dsjobd, make check-long gearmand)"
if ! runs_against gearmand; then
    :
elif [ -n "$GEARMAND" ] && [ -x "$GEARMAND" ]; then
    # 500 clients connect at once (check_many): gearmand's default backlog
    # of 32 overflows and a loaded machine then waits out SYN retransmits
    # (1, 3, 7, 15 s...) past the check's alarm. dsjobd's default is 1024.
    server_start gearmand --backlog=1024 || { echo "Bail out! gearmand did not start"; exit 1; }
    args="gearmand:$SERVER_PORT"
else
    args="gearmand:-"
fi
if runs_against dsjobd && [ -x "$DSJOBD" ]; then
    server_start dsjobd || { echo "Bail out! dsjobd did not start"; exit 1; }
    args="$args dsjobd:$SERVER_PORT"
elif runs_against dsjobd; then
    args="$args dsjobd:-"
fi

# shellcheck disable=SC2086
timeout 120 "$LG_INTEROP" $args
rc=$?
[ $rc -eq 124 ] && echo "Bail out! lg_interop did not finish in 120 s"
exit $rc
