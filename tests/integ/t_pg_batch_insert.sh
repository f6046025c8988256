#!/bin/sh
# A batch's members on the postgres store are inserted with their batch
# (add_rows.sql's batch column) and counted once a batch in the same
# statement (add.sql, add_new.sql), not updated one by one after the
# INSERT: a member's submit costs a plain submit's statement.
#
#   no update   50 members submitted to an open batch: once PostgreSQL's
#               statistics show their 50 inserts, they show no update and
#               no delete of a dsjob.jobs row (an UPDATE per member showed
#               50, in the same transaction and so the same report); the
#               rows carry the batch; its total is 50
#   coalesce    a member whose unique key a live job holds coalesces onto
#               it: no row, and the total does not count it
#   refused     a submit to a closed batch, and to one no server opened, is
#               refused naming it, leaves no row, and the total stays
#
# Every wait is for an event, bounded by poll_s; the server is started
# here and stopped by its pid.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start a
ds() { "$DSJOB" -s "127.0.0.1:$(pgd_port a)" -t 20000 "$@"; }
total() {
    ds batch status "$1" 2>/dev/null | tail -1 | sed -n 's/.* total=\([0-9]*\) .*/\1/p'
}
tstat() { # tstat COLUMN: pg_stat_user_tables' COLUMN for dsjob.jobs
    q "SELECT $1 FROM pg_stat_user_tables WHERE schemaname = 'dsjob' AND relname = 'jobs'"
}

# --- no update ---------------------------------------------------------------------------
ds batch open bi >/dev/null
ok $? "batch bi opened"
ds batch add -n 50 --numbered bi bi.none ok >"$T/acked" 2>"$T/add.err"
ok $? "50 members submitted ($(wc -l <"$T/acked") handles)"
inserted() { [ "$(tstat n_tup_ins)" -ge 50 ]; }
poll_s 120 inserted
ok $? "PostgreSQL's statistics show the 50 inserts ($(tstat n_tup_ins))"
is "$(tstat n_tup_upd) $(tstat n_tup_del)" "0 0" "and no update or delete of a job row"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE batch = 'bi'")" 50 "the 50 rows carry the batch"
is "$(total bi)" 50 "bi's total is 50"

# --- coalesce ----------------------------------------------------------------------------
h1=$(ds batch add -u key1 bi bi.none one)
ok $? "a member with unique key key1: $h1"
h2=$(ds batch add -u key1 bi bi.none two)
ok $? "another with key1: $h2"
is "$h2" "$h1" "it coalesced onto the first"
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE batch = 'bi'") $(total bi)" "51 51" \
    "one row more, counted once"

# --- refused -----------------------------------------------------------------------------
ds batch close bi >/dev/null
ok $? "bi closed"
out=$(ds batch add bi bi.none late 2>&1)
r=$?
case $out in *"batch bi is not open"*) [ $r -ne 0 ] ;; *) false ;; esac
ok $? "a submit to closed bi is refused, naming it: $out"
out=$(ds batch add nosuch bi.none x 2>&1)
r=$?
case $out in *"batch nosuch is not open"*) [ $r -ne 0 ] ;; *) false ;; esac
ok $? "a submit to a batch no server opened is refused, naming it: $out"
is "$(q "SELECT count(*) FROM dsjob.jobs") $(total bi)" "51 51" "neither left a row or a count"
pgd_stop a
ok $? "dsjobd a stops on SIGTERM"
done_testing
