#!/bin/sh
# gearmand's options on dsjobd. Every --check-args case of gearmand 2.0.0's
# own option tests (tests/gearmand.cc, 61 programs) and the options a
# gearmand 1.1.20 deployment carries (--help, gearmand(8)) are run through
# Debian's gearmand 1.1.20 and dsjobd: the same ones start, the same ones
# are refused. Then what the accepted ones do: the keepalive settings are
# read back from the server's own accepted socket (pidfd_getfd), and
# --file-descriptors from /proc/PID/limits, on both servers. gearmand's
# queues that dsjobd lacks are refused with a reason that names the option.
#
# make check runs dsjobd's answers to the --check-args table (each case is
# a process start, and gearmand's take three times dsjobd's CPU); with
# GEARMAND_OPTS_REFERENCE=1 (t_gearmand_opts_ref.sh, make check-long, which
# CI runs) gearmand 1.1.20 answers each case too, which checks the table
# itself against the reference.
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)
cd "$dir" || exit 1

have_gearmand=false
[ -x "$GEARMAND" ] && have_gearmand=true
$have_gearmand || diag "no gearmand at $GEARMAND: dsjobd's answers are checked alone"
reference=false
[ "${GEARMAND_OPTS_REFERENCE:-}" = 1 ] && $have_gearmand && reference=true
$reference || diag "the --check-args table without gearmand's answers (GEARMAND_OPTS_REFERENCE=1 adds them)"

# outcome BIN ARGS...: "ok" if BIN exits 0 on ARGS, else "refused".
outcome() {
    bin=$1; shift
    if "$bin" "$@" >/dev/null 2>&1; then echo ok; else echo refused; fi
}

# same WANT ARGS...: gearmand 1.1.20 (when present) gives WANT on ARGS, and so does dsjobd.
same() {
    want=$1; shift
    if $reference; then
        is "$(outcome "$GEARMAND" "$@")" "$want" "gearmand 1.1.20: $* -> $want"
    fi
    is "$(outcome "$DSJOBD" "$@")" "$want" "dsjobd: $* -> $want"
}

# gearmand 2.0.0 tests/gearmand.cc, in its order.
same refused foo
same refused --log
same ok --check-args
same ok --check-args --backlog=10
same ok --check-args -b 10
same ok --check-args --daemon
same ok --check-args --coredump
same ok --check-args -d
same ok --check-args --file-descriptors=10
same ok --check-args -f 10
same ok --check-args --help
same ok --check-args -h
same ok --check-args --keepalive
same ok --check-args --keepalive-idle=10
same ok --check-args --keepalive-interval=3
same ok --check-args --keepalive-count=10
same ok --check-args '--log-file="tmp/foo"'
same ok --check-args --log-file=stderr
same ok --check-args -l '"tmp/foo"'
same ok --check-args --listen=10
same ok --check-args -L 10
same ok --check-args --port=10
same ok --check-args -p 10
same ok --check-args '--pid-file="tmp/gearmand.pid"'
same ok --check-args -P '"tmp/gearmand.pid"'
same ok --check-args --round-robin
same ok --check-args -R
same ok --check-args --syslog
same ok --check-args --ssl
same ok --check-args --threads=10
same ok --check-args -t 8
same ok --check-args --user=nobody
same ok --check-args -u nobody
same ok --check-args --version
same ok --check-args -V
same refused --check-args --verbose=BAD
for v in DEBUG ERROR ALERT INFO WARNING NOTICE FATAL CRITICAL; do
    same ok --check-args --verbose=$v
done
same refused --check-args -vvv
same ok --check-args --worker-wakeup=4
same ok --check-args --protocol=http
same ok --check-args --queue-type=builtin
same ok --check-args --job-retries=4
same ok --check-args --job-handle-prefix=my_own_private_handle
same ok --check-args --hashtable-buckets=2000
same ok --check-args -j 6
same ok --check-args --protocol=http --http-port=8090
same refused --check-args --config-file=etc/gearmand.conf
same refused --check-args --config-file
printf -- '--port=4730 --listen=127.0.0.1 --keepalive-idle=10 --libsqlite3-table=q\n' >simple.conf
same ok --check-args --config-file=simple.conf

# The rest of 1.1.20's --help and gearmand(8) that a deployment may carry.
same ok --check-args -q libsqlite3 --libsqlite3-db=q.db --libsqlite3-table=jobs_q \
    --store-queue-on-shutdown
same ok --check-args -q Postgres --libpq-conninfo=dbname=x --libpq-table=gq
same ok --check-args -q libmemcached --libmemcached-servers=127.0.0.1:11211 \
    --libmemcached-prefix=gear_
same ok --check-args --keepalive --keepalive-idle=7 --keepalive-interval=3 --keepalive-count=4
same ok --check-args --exceptions --job-retries=2 --worker-wakeup=1 --backlog=64
[ -e q.db ]
ok $((!$?)) "--check-args starts nothing: no queue file was made"

# Refused with a reason that names the option, where gearmand takes them.
for o in --mysql-host=db --redis-server=r --libdrizzle-host=d --libtokyocabinet-file=f; do
    err=$("$DSJOBD" --check-args "$o" 2>&1)
    rc=$?
    name=${o%%=*}
    case $err in *"$name: gearmand's "*" queue is not available"*) r=0 ;; *) r=1 ;; esac
    [ $rc -eq 2 ] && [ $r -eq 0 ]
    ok $? "dsjobd refuses $name naming it (exit $rc): $err"
done
err=$("$DSJOBD" -p 0 --protocol=http 2>&1)
case $err in *"--protocol: gearmand's 'http' protocol module is not available"*) r=0 ;; *) r=1 ;; esac
ok $r "dsjobd starts not with --protocol=http, and says why: $err"

# ka_start KIND ARGS...: start KIND with ARGS (beside the others). Then one
# python (a start costs a tenth of a second) holds a connection to each and
# prints, a line a server, what its accepted socket has: "SO_KEEPALIVE
# TCP_KEEPIDLE TCP_KEEPINTVL TCP_KEEPCNT".
ka=""
ka_start() {
    server_start "$@" || return 1
    ka="$ka $SERVER_PID $SERVER_PORT"
}
ka_start dsjobd --keepalive-idle=7 --keepalive-interval=3 --keepalive-count=4
ka_start dsjobd --keepalive --keepalive-idle=9
ka_start dsjobd
if $have_gearmand; then
    ka_start gearmand --keepalive --keepalive-idle=7 --keepalive-interval=3 --keepalive-count=4
fi
# shellcheck disable=SC2086 # pids and ports are words
"$PYTHON" - $ka >"$dir/ka.out" <<'PY'
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def keepalive(pid, port):
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"\0REQ\0\0\0\x10\0\0\0\x01x")  # ECHO_REQ: the server has taken the connection
    c.recv(64)
    me = c.getsockname()
    pidfd = os.pidfd_open(pid)
    for name in os.listdir("/proc/%d/fd" % pid):
        if not os.readlink("/proc/%d/fd/%s" % (pid, name)).startswith("socket:"):
            continue
        fd = libc.syscall(438, pidfd, int(name), 0)  # pidfd_getfd
        if fd < 0:
            return "pidfd_getfd: errno %d" % ctypes.get_errno()
        s = socket.socket(fileno=fd)
        try:
            peer = s.getpeername()
        except OSError:
            peer = None
        if peer == me:
            return "%d %d %d %d" % (s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                                    s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                                    s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                                    s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT))
        s.close()
    return "no accepted socket for %s" % (me,)
a = sys.argv[1:]
for i in range(0, len(a), 2):
    try:
        print(keepalive(int(a[i]), int(a[i + 1])))
    except OSError as e:
        print("error: %s" % e)
PY
server_stop_all
{ read -r ka1; read -r ka2; read -r ka3; read -r ka4; } <"$dir/ka.out"
is "$ka1" "1 7 3 4" \
    "dsjobd --keepalive-idle=7 --keepalive-interval=3 --keepalive-count=4: on the accepted socket"
sys_intvl=$(cat /proc/sys/net/ipv4/tcp_keepalive_intvl)
sys_probes=$(cat /proc/sys/net/ipv4/tcp_keepalive_probes)
is "$ka2" "1 9 $sys_intvl $sys_probes" \
    "dsjobd --keepalive --keepalive-idle=9: that one set, the others the system's"
is "${ka3%% *}" "0" "dsjobd without them: no keepalive, as before"
if $have_gearmand; then
    is "$ka4" "1 7 3 4" "gearmand 1.1.20 with the same options: the same socket"
fi

# --file-descriptors sets the open-file limit, as gearmand's does.
files_limit() {
    server_start "$1" --file-descriptors=333 || return 1
    awk '/^Max open files/ { print $4 }' "/proc/$SERVER_PID/limits"
    server_stop
}
is "$(files_limit dsjobd)" 333 "dsjobd --file-descriptors=333: its open-file limit is 333"
if $have_gearmand; then
    is "$(files_limit gearmand)" 333 "gearmand 1.1.20 --file-descriptors=333: the same"
fi
done_testing
