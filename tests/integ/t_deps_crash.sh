#!/bin/sh
# Dependencies across kill -9: a three-level
# graph (six jobs, four that wait for three of them each, three that wait
# for those) and a failing branch (a parent that fails, a child with
# after-fail=fail and its own child, a child with after-fail=run), run by
# real workers (gearman -w) against dsjobd on SQLite, which is killed with
# SIGKILL at a random point (after a random number of worker log lines)
# DEPS_CRASH_KILLS times per round, DEPS_CRASH_ROUNDS rounds (2 kills and 1
# round in make check, 2 rounds in t_deps_crash_long.sh, make check-long;
# make soak's deps cell runs more), and restarted on the same
# work dir each time.
#
# Asserts, each round: no job starts before each of its parents has ended
# (the log of every attempt, in order); every acknowledged job ends: each
# job of the graph and the run child end, the failed branch's two children
# are in their dead sets naming their parents, and none of those two ran.
# A wait gives up only after 120 s in which nothing moved (no new log line).
# The last diag line ("soak-row ...") is the row of make soak's deps cell.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

dsjob_test_begin "the gearman CLI is the plain Gearman worker"
ROUNDS=${DEPS_CRASH_ROUNDS:-1}
KILLS=${DEPS_CRASH_KILLS:-2}

lines() { wc -l <"$LOG"; }

# wait_moving CMD...: CMD until it succeeds; gives up after 120 s without a
# new log line. A try every 0.05 s for a second after the last new line,
# then every 0.2 s: CMD runs dsjob and greps, a loaded machine's CPU.
wait_moving() {
    _last=$(lines)
    _still=0
    while ! "$@"; do
        if [ "$_still" -lt 20 ]; then sleep 0.05; else sleep 0.2; fi
        _now=$(lines)
        if [ "$_now" != "$_last" ]; then
            _last=$_now
            _still=0
        else
            _still=$((_still + 1))
            [ "$_still" -ge 615 ] && return 1
        fi
    done
    return 0
}

start_workers() {
    for f in fa fb fc fz; do
        gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f "$f" -- "$T/rec.sh" >/dev/null 2>&1 &
        track $!
    done
}

ENDS="a1 a2 a3 a4 a5 a6 b1 b2 b3 b4 c1 c2 c3 kr"
# not_ended: how many of ENDS have no "end N" line in the log (one awk).
not_ended() {
    awk -v want="$ENDS" '{ seen[$0] = 1 } END {
        m = 0; k = split(want, w, " "); for (i = 1; i <= k; i++) if (!(("end " w[i]) in seen)) m++
        print m }' "$LOG"
}
ended_all() { [ "$(not_ended)" -eq 0 ]; }
dead_text() { ds dead list "$1" --format tsv 2>/dev/null | awk -F'\t' -v h="$2" '$1 == h { print $9 }'; }
dead_both() { [ -n "$(dead_text fb "$kf")" ] && [ -n "$(dead_text fc "$kg")" ]; }
done_all() { ended_all && dead_both; }
# ENDED: Perl, true once every one of ENDS has its "end N" line in @l.
ENDED='my %s = map { $_ => 1 } @l; !grep { !$s{"end $_"} } qw('"$ENDS"')'
# until_reached: until the log has $at lines or everything ended; one
# process watching the log (wait_file), bounded as wait_moving.
until_reached() { wait_file "$LOG" "@l >= $at || ($ENDED)"; }
# until_ended: until every one of ENDS has its "end N" line (rawpeer
# until-lines: a distinct line each), bounded as wait_moving.
until_ended() {
    _n=0 _alt=
    for _e in $ENDS; do _n=$((_n + 1)) _alt=$_alt${_alt:+|}$_e; done
    await_lines "$LOG" $_n -d -E "^end ($_alt)\$"
}

ordered() {
    perl -e '
        my %par; open my $e, "<", $ARGV[0] or die; while (<$e>) { my ($c, $p) = split; push @{$par{$c}}, $p; }
        my %ended; my $bad = 0; open my $l, "<", $ARGV[1] or die;
        while (<$l>) {
            my ($what, $n) = split;
            if ($what eq "end" || $what eq "fail") { $ended{$n} = 1; next; }
            next unless $what eq "start";
            for my $p (@{$par{$n} || []}) { unless ($ended{$p}) { print "# $n started before $p ended\n"; $bad++; } }
        }
        exit($bad ? 1 : 0);' "$1" "$LOG"
}

EDGES=$T/edges
cat >"$EDGES" <<EOF
b1 a1
b1 a2
b1 a3
b2 a2
b2 a3
b2 a4
b3 a3
b3 a4
b3 a5
b4 a4
b4 a5
b4 a6
c1 b1
c1 b2
c2 b3
c2 b4
c3 b1
c3 b2
c3 b3
c3 b4
kf bad-p
kr bad-p
kg kf
EOF

r=0
acked=0
lost=0
early=0
while [ $r -lt "$ROUNDS" ]; do
    r=$((r + 1))
    W=$T/work$r
    LOG=$T/runs$r.log
    mkdir -p "$W"
    : >"$LOG"
    cat >"$T/rec.sh" <<EOF
#!/bin/sh
n=\$(cat)
echo "start \$n" >>"$LOG"
sleep 0.1
case \$n in bad*) echo "fail \$n" >>"$LOG"; exit 1 ;; esac
echo "end \$n" >>"$LOG"
printf 'result-%s' "\$n"
EOF
    chmod +x "$T/rec.sh"
    server_start dsjobd --store sqlite --work-dir "$W" --keep-results 600 --max-dead 100 \
        --verbose INFO || exit 1
    # The whole graph is submitted, every answer read, before any worker runs.
    a1=$(ds submit -b fa a1) && a2=$(ds submit -b fa a2) && a3=$(ds submit -b fa a3) &&
        a4=$(ds submit -b fa a4) && a5=$(ds submit -b fa a5) && a6=$(ds submit -b fa a6) &&
        b1=$(ds submit -b --after "$a1,$a2,$a3" fb b1) &&
        b2=$(ds submit -b --after "$a2,$a3,$a4" fb b2) &&
        b3=$(ds submit -b --after "$a3,$a4,$a5" fb b3) &&
        b4=$(ds submit -b --after "$a4,$a5,$a6" fb b4) &&
        c1=$(ds submit -b --after "$b1,$b2" fc c1) &&
        c2=$(ds submit -b --after "$b3,$b4" fc c2) &&
        c3=$(ds submit -b --after "$b1,$b2,$b3,$b4" fc c3) &&
        p=$(ds submit -b fz bad-p) &&
        kf=$(ds submit -b --after "$p" fb kf) &&
        kr=$(ds submit -b --after "$p" --after-fail run fb kr) &&
        kg=$(ds submit -b --after "$kf" fc kg)
    ok $? "round $r: the graph is submitted ($a1 .. $kg)"
    [ -n "$kg" ] && acked=$((acked + 17))
    k=0
    while [ $k -lt "$KILLS" ]; do
        k=$((k + 1))
        # From where the log is, a random number of lines more (the graph writes about 34).
        at=$(awk -v s="$$$r$k" -v now="$(lines)" 'BEGIN { srand(s); print now + int(rand() * 20) }')
        diag "round $r: kill -9 once the log has $at lines"
        start_workers
        until_reached
        server_kill9
        reap
        server_start dsjobd --store sqlite --work-dir "$W" --keep-results 600 --max-dead 100 \
            --verbose INFO || exit 1
    done
    start_workers
    until_ended && wait_moving done_all
    ok $? "round $r: after $KILLS kills every acknowledged job ended"
    lost=$((lost + $(not_ended)))
    grep -qx "fail bad-p" "$LOG" || lost=$((lost + 1))
    [ -n "$(dead_text fb "$kf")" ] || lost=$((lost + 1))
    [ -n "$(dead_text fc "$kg")" ] || lost=$((lost + 1))
    ordered "$EDGES" >"$T/order$r"
    ok $? "round $r: no job started before each of its parents ended"
    cat "$T/order$r"
    early=$((early + $(grep -c started "$T/order$r")))
    is "$(dead_text fb "$kf")|$(dead_text fc "$kg")" "parent $p failed|parent $kf failed" \
        "round $r: the failed branch's children are dead, naming their parents"
    ! grep -Eqx "start (kf|kg)" "$LOG"
    ok $? "round $r: and they never ran"
    reap
    server_stop
done
# The soak's row (make soak): kills, acknowledged, lost (not ended as they
# should), and children started before a parent ended.
diag "soak-row kills $((ROUNDS * KILLS)) acknowledged $acked lost $lost callbacks-once 0 of 0 early $early"
done_testing
