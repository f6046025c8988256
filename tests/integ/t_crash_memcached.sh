#!/bin/sh
# The kill -9 crash test (t_crash) against the memcached store, with a real
# memcached on a loopback port that this script starts and stops. At most
# 800 submits (CRASH_TOTAL), the kill after 200 acknowledgements: the
# memcached store acknowledges each a memcached round trip later, and the
# restart drains one by one what was stored (at 40000, 105 s of wall on a
# loaded machine). make check-long runs it at the full size
# (t_crash_memcached_long.sh).
. "$top_srcdir/tests/lib/server.sh"
mc=${MEMCACHED_BIN:-/usr/bin/memcached}
[ -x "$mc" ] || { echo "1..0 # SKIP memcached is not installed"; exit 0; }
[ -x "$top_builddir/tests/integ/t_crash" ] || { echo "1..0 # SKIP t_crash not built"; exit 0; }
port=$(free_port)
"$mc" -l 127.0.0.1 -p "$port" -U 0 -m 256 -M -u root &
mcpid=$!
trap 'kill $mcpid 2>/dev/null; wait $mcpid 2>/dev/null; rm -rf "$TEST_TMPDIR"' EXIT
wait_port "$port" || { echo "Bail out! memcached did not listen on $port"; exit 1; }
"$top_builddir/tests/integ/t_crash" --memcached "127.0.0.1:$port" --total "${CRASH_TOTAL:-800}"
