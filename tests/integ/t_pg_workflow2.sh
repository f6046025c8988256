#!/bin/sh
# Batches and dependencies on the postgres store, what t_pg_workflow.sh
# leaves out: three dsjobd (a, b and p) share one PostgreSQL of the test's
# own (tests/lib/pg.sh).
#
#   pipelined close   a client sends 20 members of a batch in one write and,
#                     right after, "batch close" on a second connection;
#                     with --store-commit-interval both land in one commit
#                     of p's (a server of its own: on a and b a commit
#                     does not wait a second): every member is created
#                     (the writer flushes the gathered adds before the
#                     close), none refused, and the batch counts 20
#   dashboard         b (no batch opened there) lists pipe1 from the
#                     database in /api/batches and /api/batch/pipe1 (an
#                     unknown id is 404); the dashboard in headless
#                     chromium (playwright-core, tests/e2e/pg_batches.mjs)
#                     shows its row: skipped without node, chromium or
#                     tests/e2e/node_modules (make e2e installs it)
#   by unique key     a child submitted through a, after=unique:FUNC:KEY of
#                     a parent submitted through b only: a finds the parent
#                     in the table, the child is held with the parent's
#                     handle as its edge; a key no job holds is refused,
#                     naming it
#   show job          "show job" of the held child, on a and on b (neither
#                     holds it): state held, its parent, after_fail; an
#                     unknown handle is still ERR UNKNOWN_JOB; then the
#                     parent runs on b and the child after it
#   refused member    a member of batch bd (callbacks on both servers' workers)
#                     after an unknown handle is refused by the store (its add
#                     alone) and is no member; one after the live parent is
#                     held, one is plain: the batch counts 2, its callbacks
#                     each fire once with total 2 once both ran
#   own key           a submit after unique:F:K of its own F and K, when no
#                     other job holds it: refused, not held after itself
#
# A wait for lines of a file is one rawpeer (await_lines), its condition
# then checked by poll_s or poll_moving, which bound every wait (at least 60 s
# of nothing moving); every process is started here and stopped by its pid.
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/lib/pg.sh"

pg_test_start
RAWPEER=$top_builddir/tests/lib/rawpeer
pgd_launch p --store-commit-interval 1000 --verbose INFO
pgd_launch a --verbose INFO
pgd_launch b --verbose INFO --http-port 0 --http-port-file "$TEST_TMPDIR/b.http"
pgd_wait_all_or_bail

ds() { # ds NAME ARGS...: dsjob against that server
    _s=$1
    shift
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" -t 20000 "$@"
}
counts_of() { # counts_of NAME ID: "total pending done failed dead closed"
    ds "$1" batch status "$2" 2>/dev/null | tail -1 |
        sed -n 's/.* total=\([0-9]*\) pending=\([0-9]*\) done=\([0-9]*\) failed=\([0-9]*\) dead=\([0-9]*\) closed=\([a-z]*\) .*/\1 \2 \3 \4 \5 \6/p'
}

# --- a close pipelined behind the adds ----------------------------------------------------
out=$(ds p batch open pipe1 2>&1)
ok $? "batch pipe1 opened on p: $out"
out=$("$RAWPEER" "$(pgd_port p)" batchpipe pipe1 20 wf2.pipe 2>&1)
echo "$out" | sed 's/^/# /'
is "$(echo "$out" | head -1)" "created 20 refused 0" "20 members sent with the close behind them: all created"
is "$(echo "$out" | sed -n 2p)" "OK" "the close is answered OK"
is "$(counts_of b pipe1)" "20 20 0 0 0 yes" "pipe1 counts 20 members, closed (read on b)"

# --- the dashboard and the API list the database's batches ----------------------------
HTTP=$(cat "$TEST_TMPDIR/b.http")
api=$("$RAWPEER" "$HTTP" http GET /api/batches)
body=$(echo "$api" | sed -n 3p)
echo "# /api/batches: $body"
case $body in *'"id":"pipe1","total":20,"pending":20,'*'"closed":true'*) r=0 ;; *) r=1 ;; esac
ok $r "b's /api/batches lists pipe1 from the database, total 20, closed"
api=$("$RAWPEER" "$HTTP" http GET /api/batch/pipe1)
case $(echo "$api" | head -1)+$(echo "$api" | sed -n 3p) in 200+'{"id":"pipe1","total":20,'*) r=0 ;; *) r=1 ;; esac
ok $r "b's /api/batch/pipe1 is its status: $(echo "$api" | sed -n 3p)"
is "$("$RAWPEER" "$HTTP" http GET /api/batch/nosuch | head -1)" 404 "/api/batch/nosuch is 404"
E2E=$top_srcdir/tests/e2e
if command -v node >/dev/null 2>&1 && [ -x "${CHROMIUM:-/usr/bin/chromium}" ] &&
    [ -d "$E2E/node_modules/playwright-core" ]; then
    out=$(timeout 200 node "$E2E/pg_batches.mjs" "http://127.0.0.1:$HTTP/" pipe1 20 2>&1)
    r=$?
    echo "$out" | sed 's/^/# /'
    ok $r "the dashboard of b lists pipe1 (headless chromium)"
else
    echo "ok $((_tap_n + 1)) - the dashboard of b lists pipe1 # SKIP no node, chromium or tests/e2e/node_modules/playwright-core"
    _tap_n=$((_tap_n + 1))
fi

# --- a parent by unique key, submitted through another server ---------------------------
hp=$(ds b submit -b -u k1 wf2.parent p 2>&1)
ok $? "a parent with unique key k1 submitted through b: $hp"
# Batch bd's members in the same commits: one refused for its parent, two taken.
ds a batch open --on-complete wf2.cb --on-success wf2.cb bd >/dev/null
ok $? "batch bd opened on a"
member() { # member NAME AFTER DATA: a member of bd after AFTER through NAME; its answer
    "$RAWPEER" "$(pgd_port "$1")" packets 26 batch=bd -- 26 "after=$2" -- 18 wf2.child "" "$3" |
        tail -1
}
out=$(member a H:nosuch:1 x)
case $out in *STORE_ERROR*"no job H:nosuch:1"*) r=0 ;; *) r=1 ;; esac
ok $r "a member after an unknown handle is refused: $out"
out=$(member b "$hp" y)
case $out in "8 H:"*) r=0 ;; *) r=1 ;; esac
ok $r "a member after the parent is created through b: $out"
hbk=${out#8 }
out=$("$RAWPEER" "$(pgd_port a)" packets 26 batch=bd -- 18 wf2.child "" z | tail -1)
case $out in "8 H:"*) r=0 ;; *) r=1 ;; esac
ok $r "a plain member is created: $out"
ds b batch close bd >/dev/null
ok $? "bd closed on b"
is "$(counts_of a bd)" "2 2 0 0 0 yes" "bd counts the 2 members it took"
hc=$(ds a submit -b --after unique:wf2.parent:k1 wf2.child c 2>&1)
r=$?
case $hc in H:*) ;; *) r=1 ;; esac
ok $r "a child after unique:wf2.parent:k1 submitted through a: $hc"
is "$(q "SELECT parent FROM dsjob.deps WHERE child = '$hc'") $(q "SELECT owner FROM dsjob.jobs WHERE handle = '$hc'")" \
    "$hp (held)" "its edge names the parent's handle, and it is held in the table"
out=$(ds a submit -b --after unique:wf2.parent:nokey wf2.child c 2>&1)
r=$?
case $out in *"no job unique:wf2.parent:nokey"*) [ $r -ne 0 ] ;; *) false ;; esac
ok $? "a child of a key no job holds is refused, naming it: $out"

# --- show job of a held child -------------------------------------------------------------
for n in a b; do
    out=$("$RAWPEER" "$(pgd_port "$n")" admin "show job $hc")
    echo "$out" | sed "s/^/# $n: /"
    is "$(echo "$out" | grep -E '^(handle|function|state|after|after_fail) ' | tr '\n' ' ')" \
        "handle $hc function wf2.child state held after $hp after_fail fail " \
        "show job of the held child on $n: held, waiting for its parent"
    is "$(echo "$out" | tail -1)" "." "... and its listing ends with ."
done
is "$("$RAWPEER" "$(pgd_port a)" admin "show job H:nosuch:1")" "ERR UNKNOWN_JOB" \
    "show job of an unknown handle: ERR UNKNOWN_JOB"
RAN=$TEST_TMPDIR/ran
: >"$RAN"
for n in a b; do
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$n")" -f wf2.parent -f wf2.child -- \
        sh -c 'cat >/dev/null; echo "$DSJOB_HANDLE" >>"$1"' sh "$RAN" 2>>"$TEST_TMPDIR/worker.err" &
    eval "W_$n=\$!"
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$n")" -f wf2.cb -- \
        sh -c 'echo "$DSJOB_UNIQUE $(cat)" >>"$1"' sh "$TEST_TMPDIR/cb" 2>>"$TEST_TMPDIR/worker.err" &
    eval "C_$n=\$!"
done
child_ran() { grep -qx "$hc" "$RAN"; }
await_lines "$RAN" 1 -x "$hc"
poll_moving 60 "cat '$RAN'" child_ran
ok $? "the child ran"
is "$(grep -x -e "$hp" -e "$hc" "$RAN" | tr '\n' ' ')" "$hp $hc " "after its parent"
cbs() { grep -c "^batch:bd:$1 " "$TEST_TMPDIR/cb" 2>/dev/null; }
fired() { [ "$(cbs complete)" -ge 1 ] && [ "$(cbs success)" -ge 1 ]; }
await_lines "$TEST_TMPDIR/cb" 2 -E '^batch:bd:(complete|success) ' -d
poll_moving 60 "cat '$RAN' '$TEST_TMPDIR/cb'" fired
ok $? "bd's on_complete and on_success reached a worker"
is "$(counts_of b bd)" "2 0 2 0 0 yes" "bd: 2 members, both done"
grep "^batch:bd:complete " "$TEST_TMPDIR/cb" | grep -q '"total":2,"done":2,"failed":0,"dead":0'
ok $? "the summary counts 2: $(grep "^batch:bd:complete " "$TEST_TMPDIR/cb")"
grep -q -x "$hbk" "$RAN"
ok $? "the held member ran"
# Exactly once: one more job through a callbacks' worker, then count.
ds a submit -b -u last wf2.cb end >/dev/null
last_seen() { grep -q "^last end" "$TEST_TMPDIR/cb"; }
await_lines "$TEST_TMPDIR/cb" 1 -E '^last end'
poll_s 60 last_seen
is "$(cbs complete) $(cbs success)" "1 1" "each of bd's callbacks ran once"
kill "$W_a" "$W_b" "$C_a" "$C_b" 2>/dev/null
wait "$W_a" "$W_b" "$C_a" "$C_b" 2>/dev/null

# --- after its own unique key -------------------------------------------------------------
# No job holds wf2.self/s1 but the submit itself: its own row, inserted
# just before the lookup, is not its parent (it would wait for itself for
# ever); the key names no other job, so the submit is refused.
out=$(ds a submit -b -u s1 --after unique:wf2.self:s1 wf2.self x 2>&1)
r=$?
case $out in *"no job unique:wf2.self:s1"*) [ $r -ne 0 ] ;; *) false ;; esac
ok $? "a job after its own unique key is refused, not held after itself: $out"

pgd_stop_all
done_testing
