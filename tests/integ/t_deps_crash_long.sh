#!/bin/sh
# The long form of t_deps_crash.sh (make check-long): more rounds, more
# kill -9s a round, each at a random point.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
DEPS_CRASH_ROUNDS=${DEPS_CRASH_ROUNDS:-10} DEPS_CRASH_KILLS=${DEPS_CRASH_KILLS:-4} \
    exec sh "$top_srcdir/tests/integ/t_deps_crash.sh"
