#!/bin/sh
# dsjobd as a program: usage errors, --help and --version, a taken port,
# --daemon with a pid file, SIGHUP reopening the log, SIGUSR1 and SIGTERM
# stopping it, and a unix socket.
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)

out=$("$DSJOBD" --no-such-option 2>&1); rc=$?
is "$rc" 2 "an unknown option exits 2"
echo "$out" | grep -q -- "no-such-option"; ok $? "and the message names it"

out=$("$DSJOBD" --port nonsense 2>&1); rc=$?
is "$rc" 2 "a bad option value exits 2"
echo "$out" | grep -q -- "--port: invalid value 'nonsense'"; ok $? "naming the option and the value"

"$DSJOBD" --help | grep -q -- "--max-packet-size"; ok $? "--help lists the options"
"$DSJOBD" --version | grep -Eq '^dsjobd [0-9]+\.[0-9]+\.[0-9]+$'; ok $? "--version prints the version"

server_start dsjobd
taken=$SERVER_PORT
out=$("$DSJOBD" -L 127.0.0.1 -p "$taken" -l stderr 2>&1); rc=$?
is "$rc" 1 "a port in use exits 1"
echo "$out" | grep -q "Address already in use"; ok $? "and says why"
server_stop

# --daemon: the parent returns once the child serves; the pid file names the child.
"$DSJOBD" -d -L 127.0.0.1 -p 0 --port-file "$dir/d.port" -P "$dir/d.pid" -l "$dir/d.log" --verbose NOTICE
rc=$?
is "$rc" 0 "--daemon returns 0 once serving"
pid=$(cat "$dir/d.pid" 2>/dev/null)
[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; ok $? "the pid file names a live process"
port=$(cat "$dir/d.port")
wait_port "$port"; ok $? "the daemon accepts connections"
mv "$dir/d.log" "$dir/d.log.1"
kill -HUP "$pid"
i=0; while [ ! -s "$dir/d.log" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
grep -q "log reopened" "$dir/d.log" 2>/dev/null; ok $? "SIGHUP reopens the log file at its path"
kill -USR1 "$pid"
i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
! kill -0 "$pid" 2>/dev/null; ok $? "SIGUSR1 with no running job stops it"
[ ! -e "$dir/d.pid" ]; ok $? "and the pid file is removed"

server_start dsjobd
out=$("$DSJOBD" -d -L 127.0.0.1 -p "$SERVER_PORT" -l "$dir/f.log" 2>&1); rc=$?
is "$rc" 1 "--daemon on a taken port fails in the foreground with exit 1"
echo "$out" | grep -q "Address already in use"; ok $? "and the reason is printed"
server_stop

# A unix socket, and TERM.
server_start dsjobd --unix-socket "$dir/s.sock"
[ -S "$dir/s.sock" ]; ok $? "--unix-socket makes the socket"
perl -MIO::Socket::UNIX -e '
    my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or exit 1;
    print $s "version\n"; my $l = <$s>; exit($l =~ /^OK / ? 0 : 1);' "$dir/s.sock"
ok $? "the admin protocol answers on it"
kill -TERM "$SERVER_PID"; wait "$SERVER_PID"; rc=$?
is "$rc" 0 "SIGTERM: exit 0"
[ ! -e "$dir/s.sock" ]; ok $? "the unix socket is removed at exit"
# A store that cannot be used stops dsjobd at startup, naming the file; it is never reset.
if "$DSJOBD" --help | grep -q -- "--work-dir"; then
    mkdir -p "$dir/bad"
    head -c 4096 /dev/urandom > "$dir/bad/dsjobd.db"
    cp "$dir/bad/dsjobd.db" "$dir/bad.orig"
    out=$("$DSJOBD" -L 127.0.0.1 -p 0 -l stderr --work-dir "$dir/bad" 2>&1); rc=$?
    is "$rc" 1 "a corrupt store: exit 1"
    echo "$out" | grep -q "$dir/bad/dsjobd.db.*not a database"; ok $? "naming the file: $(echo "$out" | tail -1)"
    cmp -s "$dir/bad/dsjobd.db" "$dir/bad.orig"; ok $? "and the file is left as it was"
    out=$("$DSJOBD" -L 127.0.0.1 -p 0 -l stderr -q nosuch 2>&1); rc=$?
    is "$rc" 1 "an unknown store: exit 1"
    echo "$out" | grep -q "unknown store 'nosuch'"; ok $? "saying so"
fi
done_testing
