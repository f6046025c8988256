#!/bin/sh
# dsjobd --config-file: NAME = VALUE lines and gearmand's --NAME=VALUE words,
# # comments, the command line overriding the file wherever --config-file
# stands, errors naming FILE:LINE with exit 2, and one file that real
# gearmand and dsjobd both start from.
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)

# start_conf NAME ARGS...: dsjobd in the background with ARGS, its port from $dir/NAME.port.
start_conf() {
    name=$1; shift
    rm -f "$dir/$name.port"
    "$DSJOBD" "$@" &
    SERVER_PID=$!
    _server_pids="$_server_pids $SERVER_PID"
    i=0
    while [ ! -s "$dir/$name.port" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
    SERVER_PORT=$(cat "$dir/$name.port" 2>/dev/null)
    [ -n "$SERVER_PORT" ]
}

# The NAME = VALUE form, with comments, blank lines, spaces and a flag.
cat >"$dir/a.conf" <<EOF
# dsjobd settings
listen = 127.0.0.1
port=0

   port-file   =   $dir/a.port
log-file = $dir/a.log
verbose = NOTICE
job-handle-prefix = FROMFILE
keepalive
EOF
start_conf a --config-file "$dir/a.conf"
ok $? "a NAME = VALUE file starts dsjobd (port $SERVER_PORT)"
out=$("$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b conf.f payload 2>&1)
is "$out" "FROMFILE:00000000000000000001" "its job-handle-prefix is used"
grep -q "NOTICE .*listening on 127.0.0.1 port $SERVER_PORT" "$dir/a.log"
ok $? "its log-file and verbose are used"
server_stop

# The command line wins, before or after --config-file.
start_conf a --job-handle-prefix CMD1 --config-file "$dir/a.conf"
out=$("$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b conf.f payload 2>&1)
is "$out" "CMD1:00000000000000000001" "an option before --config-file overrides the file"
server_stop
start_conf a --config-file "$dir/a.conf" --job-handle-prefix CMD2
out=$("$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b conf.f payload 2>&1)
is "$out" "CMD2:00000000000000000001" "an option after --config-file overrides the file"
server_stop

# A repeatable option on the command line replaces the file's list.
cat >"$dir/b.conf" <<EOF
listen = ::1
port = 0
port-file = $dir/b.port
log-file = $dir/b.log
verbose = NOTICE
EOF
start_conf b --config-file "$dir/b.conf" -L 127.0.0.1
ok $? "--listen on the command line with a file that has listen"
grep -q "listening on 127.0.0.1 port" "$dir/b.log" && ! grep -q "listening on ::1" "$dir/b.log"
ok $? "listens on the command line's address only"
server_stop

# gearmand's form: command-line words, several on a line, -x VALUE, # words.
cat >"$dir/g.conf" <<EOF
--listen=127.0.0.1 --port=0
--port-file $dir/g.port # the port, for the test
-l $dir/g.log
--verbose=NOTICE
-j 2
--threads=4
EOF
start_conf g --config-file="$dir/g.conf"
ok $? "a file of gearmand's --NAME=VALUE words starts dsjobd"
grep -q "listening on 127.0.0.1 port $SERVER_PORT" "$dir/g.log"
ok $? "and its -l and --verbose are used"
server_stop

# One file, both servers: gearmand 1.1.20 reads it as dsjobd does.
if [ -n "${GEARMAND:-}" ] && [ -x "$GEARMAND" ]; then
    gport=$(free_port)
    cat >"$dir/both.conf" <<EOF
--listen=127.0.0.1
--port=$gport
--log-file=$dir/both.log
--verbose=INFO
--job-retries=3
--round-robin
--threads=0
EOF
    "$GEARMAND" --config-file="$dir/both.conf" &
    gpid=$!
    _server_pids="$_server_pids $gpid"
    wait_port "$gport"
    ok $? "gearmand serves from the file on port $gport"
    kill -TERM "$gpid"; wait "$gpid" 2>/dev/null
    _server_pids=$(echo "$_server_pids" | sed "s/ $gpid\b//")
    start_conf both --config-file "$dir/both.conf" -p 0 --port-file "$dir/both.port" -l "$dir/both2.log"
    ok $? "dsjobd serves from the same file (port and log from the command line)"
    echo hello | timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b conf.both >/dev/null
    ok $? "and takes a job"
    server_stop
else
    diag "gearmand not found: the shared file is tried on dsjobd only"
fi

# Errors: exit 2, FILE:LINE, what is wrong.
bad() { # bad TEXT WANT DESCRIPTION: a file of TEXT fails with a message containing WANT
    printf '%s\n' "$1" >"$dir/bad.conf"
    out=$(timeout 10 "$DSJOBD" -p 0 --config-file "$dir/bad.conf" 2>&1); rc=$?
    is "$rc" 2 "$3: exit 2"
    case $out in
    *"$2"*) ok 0 "$3: says '$2'" ;;
    *) ok 1 "$3: says '$2'"; diag "got: $out" ;;
    esac
}
bad "# fine
port = 0
bogus = 1" "dsjobd: $dir/bad.conf:3: unknown option 'bogus'" "an unknown key"
bad "--port=0 --bogus=1" "$dir/bad.conf:1: unknown option '--bogus'" "an unknown --word"
bad "

port = nonsense" "$dir/bad.conf:3: --port: invalid value 'nonsense'" "a bad value"
bad "verbose = LOUD" "$dir/bad.conf:1: --verbose: unknown level 'LOUD'" "a bad level"
bad "keepalive = yes" "$dir/bad.conf:1: --keepalive takes no value" "a value for a flag"
bad "port" "$dir/bad.conf:1: --port needs a value" "a missing value"
bad "port 4730" "$dir/bad.conf:1: 'port 4730': expected port = VALUE" "NAME VALUE without ="
bad "config-file = /etc/x" "--config-file cannot be used in a config file" "a nested config file"
bad "4730" "$dir/bad.conf:1: unknown option '4730'" "a bare word"
out=$("$DSJOBD" --config-file "$dir/none.conf" 2>&1); rc=$?
is "$rc" 2 "a missing config file: exit 2"
case $out in
*"--config-file: cannot open '$dir/none.conf'"*) ok 0 "naming it" ;;
*) ok 1 "naming it"; diag "got: $out" ;;
esac
printf 'port = 0\n' >"$dir/ok.conf"
out=$("$DSJOBD" --config-file "$dir/ok.conf" --port nonsense 2>&1); rc=$?
is "$rc" 2 "a bad command-line value with a good file: exit 2"
case $out in
"dsjobd: --port: invalid value 'nonsense'"*) ok 0 "the message names no file" ;;
*) ok 1 "the message names no file"; diag "got: $out" ;;
esac
"$DSJOBD" --config-file "$dir/ok.conf" --version >/dev/null; ok $? "--version after a good file: exit 0"
printf 'port = 0\nport = nonsense\n' >"$dir/v.conf"
"$DSJOBD" --config-file "$dir/v.conf" --version >/dev/null 2>&1
is "$?" 2 "--version after a bad file: exit 2 (the file is checked first)"
"$DSJOBD" --help | grep -q -- "--config-file"; ok $? "--help lists --config-file"

# Places of two stores without --store are refused, on the command line and
# in the file alike (the command line took SQLite, the file PostgreSQL).
dsn="host=127.0.0.1 port=1 dbname=none"
out=$("$DSJOBD" -p 0 --work-dir "$dir/two" --pg-dsn "$dsn" 2>&1); rc=$?
is "$rc" 2 "--work-dir and --pg-dsn without --store: exit 2"
case $out in
*"--work-dir and --pg-dsn name two different stores: say which one with --store"*) ok 0 "naming both and --store" ;;
*) ok 1 "naming both and --store"; diag "got: $out" ;;
esac
printf 'port = 0\nwork-dir = %s/two\npg-dsn = %s\n' "$dir" "$dsn" >"$dir/two.conf"
out=$("$DSJOBD" --config-file "$dir/two.conf" 2>&1); rc=$?
is "$rc" 2 "the same two in a config file: exit 2"
case $out in
*"two different stores"*) ok 0 "with the same reason" ;;
*) ok 1 "with the same reason"; diag "got: $out" ;;
esac
printf 'port = 0\npg-dsn = %s\n' "$dsn" >"$dir/pg.conf"
out=$("$DSJOBD" --config-file "$dir/pg.conf" --memcached-servers 127.0.0.1:1 2>&1); rc=$?
is "$rc" 2 "--pg-dsn in the file and --memcached-servers on the command line: exit 2"
server_start dsjobd --store sqlite --work-dir "$dir/two" --pg-dsn "$dsn"
ok $? "with --store sqlite the same two are taken, and SQLite is used"
[ -f "$dir/two/dsjobd.db" ]; ok $? "its database is in --work-dir"
server_stop
done_testing
