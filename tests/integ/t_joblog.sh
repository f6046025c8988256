#!/bin/sh
# Job events in dsjobd's log: submitted, assigned, completed, failed,
# requeued and refused, each with its handle, function and peer, at the
# levels dsjobd(8) gives (INFO; WARNING when the server gives a job up;
# NOTICE for a refusal); --log-format json writes one object a line; no
# payload, result, unique key or worker's text ever reaches the log; at
# the default level a job logs nothing. Real jobs through the dsjob CLI.
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)
command -v perl >/dev/null 2>&1 && perl -MJSON::PP -e 1 2>/dev/null || {
    echo "1..0 # SKIP perl's JSON::PP is needed to read the JSON log"
    exit 0
}

# wait_log PATTERN: until the log has a line matching PATTERN (grep -E), at most 10 s.
wait_log() {
    i=0
    while ! grep -Eq "$1" "$SERVER_LOG" && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    grep -Eq "$1" "$SERVER_LOG"
}

# events FIELD...: the JSON log's job events, one a line, the FIELDs tab-separated.
events() {
    perl -MJSON::PP -ne '
        BEGIN { @f = @ARGV; @ARGV = () }
        my $o = eval { decode_json($_) } or next;
        next unless exists $o->{event};
        print join("\t", map { defined $o->{$_} ? $o->{$_} : "null" } @f), "\n";' "$@" <"$SERVER_LOG"
}

server_start dsjobd --verbose INFO --log-format json --job-retries 2 --max-queue 1
a="127.0.0.1:$SERVER_PORT"

# A foreground job: submitted, assigned, completed.
"$DSJOB" -s "$a" worker -f jl.up -- tr a-z A-Z &
w1=$!
out=$(echo secret-fg-payload | timeout 20 "$DSJOB" -s "$a" submit -u secret-unique-key jl.up)
is "$out" "SECRET-FG-PAYLOAD" "a foreground job runs"
kill -TERM "$w1"; wait "$w1" 2>/dev/null
h=$(events event handle function | awk -F'\t' '$1 == "submitted" && $3 == "jl.up" { print $2 }')
[ -n "$h" ]; ok $? "a submitted event with its handle ($h) and function"
is "$(events event handle | awk -F'\t' -v h="$h" '$2 == h { print $1 }' | tr '\n' ' ')" \
    "submitted assigned completed " "the job's events in order: submitted, assigned, completed"
is "$(events event level | awk -F'\t' '$1 == "submitted" || $1 == "completed" { print $2 }' |
    sort -u)" "INFO" "submitted and completed are INFO"
peers=$(events event peer | awk -F'\t' '{ print $2 }' | sort -u | tr '\n' ' ')
case $peers in
*null*) ok 1 "every event so far names a peer ($peers)" ;;
*127.0.0.1:*) ok 0 "every event so far names a peer (127.0.0.1:port)" ;;
*) ok 1 "every event so far names a peer ($peers)" ;;
esac

# A job its worker fails, writing a secret to stderr (sent as WORK_WARNING).
"$DSJOB" -s "$a" worker -f jl.fail -- sh -c 'echo secret-stderr-text >&2; exit 3' 2>/dev/null &
w2=$!
echo secret-fail-payload | timeout 20 "$DSJOB" -s "$a" submit jl.fail >/dev/null 2>&1
is "$?" 1 "a job its worker fails: the client gets exit status 1"
kill -TERM "$w2"; wait "$w2" 2>/dev/null
is "$(events event function why level | awk -F'\t' '$1 == "failed" && $2 == "jl.fail"' |
    cut -f3,4)" "WORK_FAIL	INFO" "a failed event: why WORK_FAIL, at INFO"

# A worker that dies holding a background job: requeued, then given up after 2 attempts.
"$DSJOB" -s "$a" submit -b jl.crash secret-crash-payload >/dev/null
crash() { "$DSJOB" -s "$a" worker -f jl.crash -- sh -c 'kill -9 $PPID' 2>/dev/null; }
crash &
c1=$!
wait_log '"event":"requeued".*"function":"jl.crash"'
ok $? "a worker that dies holding a job: requeued"
is "$(events event function why | awk -F'\t' '$1 == "requeued" && $2 == "jl.crash" { print $3 }')" \
    "its worker disconnected" "with why"
crash &
c2=$!
wait_log '"event":"failed".*"function":"jl.crash"'
ok $? "the second death: failed"
is "$(events event function level why | awk -F'\t' '$1 == "failed" && $2 == "jl.crash"' |
    cut -f3,4)" "WARNING	its worker disconnected, after 2 attempts" \
    "at WARNING, with why and the attempts"
wait "$c1" "$c2" 2>/dev/null

# Refused: the queue is full (--max-queue 1); a function name with a quote and a
# backslash is escaped, and the JSON still reads back.
name=$(printf 'jl."q\\z')
"$DSJOB" -s "$a" submit -b "$name" one >/dev/null 2>&1
"$DSJOB" -s "$a" submit -b "$name" secret-refused-payload >/dev/null 2>&1
is "$?" 1 "a submit over --max-queue is refused"
is "$(events event level handle | awk -F'\t' '$1 == "refused"' | cut -f2,3)" "NOTICE	null" \
    "a refused event, at NOTICE, with no handle"
got=$(events event function | awk -F'\t' '$1 == "refused" { print $2 }')
is "$got" "$name" "its function name reads back from the JSON as it was sent"
grep '"event":"refused"' "$SERVER_LOG" | grep -q 'QUEUE_ERROR'; ok $? "and why says QUEUE_ERROR"
server_stop

# Every line is one JSON object with a time and a level; no payload, result,
# unique key or worker text is in it.
bad=$(perl -MJSON::PP -ne 'my $o = eval { decode_json($_) };
    print unless ref $o eq "HASH" && $o->{time} =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
        && defined $o->{level}' <"$SERVER_LOG")
is "$bad" "" "every line of the JSON log is an object with an ISO 8601 time and a level"
is "$(events event | sort -u | tr '\n' ' ')" "assigned completed failed refused requeued submitted " \
    "the six job events were seen"
n=$(events event handle function peer | awk -F'\t' 'NF == 4' | wc -l)
is "$n" "$(events event | wc -l)" "every event has event, handle, function and peer"
is "$(grep -ci secret "$SERVER_LOG")" 0 \
    "no payload, result, unique key or worker text is in the log"

# Text format at NOTICE: refusals only; the default level: nothing about jobs.
server_start dsjobd --verbose NOTICE --max-queue 1
a="127.0.0.1:$SERVER_PORT"
"$DSJOB" -s "$a" submit -b jl.t one >/dev/null
"$DSJOB" -s "$a" submit -b jl.t two >/dev/null 2>&1
server_stop
grep -q 'NOTICE job refused handle=- function="jl.t" peer=127.0.0.1:[0-9]* why="QUEUE_ERROR: ' \
    "$SERVER_LOG"
ok $? "text format: a refused line with its fields"
grep -q "job submitted" "$SERVER_LOG"; is $? 1 "at NOTICE no submitted line"
server_start dsjobd
a="127.0.0.1:$SERVER_PORT"
"$DSJOB" -s "$a" worker -f jl.d -- cat &
w3=$!
echo x | timeout 20 "$DSJOB" -s "$a" submit jl.d >/dev/null
ok $? "a job at the default level"
kill -TERM "$w3"; wait "$w3" 2>/dev/null
server_stop
grep -q " job " "$SERVER_LOG"; is $? 1 "at the default level (ERROR) no job line"
out=$("$DSJOBD" --log-format yaml 2>&1); rc=$?
is "$rc" 2 "an unknown --log-format exits 2"
echo "$out" | grep -q -- "--log-format: 'yaml' is not text or json"; ok $? "naming it"
done_testing
