# Helpers shared by the interop shell tests (t_cli.sh, t_gearadmin.sh), on top
# of tests/lib/server.sh, which the test sources first. A test defines a
# function `checks` that runs its assertions against the server described by
# SERVER_PORT, SERVER_PID and K (the server kind, used as the prefix of every
# description), sets CHECKS to the number of assertions `checks` makes, and
# calls run_servers: that runs `checks` against each server INTEROP_SERVERS
# names, in its order, and prints skip lines for a server that is not there.
# INTEROP_SERVERS is "dsjobd" unless set: make check runs the checks against
# the product; each test's *_gearmand.sh wrapper (make check-long, which CI
# runs too) runs them against gearmand 1.1.20, the reference that validates
# the test's expectations. INTEROP_SERVERS="gearmand dsjobd" runs both.
#
#   runs_against KIND   true if INTEROP_SERVERS names KIND (for checks made
#                       once, outside run_servers, that need that server)
#
#   track PID           remember a background process (killed at the end)
#   reap                stop the tracked processes that are still running
#   poll CMD [ARG...]   run CMD until it succeeds, at most about 120 s
#   gm ARG...           the gearman CLI pointed at the server, bounded
#   adm ARG...          gearadmin pointed at the server, bounded
#   status_of FUNC      FUNC's line of `gearadmin --status`
#   gpacket TYPE ARG..  send one binary request, print "TYPE ARG|ARG|..." of
#                       the first answer (NULs shown as |), bounded
#   check DESC CMD...   ok if CMD succeeds
#   same GOT WANT DESC  ok if the strings are equal
#   skip_n N REASON     N skip lines

: "${GEARMAND:=$(command -v gearmand 2>/dev/null || echo /usr/sbin/gearmand)}"
: "${GEARMAN:=$(command -v gearman 2>/dev/null)}"
: "${GEARADMIN:=$(command -v gearadmin 2>/dev/null)}"
: "${INTEROP_SERVERS:=dsjobd}"

# server_start calls test_tmpdir in a command substitution, i.e. in a
# subshell, where the EXIT trap it sets would remove the directory at once.
# Making the directory here, in the test's own shell, avoids that.
test_tmpdir >/dev/null
T=$TEST_TMPDIR

_bg_pids=""

track() {
    _bg_pids="$_bg_pids $1"
}

reap() {
    for _p in $_bg_pids; do
        kill -TERM "$_p" 2>/dev/null
    done
    for _p in $_bg_pids; do
        wait "$_p" 2>/dev/null
    done
    _bg_pids=""
}

interop_cleanup() {
    reap
    server_stop_all
    rm -rf "$TEST_TMPDIR"
}
trap interop_cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# poll CMD...: run CMD until it succeeds, for about 120 s at most (a loaded
# 2-core machine can take seconds to start a worker and its command): every
# 50 ms for the first second, then every 200 ms, so that a long wait on a
# loaded machine does not spend its CPU on starting CMD and sleep.
poll() {
    _i=0
    while [ $_i -lt 620 ]; do
        "$@" && return 0
        if [ $_i -lt 20 ]; then sleep 0.05; else sleep 0.2; fi
        _i=$((_i + 1))
    done
    return 1
}

# skip_unless_gearman: the test needs the gearman CLI (gearman-tools).
skip_unless_gearman() {
    if [ -z "$GEARMAN" ] || [ ! -x "$GEARMAN" ]; then
        echo "1..0 # SKIP the gearman CLI is not installed (gearman-tools)"
        exit 0
    fi
}

gm() {
    timeout 20 "$GEARMAN" -h 127.0.0.1 -p "$SERVER_PORT" "$@"
}

adm() {
    timeout 20 "$GEARADMIN" -h 127.0.0.1 -p "$SERVER_PORT" "$@"
}

status_of() {
    adm --status | grep "^$1	"
}

gpacket() {
    "$RAWPEER" "$SERVER_PORT" packet "$@"
}

check() {
    _desc=$1
    shift
    "$@"
    ok $? "$K: $_desc"
}

same() {
    is "$1" "$2" "$K: $3"
}

skip_n() {
    _j=0
    while [ $_j -lt "$1" ]; do
        _tap_n=$((_tap_n + 1))
        echo "ok $_tap_n # SKIP $2"
        _j=$((_j + 1))
    done
}

# Extra arguments for server_start (server.sh gives gearmand its own pid file).
server_args() {
    :
}

runs_against() {
    case " $INTEROP_SERVERS " in *" $1 "*) return 0 ;; esac
    return 1
}

run_servers() {
    diag "servers: $INTEROP_SERVERS (INTEROP_SERVERS; make check runs dsjobd, make check-long gearmand)"
    for K in $INTEROP_SERVERS; do
        why=""
        case $K in
        gearmand) [ -n "$GEARMAND" ] && [ -x "$GEARMAND" ] || why="gearmand not found" ;;
        dsjobd) [ -x "$DSJOBD" ] || why="dsjobd not built ($DSJOBD)" ;;
        esac
        if [ -n "$why" ]; then
            skip_n "$CHECKS" "$K: $why"
            continue
        fi
        # shellcheck disable=SC2046
        server_start "$K" $(server_args "$K") || { echo "Bail out! $K did not start"; exit 1; }
        diag "$K on 127.0.0.1:$SERVER_PORT, pid $SERVER_PID"
        _before=$_tap_n
        checks
        reap
        if [ $((_tap_n - _before)) -ne "$CHECKS" ]; then
            ok 1 "$K: ran $((_tap_n - _before)) checks, the test declares $CHECKS"
        fi
        server_stop
    done
    done_testing
}
