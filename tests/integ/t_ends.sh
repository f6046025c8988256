#!/bin/sh
# Pipelined ends with a real worker: gearman -w (libgearman)
# runs two background jobs from a dsjobd on the SQLite store whose commits
# the test can hold (tests/soak/dsjobd_cut, DSJOB_CUTVFS_GATE: while the gate
# file exists every write to the store waits, and GATE.held says one does).
# With the gate closed after the submits, the first job's end cannot commit;
# the worker must still be given the second job meanwhile (before this
# change it waited for that commit). Then the gate opens, both ends
# commit, nothing is left. (The worker's hold at a second end, what
# GET_STATUS and a waiting client see meanwhile: tests/unit/t_storage.c.)
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)

skip_unless_cmd "${GEARMAN:-gearman}" "the gearman tool of gearmand"
skip_unless_cmd "${GEARADMIN:-gearadmin}" "the gearadmin tool of gearmand"
GEARMAN=$(command -v "${GEARMAN:-gearman}")
GEARADMIN=$(command -v "${GEARADMIN:-gearadmin}")
if [ -z "${DSJOBD_CUT:-}" ] || [ ! -x "$DSJOBD_CUT" ]; then
    echo "1..0 # SKIP no tests/soak/dsjobd_cut (built with SQLite)"
    exit 0
fi
DSJOBD=$DSJOBD_CUT
unwrap_libtool DSJOBD
DSJOB_CUTVFS_LOG=$dir/undo DSJOB_CUTVFS_NOFSYNC=1 DSJOB_CUTVFS_GATE=$dir/gate
export DSJOB_CUTVFS_LOG DSJOB_CUTVFS_NOFSYNC DSJOB_CUTVFS_GATE

lines() { if [ -f "$1" ]; then wc -l <"$1" | tr -d ' '; else echo 0; fi; }

echo "1..7"
server_start dsjobd --store sqlite --work-dir "$dir/store" -l "$dir/log"
ok $? "dsjobd_cut serves on the SQLite store"
"$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -b -f ends one >/dev/null &&
    "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -b -f ends two >/dev/null
ok $? "two background jobs acknowledged (committed)"

: >"$dir/gate"
# The worker appends each job's payload to ran, then answers.
"$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f ends -c 2 -- \
    sh -c 'cat >>"$0"; echo >>"$0"; echo done' "$dir/ran" >/dev/null &
wpid=$!
wait_for 120 eval '[ -e "$dir/gate.held" ]'
ok $? "the first job's end is committing, held at the gate"
wait_for 120 eval '[ "$(lines "$dir/ran")" -ge 2 ]'
ok $? "the second job ran while the first end's commit was held"
[ -e "$dir/gate.held" ] && [ -e "$dir/gate" ]
ok $? "(the gate was still closed and the commit still held)"

rm -f "$dir/gate"
wait "$wpid"
ok $? "the gate open, the worker ran its two jobs and left"
wait_for 120 eval '"$GEARADMIN" -h 127.0.0.1 -p "$SERVER_PORT" --status 2>/dev/null |
    grep -q "^ends	0	0	"'
ok $? "both ends committed: nothing of ends is left"
server_stop
