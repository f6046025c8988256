#!/bin/sh
# dsjobd's /metrics at size (make check-long): with 10,000 functions it
# lists each and promtool (Debian's prometheus package; a skip without it)
# still accepts the page. The time it takes is printed as a diagnostic,
# never asserted. t_http.sh checks /metrics with promtool on a few
# functions in make check; this is the same check with many.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

unset DSJOB_SERVERS DSJOB_PROGRESS

# 10,000 functions: promtool still passes; the render time is a diagnostic.
server_start dsjobd --http-port 0 --http-port-file "$T/big.port"
# shellcheck disable=SC2034 # read by req (tests/lib/integ.sh)
HTTP_PORT=$(cat "$T/big.port")
is "$(perl -e 'print "create function f$_\n" for 1..10000' | adm_lines)" 10000 \
    "10,000 functions made"
t0=$(date +%s%N)
req GET /metrics >"$T/big.txt"
t1=$(date +%s%N)
diag "GET /metrics with 10,000 functions: $(( (t1 - t0) / 1000000 )) ms, $(wc -c <"$T/big.txt") bytes"
diag "$(body /metrics | grep '^dsjob_metrics_render_seconds ') (the server's own measure)"
is "$(grep -c '^dsjob_workers{function="f[0-9]*"} 0$' "$T/big.txt")" 10000 \
    "/metrics lists the 10,000 functions"
promcheck /metrics "promtool accepts it"
server_stop
done_testing
