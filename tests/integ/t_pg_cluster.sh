#!/bin/sh
# Three dsjobd on one PostgreSQL (--store postgres), against a PostgreSQL 15
# of the test's own (tests/lib/pg.sh), with real workers on all three
# (`dsjob worker`, and the gearman CLI, which is libgearman) and real
# producers on all three (tests/integ/pg_load.pl, which pipelines
# SUBMIT_JOB_BG over one connection and logs every JOB_CREATED it saw;
# `dsjob submit -b`; `gearman -b -v`). Every payload carries a unique id;
# every worker appends "PAYLOAD LABEL NS-TIME UNIQUE" to a file of its own
# as a job starts; at the end of each part the test counts runs per id:
# every acknowledged job ran at least once, and the duplicates are listed
# and counted (allowed only after kill -9 and SIGSTOP: at least once).
#
#   owners      each server leases under an owner of its own (a probe job)
#   uniques     the same unique key to the three servers, one after the
#               other and all at once: one handle, one run
#   priorities  jobs of three priorities submitted round the three servers,
#               one worker: high, normal, low, in submission order
#   wake-up     a producer on A (one job at a time, its send time in the
#               payload), an idle worker only on D, a fourth server that
#               polls once an hour: every job reaches it (NOTIFY), and the
#               p50 from submit to assignment is printed
#   cluster     producers and workers on all three: nothing acknowledged
#               lost, no duplicates, handles unique across servers
#   kill -9     one server killed under load: nothing acknowledged lost,
#               each job it held a lease on runs on another server once its
#               lease_until has passed (how soon is printed)
#   SIGSTOP     a server stopped past its lease with its workers mid-job,
#               then continued: its late results are discarded and counted
#               (dsjob_pg_lease_lost_total), and each job it held ran once
#               elsewhere
#   pg restart  (servers now with --pg-lease 10) pg_ctl restart -m immediate
#               under load, no duplicate then, and PostgreSQL
#               down for a moment: each server answers ERROR STORE_ERROR
#               while it is down, takes submits again by itself once it is
#               back, and nothing acknowledged is lost
# Every wait is bounded; every process is started here and stopped by its
# pid; the whole test takes about a minute.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/pg.sh"

LOAD=$top_srcdir/tests/integ/pg_load.pl
skip_unless_gearman
pg_test_begin

LEASE=3 # --pg-lease, seconds
POLL=1000
SERVER_ARGS="--pg-lease $LEASE --pg-poll-ms $POLL --pg-prefetch 8 --verbose NOTICE"
t_start=$(date +%s)

# A server that the test stopped must get SIGCONT before anything else.
pg_test_cleanup() {
    for n in a b c; do
        p=$(pgd_pid "$n")
        [ -n "$p" ] && kill -CONT "$p" 2>/dev/null
    done
}

pg_start_or_bail
# All three at once, on a database without schema dsjob: they race to make it.
# shellcheck disable=SC2086 # SERVER_ARGS are words
pgd_start_all_or_bail "a b c" $SERVER_ARGS
for n in a b c; do
    diag "dsjobd $n on 127.0.0.1:$(pgd_port "$n"), pid $(pgd_pid "$n")"
done

ms() { echo $(($(date +%s%N) / 1000000)); }

# The workers' command: one line per job as it starts, then an optional sleep.
cat >"$T/rec.sh" <<'EOF'
ts=$(date +%s%N)
p=$(cat)
echo "$p $2 $ts ${DSJOB_UNIQUE:--}" >> "$1"
[ -z "$3" ] || sleep "$3"
EOF

ds_worker() { # ds_worker SERVER FUNCTION LABEL CONCURRENCY [SLEEP]
    "$DSJOB" worker -s "127.0.0.1:$(pgd_port "$1")" -c "$4" -i "$3" -f "$2" -- \
        sh "$T/rec.sh" "$T/ran.$3" "$3" "${5:-}" 2>>"$T/worker.err" &
    track $!
}
gm_worker() { # gm_worker SERVER FUNCTION LABEL; GM_PID is its pid
    "$GEARMAN" -h 127.0.0.1 -p "$(pgd_port "$1")" -w -f "$2" -- \
        sh "$T/rec.sh" "$T/ran.$3" "$3" >/dev/null 2>>"$T/worker.err" &
    GM_PID=$!
    track $GM_PID
}
# load SERVER FUNCTION FIRST LAST [pg_load.pl options]: a producer in the
# background, its log in $T/ack.FUNCTION.SERVER.FIRST; LOAD_PID is its pid.
load() {
    _s=$1 _f=$2 _a=$3 _b=$4
    shift 4
    perl "$LOAD" "$@" "$(pgd_port "$_s")" "$_f" "$_f" "$_a" "$_b" \
        >"$T/ack.$_f.$_s.$_a" 2>>"$T/load.err" &
    LOAD_PID=$!
}
prio_of() { # the mix of pg_load.pl -p mix: ID mod 3
    case $(($1 % 3)) in 0) echo high ;; 1) echo normal ;; *) echo low ;; esac
}
# ds_produce SERVER FUNCTION FIRST LAST: dsjob submit -b, one process a job.
ds_produce() {
    _i=$3
    while [ "$_i" -le "$4" ]; do
        if _h=$(timeout -k 2 60 "$DSJOB" -s "127.0.0.1:$(pgd_port "$1")" submit -b \
            -p "$(prio_of "$_i")" "$2" "$2-$_i" 2>/dev/null) && [ -n "$_h" ]; then
            echo "$_i ok $_h"
        else
            echo "$_i err"
        fi
        _i=$((_i + 1))
    done >"$T/ack.$2.$1.$3"
}
# gm_produce SERVER FUNCTION FIRST LAST: gearman -b -v, one process a job
# (its exit status says nothing; "Task created: HANDLE" is the ack).
gm_produce() {
    _i=$3
    while [ "$_i" -le "$4" ]; do
        _o=$(timeout -k 2 60 "$GEARMAN" -v -h 127.0.0.1 -p "$(pgd_port "$1")" -b -f "$2" \
            "$2-$_i" 2>/dev/null | sed -n 's/^Task created: //p')
        if [ -n "$_o" ]; then echo "$_i ok $_o"; else echo "$_i err"; fi
        _i=$((_i + 1))
    done >"$T/ack.$2.$1.$3"
}
wait_pids() { # wait_pids PID...: each is bounded by its own timeout
    for _p in "$@"; do wait "$_p"; done
}

# account FUNCTION: compares the acks of FUNCTION's producers with its runs.
# Sets ACKED, MISSING (acknowledged, never ran), DUPS (ids that ran more
# than once), EXTRA (ran, never acknowledged); lists up to 10 of each.
account() {
    cat "$T"/ack."$1".* 2>/dev/null | awk '$2 == "ok" { print $1 }' | sort -u >"$T/acked.$1"
    cat "$T"/ran.* 2>/dev/null | awk -v p="$1-" 'index($1, p) == 1 { print substr($1, length(p) + 1) }' |
        sort >"$T/runs.$1"
    sort -u "$T/runs.$1" >"$T/ranids.$1"
    ACKED=$(wc -l <"$T/acked.$1" | tr -d ' ')
    MISSING=$(comm -23 "$T/acked.$1" "$T/ranids.$1" | wc -l | tr -d ' ')
    DUPS=$(uniq -d "$T/runs.$1" | wc -l | tr -d ' ')
    EXTRA=$(comm -13 "$T/acked.$1" "$T/ranids.$1" | wc -l | tr -d ' ')
    _notacked=$(cat "$T"/ack."$1".* 2>/dev/null | awk '$2 != "ok"' | wc -l | tr -d ' ')
    diag "$1: acknowledged $ACKED, not acknowledged $_notacked, ran $(wc -l <"$T/runs.$1" | tr -d ' ') times" \
        "for $(wc -l <"$T/ranids.$1" | tr -d ' ') ids; missing $MISSING, duplicated $DUPS, ran unacknowledged $EXTRA"
    [ "$MISSING" = 0 ] || diag "$1 missing: $(comm -23 "$T/acked.$1" "$T/ranids.$1" | head -10 | tr '\n' ' ')"
    # A job still in the table is not yet run, not lost: say which it is.
    [ "$MISSING" = 0 ] || diag "$1: of the $MISSING missing, $(live_rows "$1") still have a live row" \
        "in dsjob.jobs (queued: not yet run, not lost)"
    [ "$EXTRA" = 0 ] || diag "$1 ran unacknowledged (id: producer's answer): $(comm -13 "$T/acked.$1" "$T/ranids.$1" | head -10 |
        while read -r _x; do printf '%s: %s; ' "$_x" "$(cat "$T"/ack."$1".* | awk -v x="$_x" '$1 == x { $1 = ""; print }')"; done)"
    [ "$DUPS" = 0 ] || diag "$1 duplicated (id x runs): $(uniq -c "$T/runs.$1" | awk '$1 > 1 { print $2 "x" $1 }' | head -10 | tr '\n' ' ')"
}
# poll_s (tests/lib/pg.sh) tries every 0.1 s here: its checks read whole logs.
POLL_S_SLEEP=0.1
ran_count() { cat "$T"/ran.* 2>/dev/null | wc -l | tr -d ' '; } # all runs so far, of every function
all_ran() { # all_ran FUNCTION: every acknowledged id has run (for poll_s)
    account "$1" >/dev/null
    [ "$MISSING" = 0 ]
}
live_rows() { q "SELECT count(*) FROM dsjob.jobs WHERE func = '$1' AND state = 0"; }
no_live_rows() { [ "$(live_rows "$1")" = 0 ]; }
show_live_rows() { # show_live_rows FUNCTION: up to 10 live rows, as diagnostics
    q "SELECT handle, coalesce(owner, '-'), coalesce(to_char(lease_until, 'HH24:MI:SS.MS'), '-'),
              to_char(submitted, 'HH24:MI:SS.MS'), attempts, to_char(now(), 'HH24:MI:SS.MS')
       FROM dsjob.jobs WHERE func = '$1' AND state = 0 ORDER BY id LIMIT 10" |
        sed 's/^/# live row (handle|owner|lease_until|submitted|attempts|now): /'
}
lines_ge() { [ "$(wc -l 2>/dev/null <"$1" || echo 0)" -ge "$2" ]; } # lines_ge FILE N
# run_ms FUNCTION ID LABEL-REGEX: the first start time (ms) of ID's runs by
# workers whose label matches; empty if none.
run_ms() {
    cat "$T"/ran.* | awk -v p="$1-$2" -v l="$3" '$1 == p && $2 ~ l { t = substr($3, 1, length($3) - 6); if (m == "" || t < m) m = t } END { print m }'
}
# id_of FUNCTION HANDLE: the id an ack log gave HANDLE, or empty.
id_of() {
    cat "$T"/ack."$1".* | awk -v h="$2" '$2 == "ok" && $3 == h { print $1; exit }'
}
# The server's owner name, from a probe job its own worker holds.
owner_of() {
    q "SELECT owner FROM dsjob.jobs WHERE func = 'probe_$1' AND owner IS NOT NULL LIMIT 1"
}
has_owner() { [ -n "$(owner_of "$1")" ]; }
lost_sum() { # the lease ends the three servers discarded, summed
    _ls=0
    for _n in a b c; do
        _v=$(pgd_stat "$_n" dsjob_pg_lease_lost_total)
        _ls=$((_ls + ${_v:-0}))
    done
    echo "$_ls"
}

schema_ready() { [ "$(q "SELECT to_regclass('dsjob.jobs') IS NOT NULL")" = t ]; }
poll_s 20 schema_ready
ok $? "three dsjobd started at once on one empty database; schema dsjob is there"

# ---- owners ----------------------------------------------------------------
probes=""
for n in a b c; do
    # The probe job holds its lease until the owners have been read (not a
    # sleep that a loaded machine can outlast before the row is seen).
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$n")" worker -f "probe_$n" -- \
        sh -c 'while [ ! -e "$0" ]; do sleep 0.1; done' "$T/probe.done" 2>>"$T/worker.err" &
    probes="$probes $!"
done
for n in a b c; do
    poll_s 10 pgd_registered "$n" "probe_$n"
    timeout 60 "$DSJOB" -s "127.0.0.1:$(pgd_port "$n")" submit -b "probe_$n" x >/dev/null
done
for n in a b c; do poll_s 10 has_owner "$n"; done
OWN_A=$(owner_of a) OWN_B=$(owner_of b) OWN_C=$(owner_of c)
touch "$T/probe.done"
diag "owners: a '$OWN_A', b '$OWN_B', c '$OWN_C'"
[ -n "$OWN_A" ] && [ -n "$OWN_B" ] && [ -n "$OWN_C" ] &&
    [ "$OWN_A" != "$OWN_B" ] && [ "$OWN_B" != "$OWN_C" ] && [ "$OWN_A" != "$OWN_C" ]
ok $? "each server leases its workers' jobs under an owner of its own"
# The probe jobs stay behind, queued for functions no worker does.
for p in $probes; do
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
done

# ---- uniques across servers ------------------------------------------------
s1=$(timeout 60 "$DSJOB" -s "127.0.0.1:$(pgd_port a)" submit -b -u seq cu cu-seq-a)
s2=$(timeout 60 "$DSJOB" -s "127.0.0.1:$(pgd_port b)" submit -b -u seq cu cu-seq-b)
s3=$(timeout 60 "$DSJOB" -s "127.0.0.1:$(pgd_port c)" submit -b -u seq cu cu-seq-c)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && [ "$s2" = "$s3" ]
ok $? "unique 'seq' submitted to a, then b, then c: one handle ($s1 $s2 $s3)"
k=1
pids=""
while [ $k -le 15 ]; do
    for n in a b c; do
        timeout 30 "$DSJOB" -s "127.0.0.1:$(pgd_port "$n")" submit -b -u "race-$k" cu "cu-race-$k-$n" \
            >"$T/u.$k.$n" 2>&1 &
        pids="$pids $!"
    done
    k=$((k + 1))
done
# shellcheck disable=SC2086 # pids are words
wait_pids $pids
bad=0
k=1
while [ $k -le 15 ]; do
    h=$(cat "$T/u.$k.a")
    if [ -z "$h" ] || [ "$h" != "$(cat "$T/u.$k.b")" ] || [ "$h" != "$(cat "$T/u.$k.c")" ]; then
        bad=$((bad + 1))
        diag "race-$k: a '$h' b '$(cat "$T/u.$k.b")' c '$(cat "$T/u.$k.c")'"
    fi
    k=$((k + 1))
done
is "$bad" 0 "15 unique keys each submitted to a, b and c at once: one handle each"
is "$(live_rows cu)" 16 "16 rows for 16 unique keys"
ds_worker c cu cu-c 2
poll_s 20 lines_ge "$T/ran.cu-c" 16
sleep 1
is "$(awk '{ print $4 }' "$T/ran.cu-c" | sort -u | wc -l | tr -d ' ')" 16 "a worker on c ran all 16 keys"
is "$(wc -l <"$T/ran.cu-c" | tr -d ' ')" 16 "each once"
is "$(grep -c '^cu-seq-a ' "$T/ran.cu-c")" 1 "unique 'seq' ran with the first submit's payload"
reap

# ---- priorities across servers ---------------------------------------------
i=1
expect_h="" expect_n="" expect_l=""
while [ $i -le 12 ]; do
    case $((i % 3)) in 0) srv=a ;; 1) srv=b ;; *) srv=c ;; esac
    case $(((i / 3) % 3)) in 0) pr=low ;; 1) pr=high ;; *) pr=normal ;; esac
    timeout 60 "$DSJOB" -s "127.0.0.1:$(pgd_port $srv)" submit -b -p $pr cp "cp-$i" >/dev/null
    case $pr in high) expect_h="$expect_h cp-$i" ;; normal) expect_n="$expect_n cp-$i" ;; *) expect_l="$expect_l cp-$i" ;; esac
    i=$((i + 1))
done
ds_worker b cp cp-b 1
poll_s 20 lines_ge "$T/ran.cp-b" 12
got=$(sort -k3,3n "$T/ran.cp-b" | awk '{ printf " %s", $1 }')
is "$got" "$expect_h$expect_n$expect_l" \
    "12 jobs submitted round a, b, c with mixed priorities run on b high, normal, low, each in submission order"
reap

# ---- wake-up: producer on a, an idle worker only on d, which never polls -----
# d looks for ready jobs once an hour (--pg-poll-ms 3600000): each job that
# reaches its worker was announced (NOTIFY), not found by a poll. The time
# from submit to start is printed for the record, never asserted (bench/pg
# measures speed); on a loaded machine it is long, not wrong.
# shellcheck disable=SC2086 # SERVER_ARGS are words; the last --pg-poll-ms wins
pgd_start_or_bail d $SERVER_ARGS --pg-poll-ms 3600000
ds_worker d lat lat-d 1
poll_s 10 pgd_registered d lat
load a lat 1 25 -w 1 -d 120 -s
wait $LOAD_PID
lat_ran() { wc -l <"$T/ran.lat-d" 2>/dev/null || echo 0; }
poll_moving 60 lat_ran lines_ge "$T/ran.lat-d" 25
awk '{ split($1, f, "-"); print int(($3 - f[3]) / 1000) }' "$T/ran.lat-d" | sort -n >"$T/lat.us"
n_lat=$(wc -l <"$T/lat.us" | tr -d ' ')
p50_us=$(awk -v n="$n_lat" 'NR == int((n + 1) / 2) { print }' "$T/lat.us")
max_us=$(tail -1 "$T/lat.us")
diag "submit on a -> assignment on d: p50 $((${p50_us:-0} / 1000)).$(printf '%03d' $((${p50_us:-0} % 1000))) ms," \
    "max $((${max_us:-0} / 1000)) ms, over $n_lat jobs (the worker's command start included)"
echo "# p50 submit-to-assignment latency across servers: ${p50_us:-?} us"
is "$n_lat" 25 "all 25 jobs submitted on a ran on d, which never polls: woken by NOTIFY"
reap
pgd_stop d

# ---- cluster: producers and workers on all three ---------------------------------
for n in a b c; do
    ds_worker "$n" cl "cl-$n-ds" 2
    gm_worker "$n" cl "cl-$n-gm"
done
for n in a b c; do poll_s 10 pgd_registered "$n" cl 2; done
cl_lost0=$(lost_sum)
load a cl 1 300 -w 20 -p mix
p1=$LOAD_PID
load b cl 1001 1300 -w 5 -p mix
p2=$LOAD_PID
ds_produce b cl 2001 2040 &
p3=$!
gm_produce c cl 3001 3040 &
p4=$!
load c cl 4001 4200 -w 1 -p mix
p5=$LOAD_PID
wait_pids $p1 $p2 $p3 $p4 $p5
poll_moving 60 ran_count all_ran cl
account cl
is "$MISSING" 0 "cluster: every one of $ACKED acknowledged jobs ran"
# A job runs twice only when the lease of the server that ran it first ran
# out (a server starved past --pg-lease on a loaded machine): that server
# then counts the end it discards. So every duplicate must be counted so.
explained() { [ $(($(lost_sum) - cl_lost0)) -ge "$DUPS" ]; }
[ "$DUPS" = 0 ] || poll_s 60 explained
diag "cluster: $DUPS ran twice; lease ends discarded meanwhile: $(($(lost_sum) - cl_lost0))"
explained
ok $? "cluster: a job ran twice only where a lease ran out (none on a quiet machine)"
is "$ACKED" 880 "cluster: all 880 submits were acknowledged"
poll_moving 30 "live_rows cl" no_live_rows cl
left=$(live_rows cl)
is "$left" 0 "cluster: no live row of cl is left"
[ "$left" = 0 ] || show_live_rows cl
for n in a b c; do
    r=$(cat "$T"/ran.cl-"$n"-* 2>/dev/null | wc -l | tr -d ' ')
    [ "$r" -gt 0 ]
    ok $? "cluster: workers on $n ran jobs ($r)"
done
cat "$T"/ack.cl.* "$T"/ack.cu.* 2>/dev/null | awk '$2 == "ok" { print $3 }' | sort | uniq -d >"$T/dup_handles"
is "$(wc -l <"$T/dup_handles" | tr -d ' ')" 0 "cluster: the handles of $ACKED acknowledged jobs are all different"
pfx() { awk '$2 == "ok" { sub(/:[^:]*$/, "", $3); print $3; exit }' "$@"; }
ha=$(pfx "$T/ack.cl.a.1") hb=$(pfx "$T/ack.cl.b.1001") hc=$(pfx "$T/ack.cl.c.4001")
diag "handle prefixes: a $ha, b $hb, c $hc"
[ -n "$ha" ] && [ "$ha" != "$hb" ] && [ "$hb" != "$hc" ] && [ "$ha" != "$hc" ]
ok $? "cluster: each server's handles have a prefix of their own"
for n in a b c; do
    c_n=$(pgd_stat "$n" dsjob_pg_claimed_total)
    diag "$n: dsjob_pg_claimed_total ${c_n:-absent}"
    [ "${c_n:-0}" -gt 0 ]
    ok $? "cluster: $n counts the jobs it claimed (dsjob_pg_claimed_total $c_n)"
done
reap

# ---- kill -9 under load ----------------------------------------------------------
for n in a b c; do
    ds_worker "$n" ck "ck-$n-ds" 2 0.02
    [ "$n" = a ] && ds_a=$!
    gm_worker "$n" ck "ck-$n-gm"
    [ "$n" = a ] && gm_a=$GM_PID
done
for n in a b c; do poll_s 10 pgd_registered "$n" ck 2; done
# One priority: with a mix, a backlog of newer high jobs rightly runs before
# the dead server's older low ones, and the takeover time printed would not be about the lease.
load a ck 1 400 -w 5 -d 60
p1=$LOAD_PID
load b ck 1001 1400 -w 5 -d 60
p2=$LOAD_PID
load c ck 2001 2400 -w 5 -d 60
p3=$LOAD_PID
# a is killed once it holds leases on ck rows, not after a fixed time that a
# loaded machine may need for the start alone; and surely still holds some
# then: its workers are stopped first (SIGSTOP), so it ends no job between
# the look and the kill but those whose end they sent before the stop, one
# for each job they hold (3 at most: 2 on the dsjob worker, 1 on gearman's).
# Their idle count stays, so a leases its prefetch (8) meanwhile.
kill -STOP "$ds_a" "$gm_a"
# a's leases are read and locked in one statement (SELECT ... FOR UPDATE)
# by a session of the test's, which holds them until a and its backend are
# gone: from that statement on a can neither end nor renew them (its
# statement waits for the lock, and ends with its backend, rolled back),
# and b and c skip them (their take is FOR UPDATE SKIP LOCKED), though
# their lease_until pass. So the rows read are the ones a held when it
# died, with the lease_until it gave them, however long a loaded machine
# takes from the read to the kill and to the end of a's backend. (Read
# after the kill without it, a's 3 s lease could run out first, and b and
# c had its rows.) The session's psql, on fd 7 (fd 5, a reader the test
# never reads, keeps a write to an ended session from a SIGPIPE), goes on
# past an error: a deadlock with a's statement is one more try.
mkfifo "$T/hold.in"
pg_psql -v ON_ERROR_STOP=0 -F ' ' -f - <"$T/hold.in" >"$T/hold.out" 2>&1 &
hold_pid=$!
track $hold_pid
exec 7>"$T/hold.in" 5<"$T/hold.in"
hold_n=0
# a_locked: the session locks a's live ck rows into $T/ck.leased ("HANDLE
# LEASE_UNTIL_MS" lines), and keeps them if there are more than its stopped
# workers can hold (3), else lets them go.
a_locked() {
    hold_n=$((hold_n + 1))
    printf '%s\n' 'BEGIN;' "\\o $T/ck.leased" \
        "SELECT handle, (extract(epoch FROM lease_until) * 1000)::bigint FROM dsjob.jobs
         WHERE owner = '$OWN_A' AND func = 'ck' AND state = 0 ORDER BY id FOR UPDATE;" \
        '\o' "\\echo @@locked $hold_n@@" >&7
    await_file "$T/hold.out" "@@locked $hold_n@@" "$hold_pid" &&
        [ "$(wc -l <"$T/ck.leased")" -gt 3 ] && return 0
    echo 'ROLLBACK;' >&7
    return 1
}
poll_s 60 a_locked
ok $? "kill -9: a holds more leases than its stopped workers hold jobs"
pgd_kill9 a
t_kill=$(ms)
# The gearman CLI worker retries a dead server in a busy loop (100,000s of
# lines a minute) and would starve the two servers left: it goes. The dsjob
# worker retries with a pause and stays.
kill "$gm_a" 2>/dev/null
kill -CONT "$ds_a" "$gm_a" 2>/dev/null
# A statement a sent before it died (an end, a renewal) may wait for the
# session's locks, and would run once they go: its backend is ended, which
# rolls it back (a backend whose client died and that waits for nothing
# ends by itself).
a_pg=$(pgd_writer_pid "$OWN_A")
[ -z "$a_pg" ] || q "SELECT pg_terminate_backend($a_pg)" >/dev/null 2>&1
a_gone() { [ -z "$(pgd_writer_pid "$OWN_A")" ]; }
poll_s 10 a_gone
echo 'COMMIT;' >&7
exec 7>&- 5<&-
wait $hold_pid
# How long the first of them had run out when the session let them go: a
# read there without the lock could have found them b's or c's already.
first=$(sort -k2,2n "$T/ck.leased" | awk 'NR == 1 { print $2 }')
[ -z "$first" ] || diag "kill -9: the session let a's rows go $(($(ms) - first)) ms after the first of their leases ran out"
diag "kill -9 a at $t_kill ms: it held $(wc -l <"$T/ck.leased" | tr -d ' ') leases"
diag "live ck rows by owner (owner|rows|lowest id) just after: $(q "SELECT coalesce(owner, 'none'), count(*), min(id)
    FROM dsjob.jobs WHERE func = 'ck' AND state = 0 GROUP BY owner ORDER BY 1" | tr '\n' ' ')"
wait_pids $p1 $p2 $p3
poll_moving 60 ran_count all_ran ck
account ck
is "$MISSING" 0 "kill -9: every one of $ACKED acknowledged jobs ran"
echo "# kill -9: duplicates $DUPS (at least once: a job a's worker ran before the kill may run again)"
[ -s "$T/ck.leased" ]
ok $? "kill -9: a held leases when it died ($(wc -l <"$T/ck.leased" | tr -d ' '))"
late=0 unmapped=0 worst=0 nl=0 past=-100000
while read -r h until_ms; do
    [ -n "$h" ] || continue
    id=$(id_of ck "$h")
    if [ -z "$id" ]; then
        unmapped=$((unmapped + 1))
        continue
    fi
    nl=$((nl + 1))
    t=$(run_ms ck "$id" '^ck-[bc]-')
    # Taken over once the lease ran out, never before (a's lease held to the
    # end); how soon after is printed, not asserted: a loaded machine is slow.
    if [ -z "$t" ] || [ "$t" -lt $((until_ms - 5)) ]; then
        late=$((late + 1))
        if [ -n "$t" ]; then w="$((until_ms - t)) ms before it"; else w=never; fi
        diag "job $id ($h), lease until $until_ms: ran elsewhere $w"
    fi
    [ -n "$t" ] && [ $((t - t_kill)) -gt $worst ] && worst=$((t - t_kill))
    [ -n "$t" ] && [ $((t - until_ms)) -gt $past ] && past=$((t - until_ms))
done <"$T/ck.leased"
diag "kill -9: $nl of a's leased jobs traced, $unmapped not (their ack was lost); the last ran elsewhere $worst ms after the kill (lease $LEASE s), at most $past ms after its lease_until"
is "$late" 0 "kill -9: each job a held a lease on ran on b or c, once its lease_until had passed"
echo "# kill -9: the last of a's leased jobs ran elsewhere $worst ms after the kill (lease $LEASE s)"
left=$(live_rows ck)
is "$left" 0 "kill -9: no live row of ck is left"
[ "$left" = 0 ] || show_live_rows ck
reap
# shellcheck disable=SC2086
pgd_start_or_bail a $SERVER_ARGS
diag "dsjobd a again on 127.0.0.1:$(pgd_port a), pid $(pgd_pid a)"

# ---- SIGSTOP past the lease -----------------------------------------------------
lost0=$(pgd_stat b dsjob_pg_lease_lost_total)
diag "b: dsjob_pg_lease_lost_total ${lost0:-absent} before"
load a cs 1 30 -w 30
wait $LOAD_PID
touch "$T/ran.cs-b"
ds_worker b cs cs-b 2 1
poll_s 10 lines_ge "$T/ran.cs-b" 2
# Stopped inside a transaction (a renewal, a take), b's backend would hold
# its rows' locks and a and c would skip them: stop it again until its
# writer's backend is idle, outside any transaction.
b_pg=$(pgd_writer_pid "$OWN_B")
tries=0
while :; do
    kill -STOP "$(pgd_pid b)"
    t_stop=$(ms)
    sleep 0.1
    st=$(q "SELECT state FROM pg_stat_activity WHERE pid = '${b_pg:-0}'")
    tries=$((tries + 1))
    [ "$st" = idle ] || [ -z "$b_pg" ] || [ $tries -ge 50 ] && break
    kill -CONT "$(pgd_pid b)"
    sleep 0.05
done
diag "b stopped with its writer's backend (pid ${b_pg:-unknown}) ${st:-gone} (stop $tries)"
q "SELECT handle FROM dsjob.jobs WHERE owner = '$OWN_B' AND func = 'cs' AND state = 0" >"$T/cs.leased"
cp "$T/ran.cs-b" "$T/cs.b_before"
diag "SIGSTOP b at $t_stop ms: its worker had started $(wc -l <"$T/cs.b_before" | tr -d ' ') jobs; it held $(wc -l <"$T/cs.leased" | tr -d ' ') leases"
[ -s "$T/cs.leased" ]
ok $? "SIGSTOP: b held leases when stopped"
for n in a c; do ds_worker "$n" cs "cs-$n" 2; done
# The jobs b held: each must run on a or c once its lease is gone.
held_ran() {
    while read -r h; do
        id=$(id_of cs "$h")
        [ -n "$id" ] && [ -n "$(run_ms cs "$id" '^cs-[ac]$')" ] || return 1
    done <"$T/cs.leased"
}
poll_s $((LEASE + 10)) held_ran
ok $? "SIGSTOP: every job b held ran on a or c while b was stopped"
# b's results must come after its lease ran out: it stays stopped past it
# (its jobs ran elsewhere sooner when its last renewal came before the stop).
while [ $(($(ms) - t_stop)) -le $((LEASE * 1000 + 200)) ]; do sleep 0.05; done
diag "SIGSTOP: b stopped $(($(ms) - t_stop)) ms, past its lease ($LEASE s)"
kill -CONT "$(pgd_pid b)"
t_cont=$(ms)
lost_gt() { [ "$(pgd_stat b dsjob_pg_lease_lost_total)" -gt "${lost0:-0}" ] 2>/dev/null; }
poll_s 15 lost_gt
lost1=$(pgd_stat b dsjob_pg_lease_lost_total)
diag "b: dsjob_pg_lease_lost_total ${lost1:-absent} after SIGCONT"
[ "${lost1:-0}" -gt "${lost0:-0}" ]
ok $? "SIGSTOP: after SIGCONT b discarded and counted its late results (dsjob_pg_lease_lost_total ${lost0:-0} -> ${lost1:-absent})"
poll_moving 60 ran_count all_ran cs
sleep 1
account cs
is "$MISSING" 0 "SIGSTOP: every one of $ACKED acknowledged jobs ran"
echo "# SIGSTOP: duplicates $DUPS (a job b's worker had started before the stop ran again elsewhere)"
once=0 twice=0
while read -r h; do
    id=$(id_of cs "$h")
    c=$(cat "$T"/ran.cs-a "$T"/ran.cs-c 2>/dev/null | grep -c "^cs-$id ")
    if [ "$c" = 1 ]; then once=$((once + 1)); else
        twice=$((twice + 1))
        diag "job $id ($h) ran $c times on a and c"
    fi
done <"$T/cs.leased"
is "$twice" 0 "SIGSTOP: each of the $once jobs b held ran exactly once on a or c"
again=$(awk -v t="$t_cont" 'substr($3, 1, length($3) - 6) + 0 >= t' "$T/ran.cs-b" | wc -l | tr -d ' ')
diag "SIGSTOP: b's worker started $again jobs after SIGCONT"
left=$(live_rows cs)
is "$left" 0 "SIGSTOP: no live row of cs is left"
[ "$left" = 0 ] || show_live_rows cs
reap
h=$(timeout 60 "$DSJOB" -s "127.0.0.1:$(pgd_port b)" submit -b cs2 after-stop 2>&1)
case $h in H:*) r=0 ;; *) r=1 ;; esac
ok $r "SIGSTOP: b takes submits again after SIGCONT ($h)"

# ---- PostgreSQL restarted under load ---------------------------------------------
# With a lease of 10 s: a server renews every third of it and retries a lost
# connection about once a second, so with 3 s an outage of 1-2 s can already
# let a lease run out before its owner is back (at least once: a duplicate).
# With 10 s a restart of a few seconds must cost no duplicate.
LEASE_R=10
for n in a b c; do pgd_stop "$n"; done
# shellcheck disable=SC2086 # SERVER_ARGS are words
pgd_start_all_or_bail "a b c" $SERVER_ARGS --pg-lease $LEASE_R
diag "the three servers again with --pg-lease $LEASE_R on ports $(pgd_port a) $(pgd_port b) $(pgd_port c)"
for n in a b c; do
    ds_worker "$n" cr "cr-$n-ds" 2
    gm_worker "$n" cr "cr-$n-gm"
done
for n in a b c; do poll_s 10 pgd_registered "$n" cr 2; done
load a cr 1 300 -w 4 -d 50 -r -t 40
p1=$LOAD_PID
load b cr 1001 1300 -w 4 -d 50 -r -t 40
p2=$LOAD_PID
load c cr 2001 2300 -w 4 -d 50 -r -t 40
p3=$LOAD_PID
sleep 1.5
t0=$(ms)
pg_restart_immediate
ok $? "pg_ctl restart -m immediate under load"
restart_ms=$(($(ms) - t0))
diag "PostgreSQL restarted in $restart_ms ms, postmaster pid $PG_PID"
wait_pids $p1 $p2 $p3
errs=$(cat "$T"/ack.cr.* | awk '$2 == "err" { print $3 }' | sort | uniq -c | tr '\n' ' ')
diag "answers other than JOB_CREATED during the restart: ${errs:-none}"
poll_moving 60 ran_count all_ran cr
poll_moving 30 "live_rows cr" no_live_rows cr
left=$?
# Counted once no row is left: what is missing now is lost, not late.
account cr
is "$MISSING" 0 "PostgreSQL restart: every one of $ACKED acknowledged jobs ran"
# A lease that ran out while PostgreSQL was down may go to another server
# before its owner renews it: duplicates are an error only if the restart
# took less than the lease's two thirds (the time since its last renewal)
# less a second and a half (the owner's reconnect).
echo "# PostgreSQL restart: duplicates $DUPS (the restart took $restart_ms ms, the lease is $LEASE_R s)"
if [ "$restart_ms" -lt $((LEASE_R * 2000 / 3 - 1500)) ]; then
    is "$DUPS" 0 "PostgreSQL restart: none ran twice (down for $restart_ms ms, well inside a lease)"
else
    skip_n 1 "PostgreSQL restart: the restart took $restart_ms ms, too close to the lease: duplicates allowed"
fi
# Every end committed before PostgreSQL goes down again: a job done while it
# is down longer than a lease would rightly run again elsewhere.
ok $left "PostgreSQL restart: no live row of cr is left"
[ "$left" = 0 ] || show_live_rows cr
# Down for a moment: each server says STORE_ERROR.
pg_stop_immediate
# shellcheck disable=SC2034 # gpacket reads SERVER_PORT
for n in a b c; do
    SERVER_PORT=$(pgd_port "$n")
    r=$(gpacket 18 crx "" "down-$n")
    case $r in "19 STORE_ERROR"*) rc=0 ;; *) rc=1 ;; esac
    ok $rc "PostgreSQL down: $n answers a background submit with ERROR STORE_ERROR ($r)"
done
pg_start_again
ok $? "PostgreSQL started again (pid $PG_PID)"
took_submit() {
    r=$(gpacket 18 crx "" "back-$1")
    case $r in "8 H:"*) return 0 ;; *) return 1 ;; esac
}
t0=$(ms)
# shellcheck disable=SC2034 # gpacket reads SERVER_PORT
for n in a b c; do
    SERVER_PORT=$(pgd_port "$n")
    poll_s 20 took_submit "$n"
    ok $? "$n takes background submits again by itself ($(($(ms) - t0)) ms after PostgreSQL came back)"
done
for n in a b c; do
    kill -0 "$(pgd_pid "$n")" 2>/dev/null
    ok $? "$n is still running"
done
reap

for n in a b c; do
    pgd_stop "$n"
    ok $? "dsjobd $n stops on SIGTERM"
done
# What the servers logged at WARNING and above, and wrote to stderr.
for n in a b c; do
    grep -h ' \(WARNING\|ERROR\|CRIT\)' "$(pgd_log "$n")" 2>/dev/null
done | sed -e 's/^[0-9-]* [0-9:.]* //' -e 's/handle=[^ ]*/handle=H/' -e 's/[0-9][0-9]* jobs/N jobs/' \
    -e 's/port [0-9]*/port P/' | sort | uniq -c | sort -rn | head -8 | sed 's/^/# server log: /'
for n in a b c; do
    [ -s "$(pgd_log "$n").stderr" ] &&
        diag "dsjobd $n wrote $(wc -l <"$(pgd_log "$n").stderr" | tr -d ' ') lines to stderr, e.g. $(sort "$(pgd_log "$n").stderr" | uniq -c | sort -rn | head -2 | tr -s ' \n' ' ')"
done
diag "t_pg_cluster took $(($(date +%s) - t_start)) s"
done_testing
