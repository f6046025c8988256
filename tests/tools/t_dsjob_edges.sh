#!/bin/sh
# The rough edges of dsjob that a new user met,
# against real dsjobd servers: a payload over --max-packet-size gets the
# server's PACKET_TOO_LARGE, not "no server reachable"; DATA over what a
# Gearman packet can carry is refused before it is read; a server that
# accepts and never answers is given up after --accept-timeout, foreground
# and background; result and dead list on a server that keeps neither say
# so; jobs shows no run-at time for a dead job; -p takes any case; -s ''
# is a usage error; job shows an error's lines as lines; a failed realloc
# of worker's -f list frees the list; and the texts of dsjobd(8) and
# doc/operations.md that were wrong. Every wait is bounded.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
# track, reap (at exit too) and poll.
. "$top_srcdir/tests/interop/lib.sh"
dir=$(test_tmpdir)
if [ ! -x "$DSJOB" ]; then
    echo "1..0 # SKIP dsjob not built ($DSJOB)"
    exit 0
fi

# ds ARG...: dsjob at SERVER_PORT (tests/lib/server.sh): bounded by itself
# when it waits only for the server's answers, else by timeout(1).

# --- 15: a payload over --max-packet-size; DATA over a packet's limit -----
server_start dsjobd --max-packet-size 4096 || exit 1
head -c 8388608 /dev/zero >"$dir/8m"
ds submit -b big <"$dir/8m" >"$dir/big.out" 2>"$dir/big.err"
rc=$?
[ $rc -eq 1 ] && grep -q "PACKET_TOO_LARGE: .*--max-packet-size 4096" "$dir/big.err"
ok $? "submit -b of 8 MB over --max-packet-size 4096: exit 1 with the server's reason (rc $rc: $(cat "$dir/big.err"))"
ds submit big <"$dir/8m" >"$dir/bigfg.out" 2>"$dir/bigfg.err"
rc=$?
[ $rc -eq 1 ] && grep -q "refused the job: PACKET_TOO_LARGE" "$dir/bigfg.err"
ok $? "submit of 8 MB, foreground: exit 1 with the server's reason (rc $rc: $(cat "$dir/bigfg.err"))"
# A sparse file of 5 GiB: measured, not read.
if truncate -s 5G "$dir/5g" 2>/dev/null; then
    ds submit -b big <"$dir/5g" >/dev/null 2>"$dir/5g.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "DATA of 5368709120 bytes is over the .* a Gearman packet can carry" "$dir/5g.err"
    ok $? "DATA of 5 GiB is refused before a byte is sent, exit 2 (rc $rc: $(head -1 "$dir/5g.err"))"
else
    ok 0 "# SKIP no truncate"
fi
rm -f "$dir/8m" "$dir/5g"
is "$(ds submit -b small x >/dev/null; echo $?)" 0 "the server still takes a small job"

# --- 16: a server that accepts and never answers ----------------------------
perl -MIO::Socket::INET -e '
    my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 5,
        ReuseAddr => 1) or die; open(my $f, ">", $ARGV[0]) or die; print $f $l->sockport;
    close $f; my @c; local $SIG{ALRM} = sub { exit 0 }; alarm 120;
    while (my $c = $l->accept) { push @c, $c }' "$dir/mute.port" &
track $!
await_file "$dir/mute.port" ""
read -r M <"$dir/mute.port"
M=127.0.0.1:$M
for mode in "" "-b"; do
    # shellcheck disable=SC2086
    timeout -k 5 60 "$DSJOB" -s "$M" submit $mode --accept-timeout 500 f x >/dev/null 2>"$dir/mute.err"
    rc=$?
    [ $rc -eq 3 ] && grep -q "no server accepted the job within 500 ms (--accept-timeout)" "$dir/mute.err"
    ok $? "submit ${mode:-(foreground)} --accept-timeout 500 to a mute server: exit 3, naming the option (rc $rc: $(cat "$dir/mute.err"))"
done
timeout -k 5 60 "$DSJOB" -s "$M" submit --accept-timeout x f x >/dev/null 2>"$dir/acc.err"
rc=$?
[ $rc -eq 2 ] && grep -q "'--accept-timeout'" "$dir/acc.err"
ok $? "--accept-timeout x is a usage error naming it (rc $rc)"
# Accepted in time, the job itself may take longer than the accept deadline.
ds submit --accept-timeout 300 -t 1500 nobody x >/dev/null 2>"$dir/slow.err"
rc=$?
[ $rc -eq 1 ] && grep -q "did not end within 1500 ms" "$dir/slow.err"
ok $? "a job accepted in time waits on for -t, not --accept-timeout (rc $rc: $(cat "$dir/slow.err"))"
grep -q -- "--accept-timeout" "$top_srcdir/man/dsjob.1"
ok $? "dsjob(1) documents --accept-timeout"

# --- 19: -p in any case, -s '' ---------------------------------------------
h=$(ds submit -b -p HIGH prio x 2>"$dir/p.err")
rc=$?
[ $rc -eq 0 ] && ds job "$h" --format tsv | grep -q "^priority	high$"
ok $? "submit -p HIGH is high priority, as the admin command takes any case (rc $rc $(cat "$dir/p.err"))"
timeout 20 "$DSJOB" -s "" status >/dev/null 2>"$dir/s.err"
rc=$?
[ $rc -eq 2 ] && grep -q "option '-s' wants an address, not ''" "$dir/s.err"
ok $? "-s '' is a usage error, not the default server (rc $rc)"
server_stop

# --- 18: result and dead list on a server that keeps neither ---------------
server_start dsjobd || exit 1
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f gone -- sh -c 'cat; exit 3' 2>/dev/null &
track $!
h=$(ds submit -b gone x)
poll sh -c "! '$DSJOB' -s 127.0.0.1:$SERVER_PORT jobs --format tsv | grep -q '^$h	'"
ds result "$h" >"$dir/r.out" 2>"$dir/r.err"
rc=$?
[ $rc -eq 1 ] && grep -q "the server keeps no results (--keep-results 0)" "$dir/r.err"
ok $? "result on a server without --keep-results says it keeps none (rc $rc: $(cat "$dir/r.err"))"
ds dead list >"$dir/d.out" 2>"$dir/d.err"
rc=$?
[ $rc -eq 0 ] && grep -q "no dead jobs: the server keeps none (it runs without --max-dead)" "$dir/d.err"
ok $? "dead list on a server without --max-dead says it keeps none (rc $rc: $(cat "$dir/d.err"))"
reap
server_stop

# --- 19: a dead job's run-at time; an error's lines --------------------------
server_start dsjobd --max-dead 10 --retry-on fail -j 2 --retry-backoff 1 || exit 1
ds dead list >"$dir/d2.out" 2>"$dir/d2.err"
[ $? -eq 0 ] && [ ! -s "$dir/d2.err" ]
ok $? "dead list on a server with --max-dead and no dead job says nothing more ($(cat "$dir/d2.err"))"
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f bad -- \
    sh -c 'cat >/dev/null; echo "first line" >&2; echo "second line" >&2; exit 3' 2>/dev/null &
track $!
h=$(ds submit -b bad x)
dead_now() { await_admin "show job $h" "state dead" && ds job "$h" --format tsv | grep -q "^state	dead$"; }
dead_now
ok $? "the job fails twice (after a backoff) and is dead"
is "$(ds jobs --format tsv | grep "^$h	" | cut -f4,6)" "dead	0" \
    "jobs: a dead job has no run-at time (0, as job says), not its last retry's"
ds job "$h" >"$dir/job.table"
want=$(printf "error          'sh' exited with status 3\n               first line\n               second line")
is "$(grep -A2 '^error' "$dir/job.table")" "$want" \
    "job: the error's lines as lines under VALUE, not escaped, no trailing newline"
ds job "$h" --format tsv | grep -q "^error	'sh' exited with status 3\\\\nfirst line\\\\nsecond line\\\\n\$"
ok $? "job --format tsv: every byte, escaped, as before"
reap
server_stop

# --- 19: a failed realloc of worker's -f list frees the list ----------------
shim=$top_builddir/tests/tools/.libs/libfailrealloc.so
if grep -q -- '-fsanitize=address' "$top_builddir/Makefile" 2>/dev/null; then
    # ASan must come first among the libraries and has its own realloc:
    # the shim cannot stand in front of it. The plain build runs this check.
    ok 0 "# SKIP an LD_PRELOAD realloc shim and ASan exclude each other"
elif [ -f "$shim" ]; then
    FAILREALLOC_SIZE=24 LD_PRELOAD=$shim timeout 20 "$DSJOB" -s 127.0.0.1:1 worker \
        -f a -f b -f c -- cat >/dev/null 2>"$dir/leak.err"
    rc=$?
    [ $rc -eq 1 ] && grep -q "out of memory" "$dir/leak.err" && ! grep -q leaked "$dir/leak.err"
    ok $? "worker: a failed realloc of the -f list says so and frees it (rc $rc: $(tr '\n' ' ' <"$dir/leak.err"))"
else
    ok 0 "# SKIP the realloc shim was not built"
fi

# --- 19: dsjobd(8) renders as written; doc/operations.md's errors are real --
if command -v mandoc >/dev/null 2>&1; then
    mandoc -Tascii "$top_srcdir/man/dsjobd.8" 2>/dev/null | col -bx | tr -s ' \n' '  ' >"$dir/dsjobd.txt"
    grep -q "(\`\\\\xNN' in text, \`\\\\u00NN' in JSON)" "$dir/dsjobd.txt"
    ok $? "dsjobd(8): the escapes of the log formats are two quotes in parentheses"
    grep -q "(a full queue, --max-jobs, --reject-no-worker, an empty function name, out of memory)" "$dir/dsjobd.txt"
    ok $? "dsjobd(8): the refused event's reasons are words, not flags"
    grep -q "(tables \`jobs', \`funcs', \`servers', \`meta')" "$dir/dsjobd.txt"
    ok $? "dsjobd(8): the schema's four tables, each quoted"
else
    ok 0 "# SKIP mandoc not installed"
    ok 0 "# SKIP mandoc not installed"
    ok 0 "# SKIP mandoc not installed"
fi
# Each example error of the config file section, reproduced from its line.
grep -E "^ +dsjobd: /etc/dsjobd.conf:[0-9]+: " "$top_srcdir/doc/operations.md" >"$dir/examples"
n=0
while IFS= read -r line; do
    msg=${line#*dsjobd.conf:}
    num=${msg%%:*}
    msg=${msg#*: }
    case $msg in
    "unknown option '"*) input="${msg#unknown option \'}" input="${input%\'} = 1" ;;
    "--"*": invalid value '"*) o=${msg%%:*} v=${msg#*invalid value \'} input="${o#--} = ${v%\'}" ;;
    "--"*" must be between "*", not "*) o=${msg%% *} input="${o#--} = ${msg##*, not }" ;;
    "--"*" takes no value, but has '"*) o=${msg%% *} v=${msg#*but has \'} input="${o#--} = ${v%\'}" ;;
    *) input="" ;;
    esac
    awk -v n="$num" -v l="$input" 'BEGIN { for (i = 1; i < n; i++) print "# line " i; print l }' \
        >"$dir/dsjobd.conf"
    got=$(timeout 10 "$DSJOBD" --config-file "$dir/dsjobd.conf" --version 2>&1 >/dev/null | head -1)
    is "$got" "dsjobd: $dir/dsjobd.conf:$num: $msg" "doc/operations.md: '$msg' is what dsjobd says"
    n=$((n + 1))
done <"$dir/examples"
[ $n -ge 3 ]
ok $? "doc/operations.md has its example errors ($n)"

done_testing
