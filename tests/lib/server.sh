# Shell helpers for integration tests: start a real job server on a loopback
# port and stop it again. Sourced by tests/interop/*.sh.
#
#   server_start dsjobd|gearmand [EXTRA-ARGS...]
#       starts the server in the background; sets SERVER_PID, SERVER_PORT,
#       SERVER_KIND and SERVER_LOG. dsjobd binds port 0 and reports it through
#       --port-file; gearmand has no such option, so it gets a port that was
#       free a moment ago (the only place the suite picks a port itself).
#   server_stop      SIGTERM to SERVER_PID (the process we started), then wait.
#   server_kill9     SIGKILL to SERVER_PID, then wait.
#   test_tmpdir      a fresh directory, removed at exit.
#
# The environment comes from AM_TESTS_ENVIRONMENT: DSJOBD, GEARMAND, GEARMAN,
# GEARADMIN, top_srcdir, top_builddir.

: "${DSJOBD:=${top_builddir:-.}/server/dsjobd}"
: "${GEARMAND:=/usr/sbin/gearmand}"

# The test's scratch directory, made when this file is sourced (in the test's
# own shell, so that "$(test_tmpdir)" in a subshell names the same one).
TEST_TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/dsjob-test.XXXXXX")
trap 'server_stop_all; rm -rf "$TEST_TMPDIR"' EXIT
test_tmpdir() {
    echo "$TEST_TMPDIR"
}

_server_pids=""

server_stop_all() {
    for p in $_server_pids; do
        kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    _server_pids=""
}

free_port() {
    perl -MIO::Socket::INET -e \
        'my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1, ReuseAddr => 1) or die; print $s->sockport, "\n";'
}

wait_port() { # wait_port PORT: until something accepts on 127.0.0.1:PORT, at most 5 s
    perl -MIO::Socket::INET -e '
        for (1..100) { exit 0 if IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $ARGV[0]); select(undef, undef, undef, 0.05); }
        exit 1;' "$1"
}

server_start() {
    kind=$1; shift
    dir=$TEST_TMPDIR
    SERVER_KIND=$kind
    SERVER_LOG="$dir/$kind.$$.$(date +%s%N).log"
    case $kind in
    dsjobd)
        pf="$SERVER_LOG.port"
        "$DSJOBD" -L 127.0.0.1 -p 0 --port-file "$pf" -l "$SERVER_LOG" "$@" &
        SERVER_PID=$!
        i=0
        while [ ! -s "$pf" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
        [ -s "$pf" ] || { echo "Bail out! dsjobd did not write its port file"; cat "$SERVER_LOG" >&2; return 1; }
        SERVER_PORT=$(cat "$pf")
        ;;
    gearmand)
        [ -n "${GEARMAND:-}" ] && [ -x "$GEARMAND" ] || return 77
        SERVER_PORT=$(free_port)
        "$GEARMAND" --listen=127.0.0.1 --port="$SERVER_PORT" --threads=0 \
            --log-file="$SERVER_LOG" --pid-file="$SERVER_LOG.pid" "$@" &
        SERVER_PID=$!
        wait_port "$SERVER_PORT" || { echo "Bail out! gearmand did not listen"; return 1; }
        ;;
    *) echo "server_start: unknown kind '$kind'" >&2; return 1 ;;
    esac
    _server_pids="$_server_pids $SERVER_PID"
    export SERVER_PORT SERVER_PID SERVER_KIND SERVER_LOG
}

server_stop() {
    kill -TERM "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    _server_pids=$(echo "$_server_pids" | sed "s/ $SERVER_PID\b//")
}

server_kill9() {
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    _server_pids=$(echo "$_server_pids" | sed "s/ $SERVER_PID\b//")
}

# TAP in shell, numbered as we go.
_tap_n=0
_tap_fail=0
ok() { # ok COND-EXIT-STATUS DESCRIPTION
    _tap_n=$((_tap_n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $_tap_n - $2"; else echo "not ok $_tap_n - $2"; _tap_fail=$((_tap_fail + 1)); fi
}
is() { # is GOT WANT DESCRIPTION
    if [ "$1" = "$2" ]; then ok 0 "$3"; else ok 1 "$3"; echo "#   got:  '$1'"; echo "#   want: '$2'"; fi
}
diag() { echo "# $*"; }
done_testing() { echo "1..$_tap_n"; [ $_tap_fail -eq 0 ]; }
