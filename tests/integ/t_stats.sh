#!/bin/sh
# The counters of the "stats" admin command, read through `dsjob stats`,
# after real jobs went through a real dsjobd on a SQLite work dir and real
# `dsjob worker`s: submitted, completed, failed after a retry (dead), a
# cancelled job, a maxqueue refusal, queued by priority, the oldest queued
# job's age, workers and connections by kind, bytes, store commits and
# batch sizes, the wait and run histograms, jobs replayed after a restart;
# and the three formats (table, tsv, json parsed with JSON::PP). Every wait
# is a bounded poll; every process is started here and stopped by its pid.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

if ! perl -MJSON::PP -e 1 2>/dev/null; then
    echo "1..0 # SKIP perl with JSON::PP not found"
    exit 0
fi
unset DSJOB_SERVERS DSJOB_PROGRESS

# ds: server.sh's, a timeout(1) only around the verbs dsjob does not bound.

# stat NAME: the value of one sample (NAME with its labels), from the tsv
# listing; with SNAP set, from the listing saved in it (snap: one listing
# for several checks of the same moment).
stat() {
    if [ -n "${SNAP:-}" ]; then
        awk -F '\t' -v n="$1" '$1 == n { print $2 }' "$SNAP"
    else
        ds stats --format tsv | awk -F '\t' -v n="$1" '$1 == n { print $2 }'
    fi
}
snap() {
    SNAP=$T/stats.tsv
    ds stats --format tsv >"$SNAP"
}

# stat_is NAME WANT: for poll.
stat_is() {
    [ "$(stat "$1")" = "$2" ]
}

W=$T/work
server_start dsjobd --work-dir "$W" --retry-on fail -j 2 --max-dead 5
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f up -- tr a-z A-Z &
track $!
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f bad -- false &
track $!
poll stat_is 'dsjob_workers{function="bad"}' 1
ok $? "two workers registered"
poll stat_is 'dsjob_workers{function="up"}' 1
ok $? "each counted under its function"
is "$(stat 'dsjob_connections{kind="worker"}')" 2 "two worker connections"

for i in 1 2 3; do
    echo "job $i" | ds submit up >/dev/null
done
snap
is "$(stat 'dsjob_jobs_submitted_total{function="up"}')" 3 "three jobs submitted"
is "$(stat 'dsjob_jobs_completed_total{function="up"}')" 3 "three completed"
is "$(stat 'dsjob_job_queue_wait_seconds_count{function="up"}')" 3 "three waits observed"
is "$(stat 'dsjob_job_run_seconds_count{function="up"}')" 3 "three runs observed"
is "$(stat 'dsjob_job_run_seconds_bucket{function="up",le="+Inf"}')" 3 \
    "the +Inf bucket holds every run"
SNAP=""

# A background job whose command fails: retried once (-j 2), then dead.
ds submit -b bad x >/dev/null
poll stat_is 'dsjob_jobs_dead{function="bad"}' 1
ok $? "the failing job ends in the dead set"
snap
is "$(stat 'dsjob_jobs_retried_total{function="bad"}')" 1 "after one retry"
is "$(stat 'dsjob_jobs_failed_total{function="bad"}')" 1 "counted failed once"
is "$(stat 'dsjob_job_run_seconds_count{function="bad"}')" 2 "two attempts ran"
is "$(stat 'dsjob_jobs_completed_total{function="bad"}')" 0 "none completed"
SNAP=""

# Jobs nobody does: queued by priority, one cancelled, a maxqueue refusal.
h=$(ds submit -b -p high idle a)
ds submit -b -p low idle b >/dev/null
ds submit -b -p low idle c >/dev/null
is "$(stat 'dsjob_jobs_queued{function="idle",priority="high"}')" 1 "one queued high"
is "$(stat 'dsjob_jobs_queued{function="idle",priority="low"}')" 2 "two queued low"
is "$(stat 'dsjob_jobs_queued{function="idle",priority="normal"}')" 0 "none normal"
age=$(stat 'dsjob_oldest_queued_job_age_seconds{function="idle"}')
echo "$age" | grep -Eq '^[0-9]+(\.[0-9]{3})?$'
ok $? "the oldest queued job's age is a number of seconds: $age"
ds cancel "$h" >/dev/null
is "$(stat 'dsjob_jobs_cancelled_total{function="idle"}')" 1 "a cancel is counted"
is "$(stat 'dsjob_jobs_queued{function="idle",priority="high"}')" 0 "and the job is gone"
printf 'maxqueue full 1\n' | perl -MIO::Socket::INET -e '
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $ARGV[0]) or die;
    print $s scalar <STDIN>; my $r = <$s>; print $r;' "$SERVER_PORT" | grep -q '^OK'
ok $? "maxqueue full 1"
ds submit -b full 1 >/dev/null
ds submit -b full 2 >/dev/null 2>&1
is $? 1 "a second job over maxqueue is refused"
is "$(stat 'dsjob_limit_hits_total{limit="max_queue"}')" 1 "and counted as a max_queue hit"
is "$(stat 'dsjob_limit_hits_total{limit="max_jobs"}')" 0 "no other limit was hit"

# Server-wide: one listing.
snap
commits=$(stat dsjob_store_commits_total)
[ "${commits:-0}" -ge 1 ]
ok $? "background submits made store commits: $commits"
is "$(stat dsjob_store_batch_operations_count)" "$commits" "one batch size per commit"
is "$(stat dsjob_store_commit_seconds_count)" "$commits" "one commit time per commit"
is "$(stat dsjob_store_commit_errors_total)" 0 "no commit failed"
bin=$(stat dsjob_received_bytes_total)
bout=$(stat dsjob_sent_bytes_total)
[ "${bin:-0}" -gt 100 ] && [ "${bout:-0}" -gt 100 ]
ok $? "bytes in ($bin) and out ($bout) are counted"
is "$(stat 'dsjob_connections{kind="admin"}')" 1 "the stats connection is an admin one"
[ "$(stat dsjob_connections_accepted_total)" -ge 10 ]
ok $? "every connection was accepted and counted"
SNAP=""

# The formats.
ds stats 2>/dev/null | head -1 | grep -Eq '^NAME +VALUE$'
ok $? "the table has a NAME VALUE header"
ds stats --format json | perl -MJSON::PP -e '
    my $a = decode_json(join "", <STDIN>);
    my %v = map { $_->{name} => $_->{value} } @$a;
    exit !($v{q(dsjob_jobs_completed_total{function="up"})} == 3
        && $v{q(dsjob_job_run_seconds_sum{function="bad"})} =~ /^[0-9.]+$/);'
ok $? "json: an array of name/value objects, values as numbers"
ds stats --format tsv | grep -v '^#' | awk -F '\t' 'NF != 2 { exit 1 }'
ok $? "tsv: two columns on every line"

# A restart replays the two low jobs, the full one and the dead one.
server_stop
reap
server_start dsjobd --work-dir "$W" --retry-on fail -j 2 --max-dead 5
is "$(stat dsjob_jobs_replayed_total)" 4 "a restart replays the stored jobs and counts them"
is "$(stat 'dsjob_jobs_submitted_total{function="full"}')" 0 \
    "counters start again at zero: a replayed job is not a submit"
server_stop

# gearmand has no stats command: dsjob says so and fails.
if [ -n "$GEARMAND" ] && [ -x "$GEARMAND" ]; then
    server_start gearmand
    ds stats >/dev/null 2>&1
    is $? 1 "gearmand answers stats with ERR: dsjob exits 1"
    server_stop
else
    _tap_n=$((_tap_n + 1))
    echo "ok $_tap_n # SKIP gearmand not installed"
fi
done_testing
