#!/bin/sh
# t_libgearman.sh's checks against gearmand 1.1.20, the reference that
# validates their expectations (make check-long; CI runs it): make check
# runs them against dsjobd alone (INTEROP_SERVERS, tests/interop/lib.sh).
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
INTEROP_SERVERS=gearmand
export INTEROP_SERVERS top_srcdir
exec sh "$top_srcdir/tests/interop/t_libgearman.sh"
