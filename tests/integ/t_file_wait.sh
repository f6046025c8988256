#!/bin/sh
# The shell tests' one file wait, rawpeer until-lines (server.sh's
# await_lines, integ.sh's wait_lines and wait_line), against a file that no
# longer changes: what it counts (whole lines only; -E, -x, -d), that a gone
# -p PID ends it, that a bad pattern is refused. A wait that must fail does
# so after RAWPEER_UNTIL_S=1 s in which the file did not change (the
# "nothing moved" bound; nothing here writes while a wait runs).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

F=$T/f
printf 'a\nend x\nend y\nend x\npart' >"$F"
never() { RAWPEER_UNTIL_S=1 "$@" 2>/dev/null; }

await_lines "$F" 4
ok $? "four whole lines"
never await_lines "$F" 5
ok $((!$?)) "a last line without its newline is not counted"
wait_lines "$F" 3 '^end '
ok $? "wait_lines: three lines match ^end"
never wait_lines "$F" 4 '^end '
ok $((!$?)) "not four"
await_lines "$F" 2 -d -E '^end (x|y)$'
ok $? "-d: two different lines"
never await_lines "$F" 3 -d -E '^end (x|y)$'
ok $((!$?)) "-d: end x counts once"
wait_line "$F" "end y"
ok $? "wait_line: a whole line"
never wait_line "$F" "end"
ok $((!$?)) "wait_line: not a part of one"
never wait_line "$F" "part"
ok $((!$?)) "wait_line: not an unfinished last line"
sh -c 'exit 0' &
gone_pid=$!
wait "$gone_pid"
await_lines "$F" 99 -p "$gone_pid" 2>/dev/null
ok $((!$?)) "-p: a gone process ends the wait (not the 120 s bound)"
await_lines "$F" 1 -E '(' 2>/dev/null
is $? 64 "a bad pattern is refused"
printf '\n' >>"$F"
await_lines "$F" 1 -x part
ok $? "the line once its newline came"
done_testing
