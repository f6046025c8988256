#!/bin/sh
# The postgres store's SQL takes every value as a parameter, and every
# connection gets standard_conforming_strings on from its connection
# parameters, reconnects included. Against a PostgreSQL 15 of the test's
# own (tests/lib/pg.sh) whose database default is
# standard_conforming_strings = off, a bare Gearman client
# (tests/integ/pg_gear.py) submits jobs with hostile function names, unique
# keys and payloads (quotes, backslashes, \', \x.., bytes 0x01-0xff, NUL
# in payloads, SQL meant to run), before and after every dsjobd
# connection is ended with pg_terminate_backend (so the writer
# reconnects), coalesces onto one, sets retry for each name, and a worker
# takes them all and sends hostile results back (--keep-results).
#
# Asserts: every submit is answered JOB_CREATED; the table holds each
# function name, unique key and payload byte for byte (psql, in hex); a
# submit with a live job's function and unique key gets that job's handle;
# dsjob.funcs holds each name as given; the worker gets each job byte for
# byte; each kept result is the worker's bytes; and no table named
# pwned* exists (none of the SQL in the names and keys ran).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/lib/pg.sh"

skip_unless_cmd "$PYTHON" "tests/integ/pg_gear.py is the test's Gearman peer"
pg_test_start
pg_psql -c "ALTER DATABASE dsjob SET standard_conforming_strings = off" >/dev/null
diag "database dsjob: standard_conforming_strings = off by default" \
    "($(pg_psql -c 'SHOW standard_conforming_strings') in a new session)"
pgd_start_or_bail a --keep-results 600
"$PYTHON" "$top_srcdir/tests/integ/pg_gear.py" hostile "$(pgd_port a)" \
    "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d dsjob
rc=$?
pgd_stop a
exit $rc
