#!/bin/sh
# Runs perl_interop.pl, the Perl Gearman::Client / Gearman::Worker interop
# checks, against gearmand 1.1.20, the reference, and dsjobd, in one TAP
# stream: starts both servers on loopback ports and passes them as KIND:PORT;
# a server that is not installed or not built is passed as KIND:- and its
# checks are skipped.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

if ! perl -MGearman::Client -MGearman::Worker -MTest::More -e 1 2>/dev/null; then
    echo "1..0 # SKIP Perl Gearman::Client / Gearman::Worker not installed"
    exit 0
fi

args=""
if [ -n "$GEARMAND" ] && [ -x "$GEARMAND" ]; then
    server_start gearmand || { echo "Bail out! gearmand did not start"; exit 1; }
    args="gearmand:$SERVER_PORT"
else
    args="gearmand:-"
fi
if [ -x "$DSJOBD" ]; then
    server_start dsjobd || { echo "Bail out! dsjobd did not start"; exit 1; }
    args="$args dsjobd:$SERVER_PORT"
else
    args="$args dsjobd:-"
fi

# The `dsjob worker --stream` checks run the tool.
export DSJOB
# shellcheck disable=SC2086
timeout 120 perl "$top_srcdir/tests/interop/perl_interop.pl" $args
rc=$?
[ $rc -eq 124 ] && echo "Bail out! perl_interop.pl did not finish in 120 s"
exit $rc
