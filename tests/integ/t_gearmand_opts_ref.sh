#!/bin/sh
# t_gearmand_opts.sh with gearmand 1.1.20's answer to each --check-args
# case beside dsjobd's (make check-long): the table checked against the
# reference. make check runs it with dsjobd's answers alone.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
GEARMAND_OPTS_REFERENCE=1
export GEARMAND_OPTS_REFERENCE top_srcdir
exec sh "$top_srcdir/tests/integ/t_gearmand_opts.sh"
