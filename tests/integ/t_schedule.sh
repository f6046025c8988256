#!/bin/sh
# Periodic schedules (dsjobd --schedule, admin "schedule", dsjob schedule)
# with a real worker (`dsjob worker`, which gives the command the job's
# unique key in DSJOB_UNIQUE), on the sqlite store:
#
#   config      a schedule of the config file, every second (six fields),
#               fires: the worker gets its payload, each job's unique key
#               names the schedule and the tick (sched:NAME:TICK), no tick
#               twice
#   admin       dsjob schedule add / list; pause stops the ticks (none after
#               the pause), resume starts them again, rm removes one
#   privilege   a peer outside --admin-allow may list but not add
#   restart     the schedules come back from the store after a restart
#   downtime    two schedules with the same two ticks, one missed=once and
#               one missed=skip: the first tick fires while the server is
#               up, the second while it is down; after the restart the
#               once-schedule runs that missed tick once, the other does not
#
# Every wait is for an event (a job reaching the worker, a line in the
# list), bounded by 120 s; the downtime part waits for the clock to pass
# a tick, which is the event itself.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

[ -x "$DSJOB" ] || {
    echo "1..0 # SKIP tools/dsjob is not built"
    exit 0
}
unset DSJOB_SERVERS
W=$T/work
RAN=$T/ran

count() { # count NAME: jobs of schedule NAME the worker got (0 before the first)
    _c=$(grep -c "^sched:$1:" "$RAN" 2>/dev/null)
    echo "${_c:-0}"
}
# until_at_least NAME N: until the worker got N jobs of schedule NAME (one
# process watching its file).
until_at_least() { wait_lines "$RAN" "$2" "^sched:$1:"; }
ds() { "$DSJOB" -s "127.0.0.1:$SERVER_PORT" -t 20000 "$@"; }
listed() { ds schedule list --format tsv 2>/dev/null | grep -q "$1"; }
# ticks_after NAME TIME: how many of NAME's ticks the worker got are later
# than TIME (ISO 8601 in UTC, as the keys are: string order is time order).
ticks_after() {
    grep "^sched:$1:" "$RAN" 2>/dev/null | cut -d' ' -f1 | cut -d: -f3- |
        awk -v t="$2" '$0 > t { n++ } END { print n + 0 }'
}
iso_now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

cat >"$T/rec.sh" <<'EOF'
echo "$DSJOB_UNIQUE $(cat)" >> "$1"
EOF
worker() {
    "$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -c 2 -f sched.fn -f sched.two -f sched.ds -- \
        sh "$T/rec.sh" "$RAN" 2>>"$T/worker.err" &
    WORKER_PID=$!
    track $WORKER_PID
}
stop_worker() {
    kill -TERM "$WORKER_PID" 2>/dev/null
    wait "$WORKER_PID" 2>/dev/null
}

# --- config ------------------------------------------------------------------------------
cat >"$T/dsjobd.conf" <<'EOF'
store = sqlite
# every second, seconds first
schedule = every '*/1 * * * * *' sched.fn "hello world" missed=skip
EOF
server_start dsjobd --config-file "$T/dsjobd.conf" --work-dir "$W" --http-port 0 \
    --http-port-file "$T/http.port" || exit 1
worker
until_at_least every 3
ok $? "a config-file schedule fires every second: $(count every) jobs reached the worker"
bad=$(grep '^sched:every:' "$RAN" | grep -cv '^sched:every:[0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z hello world$')
is "$bad" 0 "each job's unique key is sched:every:TICK (UTC) and its payload the schedule's"
dups=$(cut -d' ' -f1 "$RAN" | sort | uniq -d | wc -l)
is "$dups" 0 "no tick's job ran twice"
if command -v curl >/dev/null 2>&1; then
    api=$(curl -s "http://127.0.0.1:$(cat "$T/http.port")/api/schedules")
    echo "$api" | grep -q '"name":"every","cron":"\*/1 \* \* \* \* \*","tz":"UTC","function":"sched.fn".*"next_run":"20[0-9-]*T[0-9:]*Z","last_run":"20'
    ok $? "/api/schedules lists it with its next and last run: $api"
    curl -s "http://127.0.0.1:$(cat "$T/http.port")/" | grep -q 'id="schedules"'
    ok $? "the dashboard has the schedules table"
else
    ok 0 "# SKIP no curl"
    ok 0 "# SKIP no curl"
fi

# --- admin -------------------------------------------------------------------------------
out=$(ds schedule add -p high two '*/1 * * * * *' sched.two "p2" 2>&1)
ok $? "dsjob schedule add two: $out"
wait_for 120 listed "^two	\*/1 \* \* \* \* \*	UTC	sched.two	high	skip	active"
ok $? "schedule list shows it with its settings"
until_at_least two 2
ok $? "the added schedule fires"
out=$(ds schedule add --tz Europe/Berlin -p low --missed once nightly '30 2 * * *' sched.two "a b" 2>&1)
ok $? "dsjob schedule add with every option: $out"
wait_for 120 listed "^nightly	30 2 \* \* \*	Europe/Berlin	sched.two	low	once	active	20[0-9-]*T0[01]:30:00Z	-	"
ok $? "it is listed with its zone, priority and policy, its next run 02:30 Berlin time in UTC"
ds schedule rm nightly >/dev/null 2>&1
out=$(ds schedule add bad '61 * * * *' sched.two 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "minute"
ok $? "a wrong expression is refused, the field named: $out"

ds schedule pause every >/dev/null 2>&1
ok $? "pause every"
paused_at=$(iso_now)
n2=$(count two)
until_at_least two $((n2 + 3))
ok $? "three more ticks of the other schedule passed"
is "$(ticks_after every "$paused_at")" 0 "no tick of the paused schedule after the pause"
listed "^every	.*	paused	-	"
ok $? "schedule list says it is paused, with no next run"
ne=$(count every)
ds schedule resume every >/dev/null 2>&1
ok $? "resume every"
until_at_least every $((ne + 2))
ok $? "it fires again after resume"
ds schedule rm two >/dev/null 2>&1
ok $? "rm two"
listed "^two	"
ok $((!$?)) "it is gone from the list"
ds schedule rm two >/dev/null 2>&1
ok $((!$?)) "rm of a schedule that is not there fails"
n2=$(count two)
ne=$(count every)
until_at_least every $((ne + 3))
[ "$(count two)" -le $((n2 + 1)) ]
ok $? "the removed schedule fires no more"
metric=$(ds stats --format tsv | awk -F'\t' '$1 == "dsjob_schedule_fires_total" { print $2 }')
[ "${metric:-0}" -ge 5 ]
ok $? "dsjob_schedule_fires_total counts the fires ($metric)"

# --- privilege ----------------------------------------------------------------------------
MAIN_PID=$SERVER_PID MAIN_PORT=$SERVER_PORT
server_start dsjobd --admin-allow 192.0.2.1 || exit 1
out=$(ds schedule add x '@daily' sched.fn 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q PERMISSION_DENIED
ok $? "schedule add from a peer outside --admin-allow is refused"
ds schedule list >/dev/null 2>&1
ok $? "schedule list is not"
server_stop
SERVER_PID=$MAIN_PID SERVER_PORT=$MAIN_PORT

# --- restart -----------------------------------------------------------------------------
stop_worker
server_stop
server_start dsjobd --store sqlite --work-dir "$W" || exit 1
wait_for 120 listed "^every	\*/1 \* \* \* \* \*	UTC	sched.fn	normal	skip	active"
ok $? "after a restart without --schedule the store's schedule is back"
listed "^two	"
ok $((!$?)) "and the removed one stays removed"
since=$(iso_now)
worker
wait_file "$RAN" 'grep { /^sched:every:(\S+) / && $1 gt "'"$since"'" } @l'
ok $? "it fires after the restart"
ds schedule pause every >/dev/null 2>&1

# --- downtime ----------------------------------------------------------------------------
# Two ticks in one minute, G and 2G seconds ahead: the first fires while the
# server is up, the second while it is down. A round whose adds end after
# its first tick, or whose stop ends after its second (a loaded machine),
# is not a test of downtime: its schedules go and a round with G doubled
# follows (3, 6, 12, 24 s); past that, the part is skipped as before.
has() { grep -q "^sched:$1:$2 " "$RAN"; }
restart() {
    server_start dsjobd --store sqlite --work-dir "$W" || exit 1
    worker
}
G=3 r=0
while :; do
    r=$((r + 1))
    # Not too late in the minute: the clock is the event, one sleep to it.
    while _s=$(date -u +%-S) && [ "$_s" -ge $((58 - 2 * G)) ]; do sleep $((60 - _s)); done
    now=$(date -u +%s)
    t1=$((now + G)) t2=$((now + 2 * G))
    s1=$(date -u -d "@$t1" +%-S) s2=$(date -u -d "@$t2" +%-S)
    mh=$(date -u -d "@$t1" '+%-M %-H')
    k1=$(date -u -d "@$t1" +%Y-%m-%dT%H:%M:%SZ) k2=$(date -u -d "@$t2" +%Y-%m-%dT%H:%M:%SZ)
    ds schedule add --missed once "once$r" "$s1,$s2 $mh * * *" sched.ds >/dev/null 2>&1 &&
        ds schedule add --missed skip "skip$r" "$s1,$s2 $mh * * *" sched.ds >/dev/null 2>&1
    added=$?
    if [ $added -eq 0 ] && [ "$(date -u +%s)" -ge "$t1" ] && [ $G -lt 24 ]; then
        diag "round $r: the adds ended after the first tick; again with ticks $((G * 2)) s apart"
        ds schedule rm "once$r" >/dev/null 2>&1
        ds schedule rm "skip$r" >/dev/null 2>&1
        G=$((G * 2))
        continue
    fi
    wait_lines "$RAN" 1 "^sched:once$r:$k1 " && wait_lines "$RAN" 1 "^sched:skip$r:$k1 "
    up=$?
    stop_worker
    server_stop
    if [ $added -eq 0 ] && [ $up -eq 0 ] && [ "$(date -u +%s)" -ge "$t2" ] && [ $G -lt 24 ]; then
        diag "round $r: the stop ended after the second tick; again with ticks $((G * 2)) s apart"
        restart
        ds schedule rm "once$r" >/dev/null 2>&1
        ds schedule rm "skip$r" >/dev/null 2>&1
        G=$((G * 2))
        continue
    fi
    break
done
ok $added "two schedules with ticks $k1 and $k2, missed=once and missed=skip"
ok $up "both fire the first tick while the server is up"
if [ "$(date -u +%s)" -ge "$t2" ]; then
    diag "the server took until after the second tick to stop (a loaded machine): no downtime to test"
    ok 0 "# SKIP downtime: the stop ended after the tick"
    ok 0 "# SKIP downtime"
    ok 0 "# SKIP downtime"
else
    while _n=$(date -u +%s) && [ "$_n" -le "$t2" ]; do sleep $((t2 - _n + 1)); done
    restart
    wait_lines "$RAN" 1 "^sched:once$r:$k2 "
    ok $? "after the downtime, missed=once runs the missed tick $k2"
    wait_for 120 listed "^once$r	.*	$k2	[a-z]*	1\$"
    ok $? "once, as the list says"
    listed "^skip$r	.*	$k1	-	0\$"
    ok $? "missed=skip does not: its last run is still $k1 and it fired nothing since the start"
    ! has "skip$r" "$k2" || ok 1 "the skip schedule's missed tick reached the worker"
fi
stop_worker
server_stop
done_testing
