#!/bin/sh
# Sequences with real workers: `gearman -w` (libgearman) and `dsjob worker`
# (libdsjobworker, whose non-zero exit is WORK_FAIL), jobs from the gearman
# CLI and, rows of many, from one connection (rawpeer packets). Each job writes "S FUNC KEY N" when it starts and "E" (done) or "F"
# (failed) when it ends, and check_ev reads that log at every
# start: no two jobs of a key at once, and each key's jobs start in
# submission order (a failed job again until it ends; with skip, the next
# once it is dead). Then: keys run in parallel (a key's first job waits for
# another key's to start); a failing job holds its key through its retries'
# backoff and, with hold, in the dead set while other keys go on, until
# retry dead; with skip the next one runs once it is dead; kill -9 of a
# dsjobd on SQLite mid-run, a restart, and every acknowledged job runs, the
# one that was running first again, in order. Every wait is a bounded poll
# on an event; every process is started here and stopped by its pid.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

[ -n "$GEARMAN" ] || { echo "1..0 # SKIP no gearman CLI"; exit 0; }
[ -x "$DSJOB" ] || { echo "1..0 # SKIP tools/dsjob is not built"; exit 0; }
unset DSJOB_SERVERS DSJOB_PROGRESS

# admin LINE: one admin command; the answer (every line up to "." for listings).
admin() {
    "$RAWPEER" "$SERVER_PORT" admin "$1"
}

RAWPEER_ABS=$(cd "$(dirname "$RAWPEER")" && pwd)/rawpeer
# The job: payload "FUNC KEY N". wait.FUNC.KEY.N holds a pattern the job
# waits for in the log before it ends; fail.FUNC.KEY.N makes it fail.
cat >"$T/job.sh" <<EOF
#!/bin/sh
read -r f k n || true
# One line is one write(2) to a file opened O_APPEND: whole, in the order of
# the writes, without the flock and sh that were two processes a line.
ev() { echo "\$1" >>"$T/ev"; }
ev "S \$f \$k \$n"
if [ -f "$T/wait.\$f.\$k.\$n" ]; then
    # Until a line matches the pattern (one process watching the log, at
    # most 120 s in which it did not grow).
    read -r pat <"$T/wait.\$f.\$k.\$n"
    "$RAWPEER_ABS" until-lines "$T/ev" 1 -E "\$pat" || true
fi
sleep 0.05
if [ -f "$T/fail.\$f.\$k.\$n" ]; then
    ev "F \$f \$k \$n"
    exit 1
fi
ev "E \$f \$k \$n"
EOF
chmod +x "$T/job.sh"
: >"$T/ev"

# check_ev: the log obeys the sequences (SKIP: functions with skip, whose
# job is dead after ATTEMPTS failures). After an "R" (a restart) a key's
# first start may be an earlier job again (its end had not committed), never
# a later one than the next.
ATTEMPTS=3
SKIP=""
check_ev() {
    awk -v skipfns=" $SKIP " -v A=$ATTEMPTS '
        $1 == "R" { for (x in run) run[x] = 0; for (x in want) again[x] = 1; next }
        { key = $2 " " $3; n = $4 + 0; w = (key in want) ? want[key] : 1 }
        $1 == "S" {
            if (run[key] > 0) { print "# " key " " n " starts while another runs"; bad = 1 }
            run[key]++
            if (again[key]) {
                if (n > w) { print "# " key " " n " first after the restart, not <= " w; bad = 1 }
                again[key] = 0
                want[key] = n
            } else if (n != w) { print "# " key " " n " starts, " w " was next"; bad = 1 }
        }
        $1 == "E" { run[key]--; want[key] = n + 1 }
        $1 == "F" {
            run[key]--
            if (++fails[key " " n] >= A && index(skipfns, " " $2 " ")) want[key] = n + 1
        }
        END { exit bad }' "$T/ev"
}
# count LINE: how many lines of the log are LINE; has LINE: one is (the
# shell reads the log: a grep a question was most of the checks' cost).
count() {
    _n=0
    while IFS= read -r _l; do [ "$_l" != "$1" ] || _n=$((_n + 1)); done <"$T/ev"
    echo $_n
}
has() { [ "$(count "$1")" -gt 0 ]; }
# until_has LINE: until LINE is in the log (one process watching it).
until_has() { wait_line "$T/ev" "$1"; }
# submit_row N: the jobs "s K N" of keys a, b and c (unique K:N), in that
# order on one connection.
submit_row() {
    submit_bg "$SERVER_PORT" s "a:$1" "s a $1" s "b:$1" "s b $1" s "c:$1" "s c $1" >/dev/null ||
        echo "# submit of row $1 failed"
}

# The rows of jobs of parts 1 (R1) and 3 (R3): 6 and 8 in make check, 15
# and 12 in t_sequence_long.sh (make check-long).
R1=${SEQUENCE_ROWS1:-6}
R3=${SEQUENCE_ROWS3:-8}

# 1. Order and parallelism: three keys of R1 jobs each, submitted
# interleaved to four gearman -w workers; a:1 waits until b:1 has started.
server_start dsjobd --limit "s sequence hold"
admin "limit s" | grep -q "^s	sequence hold	"
ok $? "--limit sets a sequence"
echo "^S s b 1\$" >"$T/wait.s.a.1"
for i in 1 2 3 4; do
    "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f s -- "$T/job.sh" >/dev/null 2>&1 &
    track $!
done
for n in $(seq 1 "$R1"); do submit_row "$n"; done
until_has "E s a $R1" && until_has "E s b $R1" && until_has "E s c $R1"
ok $? "$((3 * R1)) jobs ran"
check_ev
ok $? "no two jobs of a key at once, each key's in submission order"
has "S s b 1" && [ "$(grep -n . "$T/ev" | grep -m1 ':E s a 1$' | cut -d: -f1)" -gt \
    "$(grep -n . "$T/ev" | grep -m1 ':S s b 1$' | cut -d: -f1)" ]
ok $? "keys run in parallel (b:1 started while a:1 ran)"
reap
server_stop

# 2. A failing job holds its key: s with hold, t with skip (set by dsjob
# limit), one dsjob worker, three attempts with a backoff of about a second;
# on SQLite, with a kill -9 and a restart while a:1 is dead.
: >"$T/ev"
rm -f "$T"/wait.*
start2() {
    server_start dsjobd --work-dir "$T/work2" --limit "s sequence hold" --retry-on fail \
        --retry-backoff 1,2 -j $ATTEMPTS --max-dead 10
}
start2
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" limit t --sequence=skip >/dev/null
ok $? "dsjob limit t --sequence=skip"
admin "limit t" | grep -q "^t	sequence skip	"
ok $? "t has sequence skip"
SKIP=t
touch "$T/fail.s.a.1" "$T/fail.t.c.1"
for j in "s a 1" "s a 2" "s a 3" "t c 1" "t c 2" "s b 1" "s b 2" "s b 3"; do
    set -- $j
    gm -b -f "$1" -u "$2:$3" "$j" >/dev/null || echo "# submit $j failed"
done
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f s -f t -- "$T/job.sh" >/dev/null 2>&1 &
track $!
dead_has() { admin "show dead $1" | grep -q "	$2	"; }
# Its third failure in the log (one process watching it), then the dead set.
wait_lines "$T/ev" $ATTEMPTS '^F s a 1$' && poll dead_has s a:1
ok $? "a:1 failed $ATTEMPTS times and is dead"
until_has "E t c 2"
ok $? "skip: c:2 ran once c:1 was dead"
is "$(count "F t c 1")" $ATTEMPTS "c:1 had all its attempts first"
until_has "E s b 3"
ok $? "key b ran meanwhile"
is "$(count "F s a 1")" $ATTEMPTS "a:1 had $ATTEMPTS attempts"
awk '/^F s a 1$/ { f = 1 } f && /^S s b / { print; exit }' "$T/ev" | grep -q .
ok $? "b started while a:1 waited for its retry"
gm -b -f s -u "b:4" "s b 4" >/dev/null
until_has "E s b 4"
ok $? "b:4, submitted after a:1 died, ran"
has "S s a 2"
ok $([ $? -ne 0 ] && echo 0 || echo 1) "hold: a:2 did not start while a:1 is dead"
is "$(admin "limit s" | head -n 1 | cut -f7)" sequence "limit s: held back by the sequence"
admin stats | grep -q '^dsjob_flow_sequences_held{function="s"} 1$'
ok $? "dsjob_flow_sequences_held is 1"
check_ev
ok $? "no overlap, in order, through retries and death"
reap
server_kill9
start2
admin stats | grep -q '^dsjob_flow_sequences_held{function="s"} 1$'
ok $? "after kill -9 and a restart a:1 still holds its key"
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f s -f t -- "$T/job.sh" >/dev/null 2>&1 &
track $!
gm -b -f s -u "b:5" "s b 5" >/dev/null
until_has "E s b 5"
ok $? "b:5, submitted after the restart, ran"
has "S s a 2"
ok $([ $? -ne 0 ] && echo 0 || echo 1) "a:2 did not start"
rm -f "$T/fail.s.a.1"
admin "retry dead s" | grep -q '^OK'
ok $? "retry dead s"
until_has "E s a 3"
ok $? "a:1 ran again, then a:2 and a:3"
check_ev
ok $? "and in order: a:1 first"
admin stats | grep -q '^dsjob_flow_sequences_held{function="s"} 0$'
ok $? "nothing held"
reap
server_stop

# 3. kill -9 mid-run on SQLite, restart: every acknowledged job runs, in order.
: >"$T/ev"
SKIP=""
W=$T/work
server_start dsjobd --work-dir "$W" --limit "s sequence hold"
for n in $(seq 1 "$R3"); do submit_row "$n"; done
is "$(admin status | awk -F '\t' '$1 == "s" { print $2 }')" $((3 * R3)) "$((3 * R3)) jobs acknowledged and queued"
for i in 1 2; do
    "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f s -- "$T/job.sh" >/dev/null 2>&1 &
    track $!
done
wait_lines "$T/ev" 10 '^E'
ok $? "ten jobs done"
server_kill9
reap
ended() { # as many ends (E, F) as starts (S) in the log
    _s=0
    while IFS= read -r _l; do
        case $_l in S*) _s=$((_s + 1)) ;; [EF]*) _s=$((_s - 1)) ;; esac
    done <"$T/ev"
    [ $_s -eq 0 ]
}
poll ended
ok $? "the jobs that were running when it died ended"
check_ev
ok $? "in order before the kill"
echo R >>"$T/ev"
server_start dsjobd --work-dir "$W" --limit "s sequence hold"
for i in 1 2; do
    "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f s -- "$T/job.sh" >/dev/null 2>&1 &
    track $!
done
until_has "E s a $R3" && until_has "E s b $R3" && until_has "E s c $R3"
ok $? "the rest ran after the restart"
check_ev
ok $? "no overlap, in order, a key's first after the restart not past its next"
lost=0
for k in a b c; do
    for n in $(seq 1 "$R3"); do has "E s $k $n" || { echo "# $k:$n never ran"; lost=1; }; done
done
ok $lost "nothing acknowledged was lost"
empty() { [ "$(admin status | awk -F '\t' '$1 == "s" { print $2 }')" = 0 ]; }
poll empty
ok $? "and nothing is left"
reap
server_stop

done_testing
