#!/bin/sh
# Dependencies with real workers: the gearman CLI
# (`gearman -w`) and `dsjob worker`, against dsjobd on a SQLite work dir.
#
# Asserts: a three-level graph submitted before any worker is up is held
# (show job says "held" and what it waits for), and once workers come no
# job starts before each of its parents has ended (the workers log start
# and end lines in one file, in order); the last level reads its parents'
# kept results; a parent that succeeded before the child's submit counts
# as done (--keep-results), an unknown handle is refused (DEPENDENCY);
# parents named by function and unique key (unique:FUNCTION:UNIQUE) are
# waited for as by handle, live or kept; a held child past its deadline
# expires held (the dead set, "expired");
# a parent that fails for good fails its after-fail=fail child with
# "parent H failed", and that failure goes down to a grandchild; an
# after-fail=cancel child is dropped without running; an after-fail=run
# child runs; a held child cancelled by hand fails its own child; without
# a store the graph works the same, --max-after bounds a submit, and the
# memcached store refuses dependencies by name.
# Every wait polls for the event (at most 120 s under load).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

dsjob_test_begin "the gearman CLI is the plain Gearman worker"

state_of() { ds job "$1" 2>/dev/null | awk '$1 == "state" { print $2 }'; }
has_line() { [ -f "$1" ] && grep -qx "$2" "$1"; }

LOG=$T/runs.log
: >"$LOG"
# The worker: the payload is the job's name; "bad*" fails.
cat >"$T/rec.sh" <<EOF
#!/bin/sh
n=\$(cat)
echo "start \$n" >>"$LOG"
case \$n in bad*) echo "fail \$n" >>"$LOG"; exit 1 ;; esac
echo "end \$n" >>"$LOG"
printf 'result-%s' "\$n"
EOF
chmod +x "$T/rec.sh"

# ordered EDGES: every "start C" comes after "end P" for each edge "C P".
ordered() {
    perl -e '
        my %par; open my $e, "<", $ARGV[0] or die; while (<$e>) { my ($c, $p) = split; push @{$par{$c}}, $p; }
        my %ended; my $bad = 0; open my $l, "<", $ARGV[1] or die;
        while (<$l>) {
            my ($what, $n) = split;
            if ($what eq "end") { $ended{$n} = 1; next; }
            next unless $what eq "start";
            for my $p (@{$par{$n} || []}) { unless ($ended{$p}) { print "# $n started before $p ended\n"; $bad++; } }
        }
        exit($bad ? 1 : 0);' "$1" "$LOG"
}

W=$T/work
mkdir -p "$W"
server_start dsjobd --store sqlite --work-dir "$W" --keep-results 600 --max-dead 100 \
    --verbose INFO || exit 1

# --- a three-level graph, held until its parents succeed ---
EDGES=$T/edges
: >"$EDGES"
a1=$(ds submit -b fa a1) && a2=$(ds submit -b fa a2) && a3=$(ds submit -b fa a3)
b1=$(ds submit -b --after "$a1,$a2" fb b1)
b2=$(ds submit -b --after "$a2,$a3" fb b2)
c1=$(ds submit -b --after "$b1,$b2" fc c1)
printf 'b1 a1\nb1 a2\nb2 a2\nb2 a3\nc1 b1\nc1 b2\n' >"$EDGES"
case $c1 in H:*) ok 0 "a three-level graph is submitted ($a1 .. $c1)" ;;
*) ok 1 "a three-level graph is submitted: '$b1' '$b2' '$c1'" ;; esac
is "$(state_of "$b1")/$(state_of "$c1")" "held/held" "its children are held"
ds job "$c1" | grep -q "^after  *$b1,$b2\$"
ok $? "show job names what the held job waits for"
is "$(ds status --format tsv | awk -F'\t' '$1 == "fc" { print $2 "/" $3 }')" "1/0" \
    "status counts the held job, not as running"
is "$(ds stats --format tsv | awk -F'\t' '$1 == "dsjob_jobs_held" { print $NF }')" 3 \
    "dsjob_jobs_held counts the three held jobs"
# A worker for the last level alone gets nothing while its parents wait.
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fc -- "$T/rec.sh" >/dev/null 2>&1 &
track $!
wait_for 120 sh -c "ds() { \"$DSJOB\" -s 127.0.0.1:$SERVER_PORT \"\$@\"; }; ds workers | grep -q fc"
ok $? "a worker for fc is up"
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fa -- "$T/rec.sh" >/dev/null 2>&1 &
track $!
wait_line "$LOG" "end a3"
ok $? "the first level runs"
is "$(state_of "$c1")" held "the last level still waits (no worker for fb yet)"
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f fb -- "$T/rec.sh" >/dev/null 2>&1 &
track $!
wait_line "$LOG" "end c1"
ok $? "with a dsjob worker for fb, the graph runs to its end"
ordered "$EDGES"
ok $? "no job started before each of its parents ended"
is "$(ds result "$b1")+$(ds result "$b2")" "result-b1+result-b2" \
    "the last level can read its parents' kept results"

# --- a parent that succeeded before, an unknown one ---
d1=$(ds submit -b --after "$a1" fc d1)
wait_line "$LOG" "end d1"
ok $? "a parent that had succeeded before the submit counts as done ($d1)"
out=$(ds submit -b --after H:nowhere:1 fc d2 2>&1)
case $out in *DEPENDENCY*"no job H:nowhere:1"*) ok 0 "an unknown handle is refused" ;;
*) ok 1 "an unknown handle is refused: $out" ;; esac
! grep -q "start d2" "$LOG"
ok $? "and nothing of it ran"

# --- a parent that fails for good: each policy ---
p=$(ds submit -b fz bad-p)
kf=$(ds submit -b --after "$p" fb kf)
kc=$(ds submit -b --after "$p" --after-fail cancel fb kc)
kr=$(ds submit -b --after "$p" --after-fail run fb kr)
g=$(ds submit -b --after "$kf" fc g)
is "$(state_of "$kf")/$(state_of "$kc")/$(state_of "$kr")/$(state_of "$g")" \
    "held/held/held/held" "four children of a parent not run yet are held"
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fz -- "$T/rec.sh" >/dev/null 2>&1 &
track $!
wait_line "$LOG" "end kr"
ok $? "after-fail=run: the child runs once its parent failed"
dead_text() { ds dead list "$1" --format tsv 2>/dev/null | awk -F'\t' -v h="$2" '$1 == h { print $9 }'; }
wait_for 120 sh -c "[ \"\$(\"$DSJOB\" -s 127.0.0.1:$SERVER_PORT dead list fc --format tsv | grep -c '$g')\" = 1 ]"
is "$(dead_text fb "$kf")" "parent $p failed" "after-fail=fail: the child is dead, naming its parent"
is "$(dead_text fc "$g")" "parent $kf failed" "the failure goes down to the grandchild"
ds job "$kc" >/dev/null 2>&1
ok $((!$?)) "after-fail=cancel: the child is gone"
! grep -Eq "start (kf|kc|g)\$" "$LOG"
ok $? "none of the failed or cancelled ones ran"
grep -q "job failed handle=$g .*why=\"parent $kf failed\"" "$SERVER_LOG"
ok $? "the log says why"

# --- a held child cancelled by hand: gone, and its own child fails ---
hp=$(ds submit -b fw hp)
hc=$(ds submit -b --after "$hp" fw hc)
hg=$(ds submit -b --after "$hc" fw hg)
ds cancel "$hc" >/dev/null 2>&1
ok $? "a held job can be cancelled"
wait_for 120 sh -c "\"$DSJOB\" -s 127.0.0.1:$SERVER_PORT dead list fw --format tsv | grep -q '^$hg'"
is "$(dead_text fw "$hg")" "parent $hc failed" "its child fails, naming it"
is "$(state_of "$hp")" queued "its parent is untouched"

# --- a submit of a job that failed: refused unless after-fail=run ---
out=$(ds submit -b --after "$p" fb late 2>&1)
case $out in *DEPENDENCY*"failed"*) ok 0 "a submit after a parent that failed is refused" ;;
*) ok 1 "a submit after a parent that failed is refused: $out" ;; esac

reap
server_stop

# --- parents named by unique key: unique:FUNCTION:UNIQUE, %XX escapes ---
mkdir -p "$T/work2"
server_start dsjobd --store sqlite --work-dir "$T/work2" --keep-results 600 --max-dead 100 || exit 1
u1=$(ds submit -b -u "k:1,x%" fu u1) && u2=$(ds submit -b -u plain fu u2)
ok $? "two parents with unique keys (one with a colon, a comma and a percent sign)"
v1=$(ds submit -b --after "unique:fu:k:1%2Cx%25,unique:fu:plain" fv v1)
ok $? "a child names them by function and unique key"
is "$(state_of "$v1")" held "it is held"
ds job "$v1" | grep -q "^after *$u1,$u2\$"
ok $? "waiting for their handles: $(ds job "$v1" | grep '^after ')"
out=$(ds submit -b --after "unique:fu:nosuch" fv v2 2>&1)
case $out in *DEPENDENCY*"no job unique:fu:nosuch here"*) ok 0 "an unknown unique key is refused" ;;
*) ok 1 "an unknown unique key is refused: $out" ;; esac
out=$(ds submit -b --after "unique:fu" fv v3 2>&1)
case $out in *DEPENDENCY*"is not unique:FUNCTION:UNIQUE"*) ok 0 "a malformed one too" ;;
*) ok 1 "a malformed one too: $out" ;; esac
: >"$LOG"
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fu -- "$T/rec.sh" >/dev/null 2>&1 &
track $!
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fv -- "$T/rec.sh" >/dev/null 2>&1 &
track $!
wait_line "$LOG" "end v1"
ok $? "the child runs once they succeeded"
printf 'v1 u1\nv1 u2\n' >"$EDGES"
ordered "$EDGES"
ok $? "after them"
w1=$(ds submit -b --after "unique:fu:plain" fv w1) && wait_line "$LOG" "end w1"
ok $? "a kept parent named by unique key counts as done"
# A held child's deadline counts from its submit: past it, it expires held.
hp=$(ds submit -b fnone hp) && hx=$(ds submit -b --expire-in 1 --after "$hp" fv hx)
ok $? "a child with --expire-in 1 waits for a parent no worker does"
dead_why() { ds dead list fv --format tsv 2>/dev/null | awk -F'\t' -v h="$1" '$1 == h { print $9 }'; }
expired_held() { [ "$(dead_why "$hx")" = expired ]; }
wait_for 120 expired_held
ok $? "past its deadline it is in the dead set, expired, without its parent's end"
is "$(state_of "$hp")" queued "its parent still waits"
! grep -qx "start hx" "$LOG"
ok $? "and it never ran"
reap
server_stop

# --- no store: the graph in memory; --max-after bounds a submit ---
server_start dsjobd --keep-results 600 --max-after 2 || exit 1
m1=$(ds submit -b fm m1) && m2=$(ds submit -b fm m2) && m3=$(ds submit -b fm m3)
out=$(ds submit -b --after "$m1,$m2,$m3" fn n0 2>&1)
case $out in *DEPENDENCY*"--max-after (2)"*) ok 0 "past --max-after a submit is refused, naming it" ;;
*) ok 1 "past --max-after a submit is refused, naming it: $out" ;; esac
n1=$(ds submit -b --after "$m1,$m2" fn n1)
is "$(state_of "$n1")" held "without a store a child is held too"
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fm -- "$T/rec.sh" >/dev/null 2>&1 &
track $!
gearman -h 127.0.0.1 -p "$SERVER_PORT" -w -f fn -- "$T/rec.sh" >/dev/null 2>&1 &
track $!
wait_line "$LOG" "end n1"
ok $? "and runs once its parents succeeded"
printf 'n1 m1\nn1 m2\n' >"$EDGES"
ordered "$EDGES"
ok $? "after them"
reap
server_stop

# --- memcached keeps no edges: refused by name ---
mc=${MEMCACHED_BIN:-/usr/bin/memcached}
if [ -x "$mc" ]; then
    mport=$(free_port)
    "$mc" -l 127.0.0.1 -p "$mport" -U 0 -m 64 -u root &
    track $!
    wait_port "$mport" || { echo "Bail out! memcached did not listen on $mport"; exit 1; }
    server_start dsjobd --store memcached --memcached-servers "127.0.0.1:$mport" || exit 1
    q1=$(ds submit -b fq q1)
    out=$(ds submit -b --after "$q1" fq q2 2>&1)
    case $out in *DEPENDENCY*"store memcached keeps no dependencies"*)
        ok 0 "the memcached store refuses a dependency, naming itself" ;;
    *) ok 1 "the memcached store refuses a dependency, naming itself: $out" ;; esac
    server_stop
    reap
else
    echo "ok $((_tap_n + 1)) # SKIP memcached is not installed"
    _tap_n=$((_tap_n + 1))
fi
done_testing
