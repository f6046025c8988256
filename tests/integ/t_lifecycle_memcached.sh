#!/bin/sh
# The job lifecycle across a kill -9 of dsjobd on the memcached store (the
# SQLite store's is in tests/interop/t_lifecycle.sh), with a real memcached
# on a loopback port that this script starts and stops: a function's
# `retry F N BASE` setting, a background job that fails into the dead set
# (--max-dead), and a kept result with NUL bytes (--keep-results) are all
# back after dsjobd is killed and restarted on the same memcached. The
# workers are tools/dsjob worker, the submits plain binary packets, the
# admin commands plain text lines. A background submit with a deadline
# is refused, naming the option: the store keeps no deadline.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"

mc=${MEMCACHED_BIN:-/usr/bin/memcached}
[ -x "$mc" ] || { echo "1..0 # SKIP memcached is not installed"; exit 0; }
[ -x "$DSJOB" ] || { echo "1..0 # SKIP tools/dsjob not built"; exit 0; }

mcport=$(free_port)
"$mc" -l 127.0.0.1 -p "$mcport" -U 0 -m 64 -M -u root &
mcpid=$!
trap 'reap; server_stop_all; kill $mcpid 2>/dev/null; wait $mcpid 2>/dev/null; rm -rf "$TEST_TMPDIR"' EXIT
wait_port "$mcport" || { echo "Bail out! memcached did not listen on $mcport"; exit 1; }
# shellcheck disable=SC2034 # the prefix of every check's name (lib.sh's check and same)
K=memcached

# admin LINE: one admin command; prints the reply up to its "." line, or its
# one OK or ERR line (rawpeer admin, a tenth of a perl's start); for show
# result, the bytes after it in hex (a perl).
admin() {
    case $1 in
    "show result"*) ;;
    *)
        "$RAWPEER" "$SERVER_PORT" admin "$1"
        return
        ;;
    esac
    timeout 20 perl -MIO::Socket::INET -e '
        my ($port, $line) = @ARGV;
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port) or exit 2;
        print $s "$line\n";
        while (defined(my $l = <$s>)) {
            if ($line =~ /^show result/ && $l =~ /^OK \S+ (\d+) \d+ \d+ \d+\n$/) {
                my ($n, $b) = ($1, ""); read($s, $b, $n); print $l, unpack("H*", $b), "\n"; last;
            }
            $l =~ s/\r\n$/\n/;
            print $l;
            last if $l eq ".\n" || ($l =~ /^(OK|ERR)/ && $line !~ /^show (dead|jobs)/);
        }' "$SERVER_PORT" "$1"
}

field() { # field HANDLE NAME: one field of show job
    admin "show job $1" | sed -n "s/^$2 //p"
}

state_is() { # state_is HANDLE STATE
    [ "$(field "$1" state)" = "$2" ]
}

submit_bg() { # submit_bg FUNCTION UNIQUE PAYLOAD: SUBMIT_JOB_BG; prints the handle
    gpacket 18 "$1" "$2" "$3" | sed -n 's/^8 //p'
}

args="--memcached-servers 127.0.0.1:$mcport --memcached-prefix t$$ --retry-on fail
    --max-dead 10 --keep-results 3600 --verbose NOTICE"
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not start"; exit 1; }
first_log=$SERVER_LOG
same "$(admin "retry mc_dead 2 1")" "OK" "retry mc_dead 2 1 is set"
hd=$(submit_bg mc_dead u-dead pay-dead)
check "a background job for mc_dead is created" [ -n "$hd" ]
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f mc_dead -- sh -c 'echo oops-mc >&2; exit 4' \
    2> /dev/null &
track $!
check "after its 2 attempts the job is dead" poll state_is "$hd" dead
reap
hk=$(submit_bg mc_keep u-keep pay-keep)
# The result: "res", a NUL, "ult:" and the payload.
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f mc_keep -- sh -c 'printf "res\000ult:"; cat' \
    2> /dev/null &
track $!
check "the other job completes and its result is kept" poll state_is "$hk" done
reap
want_result="OK complete 16 0 0 16
$(printf 'res\000ult:pay-keep' | od -An -tx1 | tr -d ' \n')"
same "$(admin "show result $hk")" "$want_result" "show result before the kill, NUL included"
dead_before=$(admin "show dead mc_dead" | grep "^$hd	" | cut -f2,4,8,9)
check "show dead lists it before the kill" [ -n "$dead_before" ]

server_kill9
# shellcheck disable=SC2086
server_start dsjobd $args || { echo "Bail out! dsjobd did not restart"; exit 1; }
same "$(admin "retry mc_dead")" "OK 2 1.000 0.000" "after kill -9 the retry setting is back"
same "$(field "$hd" state)" dead "after kill -9 the dead job is dead"
same "$(field "$hd" attempts)" 2 "with its 2 attempts"
same "$(admin "show dead mc_dead" | grep "^$hd	" | cut -f2,4,8,9)" "$dead_before" \
    "show dead lists it as before: function, attempts, unique, error"
check "its error is the command's stderr" sh -c 'printf "%s" "$1" | grep -q oops-mc' _ \
    "$dead_before"
same "$(field "$hk" state)" done "after kill -9 the kept job is done"
same "$(admin "show result $hk")" "$want_result" "show result gives the same bytes"
same "$(gpacket 15 "$hk")" "20 $hk|1|0|0|0" "GET_STATUS knows the kept job, not running"
check "the restart logs its replay of 2 jobs" grep -q "store memcached: replayed 2 jobs" \
    "$SERVER_LOG"
same "$(cat "$first_log" "$SERVER_LOG" | grep -c 'keeps no retries')" 0 \
    "neither start warns that the store keeps no retries"
same "$(admin "retry dead mc_dead")" "OK 1" "retry dead puts the dead job back"
"$DSJOB" -s "127.0.0.1:$SERVER_PORT" worker -f mc_dead -- sh -c "cat > '$T/redo.out'" \
    2> /dev/null &
track $!
check "a worker does it this time" poll grep -qs pay-dead "$T/redo.out"
reap
# The store keeps no deadline: a background submit with one is refused by name.
out=$("$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b --expire-in 60 mc_exp x 2>&1)
r=$?
check "a background submit with --expire-in is refused (exit $r)" [ "$r" -ne 0 ]
check "naming the option and the store ($out)" sh -c 'case $1 in *expire-in*memcached*) exit 0 ;; esac; exit 1' _ "$out"
server_stop
done_testing
