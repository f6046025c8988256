#!/bin/sh
# Flow control with real peers: `gearman -w` workers (libgearman) that know
# nothing of it, jobs from the gearman CLI, Perl's Gearman::Client and bare
# packets, a dsjobd on a SQLite work dir. The workers write a line when a job starts
# and when it ends (one O_APPEND write each), so the concurrency is sampled at every
# assignment; a rate's starts are counted in every one-second window of the
# server's own times of assignment (its INFO "job assigned" log lines: an
# upper bound only: a loaded machine starts fewer, never more); a key
# with FLOW_FLOOD queued jobs (2,000 in make check, 10,000 in
# t_flow_long.sh, make check-long) does not delay another key's job; a pause holds
# jobs across kill -9 and a restart, a resume starts them; a peer outside
# --admin-allow may show the settings but not change them. Every wait is a
# bounded poll; every process is started here and stopped by its pid.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

[ -n "$GEARMAN" ] || { echo "1..0 # SKIP no gearman CLI"; exit 0; }
unset DSJOB_SERVERS DSJOB_PROGRESS

# admin LINE: one admin command; the answer (every line up to "." for listings).
admin() {
    "$RAWPEER" "$SERVER_PORT" admin "$1"
}

# Workers are started as "$GEARMAN" ... & directly, not through gm (a shell
# function, whose $! would be a subshell's: reaping that would leave the
# worker running) and without gm's 20 s timeout (they run until reaped).

# queued FUNC: its queued jobs (status: total minus running).
queued() {
    admin status | awk -F '\t' -v f="$1" '$1 == f { print $2 - $3 }'
}
queued_is() { [ "$(queued "$1")" = "$2" ]; }
# held_is FUNC N: the server holds N jobs of FUNC, queued or running.
held_is() { [ "$(admin status | awk -F '\t' -v f="$1" '$1 == f { print $2 }')" = "$2" ]; }
# workers_are FUNC N: N workers can do FUNC.
workers_are() { [ "$(admin status | awk -F '\t' -v f="$1" '$1 == f { print $4 }')" = "$2" ]; }

# A worker's command: log "S" at the start and "E" at the end of each job.
cat >"$T/job.sh" <<EOF
#!/bin/sh
echo S >>"$T/ev"
sleep 0.2
echo E >>"$T/ev"
EOF
chmod +x "$T/job.sh"

W=$T/work
# INFO: the job events, whose "assigned" lines part 2 counts.
server_start dsjobd --work-dir "$W" --limit "f concurrency 2" --verbose INFO

# 1. Concurrency: six workers, twelve jobs, at most two at once.
for i in 1 2 3 4 5 6; do
    "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f f -- "$T/job.sh" >/dev/null 2>&1 &
    track $!
done
# The jobs on one connection (submit_bg), in the order of their numbers.
set --
for i in $(seq 1 12); do set -- "$@" f "" "j$i"; done
submit_bg "$SERVER_PORT" "$@" >/dev/null || echo "# a submit failed"
wait_lines "$T/ev" 24
ok $? "twelve jobs started and ended"
max=$(awk '/S/ { n++; if (n > m) m = n } /E/ { n-- } END { print m + 0 }' "$T/ev")
ok $([ "$max" -le 2 ] && echo 0 || echo 1) "never more than two running (saw $max)"
ok $([ "$max" -eq 2 ] && echo 0 || echo 1) "and two did run at once"
admin "limit f" | grep -q "^f	concurrency 2	0	0	-	0	no	12$"
ok $? "limit f shows the setting and the counts"

# 2. Rate: 5 a second, burst 2: in any second at most 2 + 5 starts.
admin "limit f concurrency off rate 5/s burst 2" | grep -q '^OK'
ok $? "a rate is set"
# Nine workers more, one a job: on a loaded machine the six, each starting
# a process a job, could start fewer than a server without the rate would.
for i in 1 2 3 4 5 6 7 8 9; do
    "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f f -- "$T/job.sh" >/dev/null 2>&1 &
    track $!
done
poll workers_are f 15 || echo "# the fifteen workers did not all register"
: >"$T/ev"
mark=$(wc -l <"$SERVER_LOG")
# The 15 jobs queued at once (one connection, submit_bg), so that only the
# tokens space their starts. A start is timed by the server's log line
# "job assigned" (written as it sends JOB_ASSIGN, in the same loop turn that
# took the token), not by the worker: a loaded machine's late worker stamps
# of one second's starts crowd into the next (8 seen in one second).
set --
for i in $(seq 1 15); do set -- "$@" f "" "r$i"; done
submit_bg "$SERVER_PORT" "$@" >/dev/null || echo "# a submit failed"
wait_lines "$T/ev" 30
ok $? "fifteen jobs started and ended"
# Their starts in ms of the day from the server's log (text format:
# "YYYY-MM-DD HH:MM:SS.mmm INFO job assigned handle=H function="f" ...",
# local time; a time half a day below the one before crossed midnight).
awk -v m="$mark" 'NR > m && $3 == "INFO" && $4 == "job" && $5 == "assigned" &&
    index($0, " function=\"f\" ") {
    split($2, c, ":"); t = ((c[1] * 60 + c[2]) * 60) * 1000 + int(c[3] * 1000 + 0.5)
    if (t < p - 43200000) d += 86400000; p = t; print t + d }' "$SERVER_LOG" >"$T/starts"
is "$(wc -l <"$T/starts" | tr -d ' ')" 15 "the server logged fifteen assignments"
worst=$(awk '{ t[NR] = $1 } END {
    m = 0; j = 1
    for (i = 1; i <= NR; i++) { while (t[i] - t[j] >= 1000) j++; if (i - j + 1 > m) m = i - j + 1 }
    print m }' "$T/starts")
ok $([ "$worst" -le 7 ] && echo 0 || echo 1) "at most 7 starts in any second (saw $worst)"
span=$(awk 'NR == 1 { a = $1 } END { print $1 - a }' "$T/starts")
ok $([ "$span" -ge 2000 ] && echo 0 || echo 1) "fifteen starts took at least 2 s of tokens (${span} ms)"
# A worker writes "E" before it sends WORK_COMPLETE: reaped in between,
# its job would be queued again and run in the next part.
poll held_is f 0 || poll held_is f 0
reap

# 3. Keys: FLOW_FLOOD jobs of key "flood", then one of key "other": one
# worker gets the flood's first job, then the other key's.
FLOOD=${FLOW_FLOOD:-2000}
admin "limit f off keyed" | grep -q '^OK'
ok $? "keys on"
if perl -MGearman::Client -e 1 2>/dev/null; then
    # The flood as bare SUBMIT_JOB_BG packets, 100 sent before their 100
    # JOB_CREATED are read (one Gearman::Client call a job costs ten times
    # the CPU); the other key's job from Gearman::Client, after them.
    timeout -k 5 300 perl -MSocket -MGearman::Client -e '
        socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket";
        connect($s, pack_sockaddr_in($ARGV[0], inet_aton("127.0.0.1"))) or die "connect";
        for (my $i = 1; $i <= $ARGV[1]; $i += 100) {
            my $out = "";
            for my $k ($i .. $i + 99) {
                my $p = "f\0flood:$k\0flood:$k";
                $out .= "\0REQ" . pack("NN", 18, length $p) . $p;
            }
            while (length $out) {
                my $n = syswrite($s, $out) or die "write";
                substr($out, 0, $n) = "";
            }
            for (1 .. 100) {
                my $h = "";
                while (length $h < 12) { sysread($s, $h, 12 - length $h, length $h) or die "eof" }
                my (undef, $t, $len) = unpack("a4NN", $h);
                my $d = "";
                while (length $d < $len) { sysread($s, $d, $len - length $d, length $d) or die "eof" }
                $t == 8 or die "submit of flood: answer $t $d";
            }
        }
        my $c = Gearman::Client->new(job_servers => ["127.0.0.1:$ARGV[0]"]);
        $c->dispatch_background("f", "other:1", { uniq => "other:1" }) or die "submit other";
    ' "$SERVER_PORT" "$FLOOD"
    ok $? "$FLOOD and one jobs submitted"
    poll queued_is f $((FLOOD + 1))
    ok $? "all queued (saw $(queued f))"
    cat >"$T/first.sh" <<EOF
#!/bin/sh
cat >>"$T/order"; echo >>"$T/order"
EOF
    chmod +x "$T/first.sh"
    "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -c 3 -f f -- "$T/first.sh" >/dev/null 2>&1 &
    track $!
    wait_lines "$T/order" 3
    ok $? "three jobs done"
    is "$(sed -n 2p "$T/order")" "other:1" "the other key's job went second"
    reap
else
    for i in 1 2 3 4; do echo "ok $((_tap_n + i)) # SKIP no Gearman::Client"; done
    _tap_n=$((_tap_n + 4))
fi
admin "limit f off" | grep -q '^OK'
ok $? "keys off"

# 4. Pause across kill -9: jobs stay, nothing starts; resume starts them.
server_stop
rm -rf "$W"
server_start dsjobd --work-dir "$W" --verbose NOTICE
admin "pause p" | grep -q '^OK'
ok $? "paused"
for i in 1 2 3; do gm -b -f p "p$i" >/dev/null; done
is "$(queued p)" 3 "submits are taken while paused"
grep -q "NOTICE.*function 'p' paused" "$SERVER_LOG"
ok $? "the pause is logged at NOTICE"
server_kill9
server_start dsjobd --work-dir "$W"
admin "limit p" | grep -q "^p	paused	"
ok $? "the pause survived kill -9"
: >"$T/ev"
"$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" -w -f p -f g -- "$T/job.sh" >/dev/null 2>&1 &
track $!
gm -b -f g "g1" >/dev/null
wait_lines "$T/ev" 2
ok $? "the worker runs another function's job"
is "$(queued p)" 3 "but none of the paused one"
admin "resume p" | grep -q '^OK'
ok $? "resumed"
wait_lines "$T/ev" 8
ok $? "its three jobs ran"
reap

# 5. A peer outside --admin-allow: may show, may not change.
server_stop
server_start dsjobd --admin-allow 10.0.0.0/8 --limit "q concurrency 3"
admin "limit q" | grep -q "^q	concurrency 3	"
ok $? "showing is allowed"
admin "limit q concurrency 9" | grep -q '^ERR PERMISSION_DENIED'
ok $? "limit is refused"
admin "pause q" | grep -q '^ERR PERMISSION_DENIED'
ok $? "pause is refused"
admin "resume q" | grep -q '^ERR PERMISSION_DENIED'
ok $? "resume is refused"
admin "limit q" | grep -q "^q	concurrency 3	"
ok $? "nothing changed"
server_stop

# 6. A bad --limit stops the start, naming the option.
"$DSJOBD" -L 127.0.0.1 -p 0 --limit "q speed 3" >"$T/bad.out" 2>&1
ok $([ $? -ne 0 ] && echo 0 || echo 1) "a bad --limit refuses to start"
grep -q -- "--limit 'q speed 3': unknown setting 'speed'" "$T/bad.out"
ok $? "and says why"

done_testing
