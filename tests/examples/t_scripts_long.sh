#!/bin/sh
# t_scripts.sh's checks at the size of examples 1 and 2's dataset, 8 shards
# of 250 rows (make check runs them at 5 shards of 100), against gearmand
# 1.1.20, the reference, and dsjobd (make check: dsjobd alone): make check-long.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${INTEROP_SERVERS:=gearmand dsjobd}"
SCRIPTS_SHARDS=8
SCRIPTS_ROWS=2000
export SCRIPTS_SHARDS SCRIPTS_ROWS INTEROP_SERVERS
exec "$top_srcdir/tests/examples/t_scripts.sh"
