#!/bin/sh
# Sequences and key limits across three dsjobd sharing one PostgreSQL (tests/lib/pg.sh),
# with gearman -w (libgearman) workers on every server and the jobs
# submitted round the three servers, each after the last one's answer.
# Each job writes "S FUNC KEY N" when it starts and "E" or "F" when it
# ends; check_ev reads that log at every start: no two jobs of
# a key at once anywhere in the cluster, each key's in submission order.
#
#   order     three keys of 8 jobs: in order, no overlap, keys in parallel
#   hold      a job that fails for good holds its key on every server while
#             another key runs, until retry dead on the server that holds it
#   key-concurrency 2: two keys of 12 slow jobs, nine workers: never more
#             than 2 of a key at once in the cluster (sampled at every start)
#   key-rate  1/m burst 1, one key of 6 jobs, a worker on each server:
#             one job starts (a bucket per server, as before, lets three)
#             while the workers run two rounds of markers
#   fairness  10,000 queued jobs of one key, then one of another, key-
#             concurrency 1, a worker on each server: the other key's job
#             starts in the first round of the cluster's assignments
#   kill -9   the server running a key's job is killed: no server starts the
#             key's next job; after the lease runs out another server runs
#             the killed one's job again, then the rest, in order
# Every wait is for an event, bounded by 120 s of nothing moving.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

[ -n "$GEARMAN" ] && [ -x "$GEARMAN" ] || { echo "1..0 # SKIP no gearman CLI"; exit 0; }
[ -x "$DSJOB" ] || { echo "1..0 # SKIP tools/dsjob is not built"; exit 0; }
unset DSJOB_SERVERS DSJOB_PROGRESS
pg_test_begin

LEASE=4
SERVER_ARGS="--pg-lease $LEASE --pg-poll-ms 200 --max-dead 100 --retry-on fail -j 1 --verbose NOTICE"
pg_start_or_bail
for n in a b c; do
    # shellcheck disable=SC2086 # SERVER_ARGS are words
    pgd_launch "$n" $SERVER_ARGS
done
for n in a b c; do
    pgd_wait "$n" || {
        echo "Bail out! dsjobd $n did not start"
        exit 1
    }
done

ds() { # ds SERVER ARG...
    _s=$1
    shift
    timeout -k 2 60 "$DSJOB" -s "127.0.0.1:$(pgd_port "$_s")" "$@"
}
settings_is() { [ "$(ds "$1" limit "$2" --format tsv 2>/dev/null | cut -f2)" = "$3" ]; }
# sub SERVER FUNC KEY N: a background job of FUNC, unique key KEY:N.
sub() {
    timeout 20 "$GEARMAN" -h 127.0.0.1 -p "$(pgd_port "$1")" -b -f "$2" -u "$3:$4" "$2 $3 $4" \
        >/dev/null || echo "# submit $2 $3:$4 to $1 failed"
}

# The job: payload "FUNC KEY N". fail.FUNC.KEY.N makes it fail; slow.FUNC
# makes it take a second.
cat >"$T/job.sh" <<EOF
#!/bin/sh
read -r f k n || true
# One line is one write(2) to a file opened O_APPEND: whole, in the order of
# the writes, without the flock and sh that were two processes a line.
ev() { echo "\$1" >>"$T/ev"; }
ev "S \$f \$k \$n"
# fairness: a flood job runs until the other key's job has started.
i=0
while [ "\$f \$k" = "fair flood" ] && ! grep -q '^S fair other 1\$' "$T/ev" && [ \$i -lt 1200 ]; do
    sleep 0.1
    i=\$((i + 1))
done
if [ -f "$T/slow.\$f" ]; then sleep 1; else sleep 0.1; fi
if [ -f "$T/fail.\$f.\$k.\$n" ]; then
    ev "F \$f \$k \$n"
    exit 1
fi
ev "E \$f \$k \$n"
EOF
chmod +x "$T/job.sh"
: >"$T/ev"
# worker SERVER FUNCTION: one gearman -w.
worker() {
    "$GEARMAN" -h 127.0.0.1 -p "$(pgd_port "$1")" -w -f "$2" -- "$T/job.sh" >/dev/null 2>&1 &
    track $!
}

# check_ev FUNC...: the log obeys the sequences of FUNC. A key's job may start again
# (an "S" of the job that ran last, once its server was killed: at least
# once), never a later one before the one due.
check_ev() {
    awk -v fns=" $* " '
        !index(fns, " " $2 " ") { next }
        { key = $2 " " $3; n = $4 + 0; w = (key in want) ? want[key] : 1 }
        $1 == "S" {
            if (run[key] > 0) { print "# " key " " n " starts while another runs"; bad = 1 }
            run[key]++
            if (n != w && !(n == w - 1 && again[key])) {
                print "# " key " " n " starts, " w " was next"; bad = 1
            }
            again[key] = 0
        }
        $1 == "E" { run[key]--; want[key] = n + 1; again[key] = 1 }
        $1 == "F" { run[key]-- }
        END { exit bad }' "$T/ev"
}
has() { grep -q "^$1\$" "$T/ev"; }
count() { grep -c "^$1\$" "$T/ev"; }
lines() { wc -l <"$T/ev"; }

# order --------------------------------------------------------------------
ds a limit s --sequence=hold >/dev/null
ok $? "dsjob limit s --sequence=hold on A"
poll settings_is b s "sequence hold" && poll settings_is c s "sequence hold"
ok $? "B and C follow it"
i=0
for n in 1 2 3 4 5 6 7 8; do
    for k in a b c; do
        set -- a b c
        shift $((i % 3))
        sub "$1" s "$k" "$n"
        i=$((i + 1))
    done
done
for n in a b c; do
    worker "$n" s
    worker "$n" s
done
all_s() { has "E s a 8" && has "E s b 8" && has "E s c 8"; }
poll_moving 120 lines all_s
ok $? "24 jobs ran"
check_ev s
ok $? "no two jobs of a key at once across the servers, each key's in submission order"
awk '$1 == "S" && $3 != "a" { print; exit }' "$T/ev" >"$T/first_other"
[ -s "$T/first_other" ] && [ "$(grep -n . "$T/ev" | grep -m1 ':E s a 8$' | cut -d: -f1)" -gt \
    "$(grep -n . "$T/ev" | grep -m1 "^[0-9]*:$(cat "$T/first_other")\$" | cut -d: -f1)" ]
ok $? "keys ran in parallel (another key started before a's last ended)"
reap

# hold ---------------------------------------------------------------------
ds b limit h --sequence=hold >/dev/null
ok $? "limit h --sequence=hold on B"
poll settings_is a h "sequence hold" && poll settings_is c h "sequence hold"
ok $? "A and C follow it"
touch "$T/fail.h.x.1"
sub a h x 1
worker a h
dead_on() { ds "$1" dead list h --format tsv 2>/dev/null | grep -q "x:1"; }
poll dead_on a
ok $? "x:1 failed and is in A's dead set"
sub b h x 2
sub c h y 1
for n in b c; do worker "$n" h; done
poll has "E h y 1"
ok $? "key y ran"
sub b h y 2
poll has "E h y 2"
ok $? "and y:2, submitted after it, too"
has "S h x 2"
ok $([ $? -ne 0 ] && echo 0 || echo 1) "hold: no server started x:2 while x:1 is dead"
rm -f "$T/fail.h.x.1"
ds a dead retry h >/dev/null
ok $? "dsjob dead retry h on A"
poll has "E h x 2"
ok $? "after retry dead on A, x:1 ran again, then x:2"
check_ev h
ok $? "in order: x:1 first"
reap

# most_of_key FUNC: the most jobs of one key of FUNC running at once.
most_of_key() {
    awk -v f="$1" '$2 == f && $1 == "S" { if (++run[$3] > m) m = run[$3] }
        $2 == f && ($1 == "E" || $1 == "F") { run[$3]-- } END { print m + 0 }' "$T/ev"
}

# key-concurrency ----------------------------------------------------------
touch "$T/slow.kc"
ds a limit kc --key-concurrency 2 >/dev/null
ok $? "limit kc --key-concurrency 2 on A"
poll settings_is b kc "key-concurrency 2" && poll settings_is c kc "key-concurrency 2"
ok $? "B and C follow it"
i=0
for n in 1 2 3 4 5 6 7 8 9 10 11 12; do
    for k in p q; do
        set -- a b c
        shift $((i % 3))
        sub "$1" kc "$k" "$n"
        i=$((i + 1))
    done
done
for n in a b c; do
    for _ in 1 2 3; do worker "$n" kc; done
done
all_kc() { [ "$(grep -c '^E kc ' "$T/ev")" -ge 24 ]; }
poll_moving 120 lines all_kc
ok $? "24 jobs of kc ran"
m=$(most_of_key kc)
diag "kc: at most $m of a key at once (limit 2)"
[ "$m" -le 2 ]
ok $? "never more than 2 of a key at once across the servers (saw $m)"
reap

# key-rate -----------------------------------------------------------------
# 1/m burst 1: one bucket for the key in the cluster lets one job start
# (two if a minute went by), where a bucket per server lets three. Marker
# jobs of another function, in two rounds to each server's worker after
# the key's jobs were queued, show the workers asked for work again.
ds b limit kr --key-rate 1/m --key-burst 1 >/dev/null
ok $? "limit kr --key-rate 1/m --key-burst 1 on B"
poll settings_is a kr "key-rate 1/m key-burst 1" && poll settings_is c kr "key-rate 1/m key-burst 1"
ok $? "A and C follow it"
for n in a b c; do
    "$GEARMAN" -h 127.0.0.1 -p "$(pgd_port "$n")" -w -f kr -f fm -- "$T/job.sh" >/dev/null 2>&1 &
    track $!
done
for n in a b c; do poll pgd_registered "$n" kr 1; done
t_kr=$(date +%s)
i=0
for n in 1 2 3 4 5 6; do
    set -- a b c
    shift $((i % 3))
    sub "$1" kr u "$n"
    i=$((i + 1))
done
first_kr() { grep -q '^E kr u ' "$T/ev"; }
poll_moving 120 lines first_kr
ok $? "a job of key u ran"
for r in 1 2; do
    for n in a b c; do sub "$n" fm "m$r" "$n"; done
    markers() { [ "$(grep -c "^E fm m$r " "$T/ev")" -ge 3 ]; }
    poll_moving 120 lines markers
done
ok $? "the workers of every server ran two rounds of markers after"
kr_started=$(grep -c '^S kr u ' "$T/ev")
allowed=$((1 + ($(date +%s) - t_kr) / 60))
diag "kr: $kr_started jobs of key u started, bound $allowed (burst 1 + 1 a minute)"
[ "$kr_started" -le "$allowed" ]
ok $? "a key's starts across the servers within its one bucket (saw $kr_started)"
reap

# fairness -----------------------------------------------------------------
# 10,000 queued jobs of key flood (one INSERT, so their ids come first),
# then one of key other, with key-concurrency 1 and a worker on each
# server: other's job starts in the first round of assignments (among the
# first three starts of the cluster), not behind the flood. A flood job
# runs until other's job has started, so no flood job ends meanwhile.
ds b limit fair --key-concurrency 1 >/dev/null
ok $? "limit fair --key-concurrency 1 on B"
poll settings_is a fair "key-concurrency 1" && poll settings_is c fair "key-concurrency 1"
ok $? "A and C follow it"
q "INSERT INTO dsjob.jobs (handle, func, uniq, data) SELECT 'H:fair:' || i, 'fair',
   convert_to('flood:' || i, 'UTF8'), convert_to('fair flood ' || i, 'UTF8')
   FROM generate_series(1, 10000) i" >/dev/null
sub c fair other 1
is "$(q "SELECT count(*) FROM dsjob.jobs WHERE func = 'fair' AND state = 0")" 10001 \
    "10,000 jobs of key flood and one of key other queued"
for n in a b c; do worker "$n" fair; done
poll_moving 120 lines has "S fair other 1"
ok $? "other's job started"
rank=$(grep '^S fair ' "$T/ev" | grep -n ' other 1$' | cut -d: -f1)
diag "fairness: other's job was start $rank of key fair's: $(grep '^S fair ' "$T/ev" | head -n 4 | tr '\n' ',')"
[ -n "$rank" ] && [ "$rank" -le 3 ]
ok $? "within the first round of three servers' workers (start $rank), not behind the flood"
[ "$(grep '^S fair ' "$T/ev" | head -n "$rank" | grep -c ' flood ')" -le 1 ]
ok $? "with at most one flood job before it (key-concurrency 1)"
ds a pause fair >/dev/null
poll settings_is b fair "key-concurrency 1 paused" && poll settings_is c fair "key-concurrency 1 paused"
ok $? "fair paused on every server"
reap

# kill -9 ------------------------------------------------------------------
touch "$T/slow.k"
ds c limit k --sequence=hold >/dev/null
ok $? "limit k --sequence=hold on C"
poll settings_is a k "sequence hold" && poll settings_is b k "sequence hold"
ok $? "A and B follow it"
for n in 1 2 3 4 5 6; do sub a k z "$n"; done
worker a k
poll has "S k z 2"
ok $? "A's worker runs z:2"
pgd_kill9 a
poll has "E k z 2"
ok $? "A's worker ended z:2 though A is gone"
reap
for n in b c; do
    worker "$n" k
    worker "$n" k
done
poll_moving 120 lines has "E k z 6"
ok $? "the rest of z ran on B and C"
check_ev k
ok $? "no overlap across the kill, z in order (z:2 again first)"
is "$(count "S k z 3")" 1 "z:3 started once"
reap
pgd_stop_all
done_testing
