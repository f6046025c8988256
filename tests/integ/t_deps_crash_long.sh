#!/bin/sh
# t_deps_crash.sh with two rounds of two kills (make check-long), where
# make check runs one: the same checks at more random kill points.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
DEPS_CRASH_ROUNDS=2
export DEPS_CRASH_ROUNDS
export top_srcdir
exec sh "$top_srcdir/tests/integ/t_deps_crash.sh"
