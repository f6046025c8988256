#!/bin/sh
# sd_notify: a dsjobd built for systemd (configure found libsystemd; main.c
# sends the datagram itself), started with NOTIFY_SOCKET set
# (as systemd starts a Type=notify unit), sends READY=1 once its port is
# bound and its port file written, and STOPPING=1 when it stops. The test
# is the service manager: a unix datagram socket read by perl.
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)

if [ -z "${HAVE_SYSTEMD:-}" ]; then
    # Run by hand: what configure decided.
    grep -q '^#define HAVE_SYSTEMD 1' "${top_builddir:-.}/config.h" 2>/dev/null && HAVE_SYSTEMD=yes
fi
if [ "${HAVE_SYSTEMD:-}" != yes ]; then
    echo "1..0 # SKIP dsjobd built without libsystemd (configure --with-systemd)"
    exit 0
fi

sock=$dir/notify.sock
# The listener prints each datagram on a line of its own, until STOPPING=1 (at most 60 s).
perl -MIO::Socket::UNIX -MSocket -e '
    $| = 1;
    my $s = IO::Socket::UNIX->new(Type => SOCK_DGRAM, Local => $ARGV[0]) or die "bind: $!";
    open(my $ready, ">", "$ARGV[0].up") and close($ready);
    $SIG{ALRM} = sub { print "TIMEOUT\n"; exit 1 };
    alarm 60;
    while (defined $s->recv(my $msg, 4096)) {
        $msg =~ s/\n/ /g;
        print "$msg\n";
        exit 0 if $msg =~ /STOPPING=1/;
    }' "$sock" >"$dir/notify.out" &
lpid=$!
i=0; while [ ! -e "$sock.up" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$sock" ]; ok $? "the test's notify socket is listening"

NOTIFY_SOCKET=$sock "$DSJOBD" -L 127.0.0.1 -p 0 --port-file "$dir/port" -l "$dir/log" &
dpid=$!
_server_pids="$_server_pids $dpid"
i=0; while ! grep -q READY=1 "$dir/notify.out" && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
grep -q "READY=1" "$dir/notify.out"; ok $? "READY=1 arrives"
# By then the port is bound and its file written: one connection, no retry.
port=$(cat "$dir/port" 2>/dev/null)
[ -n "$port" ]; ok $? "the port file is written before READY=1 ($port)"
perl -MIO::Socket::INET -e 'exit(IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $ARGV[0]) ? 0 : 1)' \
    "$port"
ok $? "the port accepts a connection as soon as READY=1 is there"
grep -q STOPPING=1 "$dir/notify.out"; is $? 1 "no STOPPING=1 while it serves"

kill -TERM "$dpid"; wait "$dpid"; rc=$?
_server_pids=$(echo "$_server_pids" | sed "s/ $dpid\b//")
is "$rc" 0 "SIGTERM: exit 0"
wait "$lpid"
is "$?" 0 "the listener saw STOPPING=1"
is "$(grep -E -o 'READY=1|STOPPING=1' "$dir/notify.out" | tr '\n' ' ')" "READY=1 STOPPING=1 " \
    "READY=1, then STOPPING=1, once each"

# With no NOTIFY_SOCKET nothing is sent and nothing fails: the suite's other dsjobds.
server_start dsjobd
ok $? "without NOTIFY_SOCKET dsjobd starts as ever"
server_stop
done_testing
