#!/bin/sh
# dsjobd as a program: usage errors, --help and --version, a taken port,
# --daemon with a pid file, SIGHUP reopening the log, SIGUSR1 and SIGTERM
# stopping it, and a unix socket.
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)

out=$("$DSJOBD" --no-such-option 2>&1); rc=$?
is "$rc" 2 "an unknown option exits 2"
echo "$out" | grep -q -- "no-such-option"; ok $? "and the message names it"

echo "$out" | grep -q "^dsjobd: "; ok $? "naming the program as dsjobd, not its path: $(echo "$out" | head -1)"
echo "$out" | grep -q -- "$DSJOBD"; is $? 1 "the binary's full path is not in the message"

out=$(timeout 10 "$DSJOBD" -p 0 --work-dir '' 2>&1); rc=$? # bounded: a dsjobd that took it would serve
is "$rc" 2 "an empty --work-dir exits 2"
echo "$out" | grep -q -- "--work-dir: the path is empty"; ok $? "saying so: $out"

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
is "$(echo "$out" | grep -c "Address already in use")" 1 "once, not as a log line and again"
# A startup error goes to the log file too when there is one, and once to stderr.
out=$("$DSJOBD" -L 127.0.0.1 -p "$taken" -l "$dir/taken.log" 2>&1); rc=$?
is "$rc" 1 "a port in use with a log file exits 1"
is "$(echo "$out" | grep -c "Address already in use")" 1 "stderr says why once"
grep -q "Address already in use" "$dir/taken.log"; ok $? "and the log file has it"
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
    is "$rc" 2 "an unknown store is a bad option value: exit 2"
    echo "$out" | grep -q "unknown store 'nosuch'"; ok $? "saying so"
    # The README's start: the work dir and the log file in it need not exist yet.
    rm -rf "$dir/var"
    server_start dsjobd --work-dir "$dir/var" --log-file "$dir/var/dsjobd.log" --verbose NOTICE
    [ -f "$dir/var/dsjobd.db" ] && [ -f "$dir/var/dsjobd.log" ]
    ok $? "--work-dir makes its directory before --log-file opens a file in it"
    server_stop
fi

# A repeated path option: the last one wins (and the first is not leaked: LeakSanitizer).
"$DSJOBD" -d -L 127.0.0.1 -p 0 -P "$dir/first.pid" -P "$dir/r.pid" --port-file "$dir/first.port" \
    --port-file "$dir/r.port" -l "$dir/first.log" -l "$dir/r.log" --verbose NOTICE
rc=$?
is "$rc" 0 "repeated -P, --port-file and -l are taken"
[ -s "$dir/r.pid" ] && [ -s "$dir/r.port" ] && [ ! -e "$dir/first.pid" ] && [ ! -e "$dir/first.port" ]
ok $? "the last value of each is the one used"
pid=$(cat "$dir/r.pid" 2>/dev/null)
kill -TERM "$pid" 2>/dev/null
i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
! kill -0 "$pid" 2>/dev/null; ok $? "and it stops on SIGTERM"
"$DSJOBD" --work-dir "$dir/a" --work-dir "$dir/b" --libsqlite3-db "$dir/a.db" \
    --libsqlite3-db "$dir/b.db" --unix-socket "$dir/a.sock" --unix-socket "$dir/b.sock" --version >/dev/null
ok $? "repeated --work-dir, --libsqlite3-db and --unix-socket before --version exit 0"
done_testing
