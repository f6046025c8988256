#!/bin/sh
# dsjobd --user, run as root: it binds, writes its pid file, then runs as
# the user (every thread: /proc/PID/task/*/status), and what the man page
# says the user must own keeps working: the work dir (jobs survive a
# restart), the log file's directory (SIGHUP after a rotation), the pid
# file's directory (removed at the stop). An unknown user, and a switch
# without root, are usage errors naming the user. Skipped unless root.
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)

if [ "$(id -u)" != 0 ]; then
    echo "1..0 # SKIP not root: --user cannot switch users"
    exit 0
fi
if ! "$DSJOBD" --help | grep -q -- "--work-dir"; then
    echo "1..0 # SKIP built without the SQLite store"
    exit 0
fi
user=nobody
uid=$(id -u "$user" 2>/dev/null) && gid=$(id -g "$user") || {
    echo "1..0 # SKIP no user '$user'"
    exit 0
}

out=$("$DSJOBD" -p 0 --user no-such-user-xyz 2>&1); rc=$?
is "$rc" 2 "an unknown --user exits 2"
case $out in
*"--user: no such user 'no-such-user-xyz'"*) ok 0 "naming the user: $(echo "$out" | head -n 1)" ;;
*) ok 1 "naming the user"; diag "got: $out" ;;
esac

# The user must reach its directories: the test's own is root's, 0700.
chmod 711 "$dir"
mkdir -p "$dir/u/var" "$dir/u/log" "$dir/u/run"
chown "$user" "$dir/u/var" "$dir/u/log" "$dir/u/run"

start() { # start: dsjobd as a daemon that switches to $user
    rm -f "$dir/u.port"
    "$DSJOBD" -d -L 127.0.0.1 -p 0 --port-file "$dir/u.port" --user "$user" \
        --work-dir "$dir/u/var" --log-file "$dir/u/log/dsjobd.log" --verbose NOTICE \
        --pid-file "$dir/u/run/dsjobd.pid"
}
stop() { # stop: SIGTERM the daemon of the pid file, wait until it is gone
    kill -TERM "$pid"
    i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
    ! kill -0 "$pid" 2>/dev/null
}

start
is "$?" 0 "--user $user: the daemon starts"
pid=$(cat "$dir/u/run/dsjobd.pid" 2>/dev/null)
port=$(cat "$dir/u.port" 2>/dev/null)
[ -n "$pid" ] && kill -0 "$pid"; ok $? "its pid file names a live process"
is "$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")" "$uid $uid $uid $uid" \
    "/proc/$pid/status: real, effective, saved and fs uid are $user's"
is "$(awk '/^Gid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")" "$gid $gid $gid $gid" \
    "and every gid is its group's"
groups=$(awk '/^Groups:/ { $1 = ""; print }' "/proc/$pid/status")
case " $groups " in
*" 0 "*) ok 1 "root's group is not kept among the supplementary groups ($groups)" ;;
*) ok 0 "root's group is not kept among the supplementary groups" ;;
esac
others=$(grep -h '^Uid:' /proc/"$pid"/task/*/status | awk -v u="$uid" '$2 != u || $3 != u' | wc -l)
threads=$(ls /proc/"$pid"/task | wc -l)
is "$others" 0 "all $threads threads (the store's writer too) run as $user"
wait_port "$port"; ok $? "the port bound as root accepts connections"

out=$("$DSJOB" -s "127.0.0.1:$port" submit -b user.bg kept 2>&1)
ok $? "a background job is stored ($out)"
"$DSJOB" -s "127.0.0.1:$port" worker -f user.fg -- tr a-z A-Z &
wpid=$!
out=$(echo hello | timeout 20 "$DSJOB" -s "127.0.0.1:$port" submit user.fg)
is "$out" "HELLO" "a foreground job runs"
kill -TERM "$wpid"; wait "$wpid" 2>/dev/null

# Log rotation: the reopened file is made by the user, in its directory.
mv "$dir/u/log/dsjobd.log" "$dir/u/log/dsjobd.log.1"
kill -HUP "$pid"
i=0; while ! grep -q "log reopened" "$dir/u/log/dsjobd.log" 2>/dev/null && [ $i -lt 100 ]; do
    sleep 0.05; i=$((i + 1))
done
grep -q "log reopened" "$dir/u/log/dsjobd.log" 2>/dev/null
ok $? "SIGHUP reopens the log file after a rotation"
is "$(stat -c %U "$dir/u/log/dsjobd.log" 2>/dev/null)" "$user" "the new log file is $user's"

stop; ok $? "SIGTERM stops it"
[ ! -e "$dir/u/run/dsjobd.pid" ]; ok $? "the pid file is removed (its directory is $user's)"
[ ! -e "$dir/u/var/dsjobd.db-wal" ]; ok $? "SQLite removed its WAL file at the clean stop"

start
is "$?" 0 "it starts again on the same work dir"
pid=$(cat "$dir/u/run/dsjobd.pid" 2>/dev/null)
port=$(cat "$dir/u.port" 2>/dev/null)
out=$("$DSJOB" -s "127.0.0.1:$port" status 2>&1)
echo "$out" | grep -Eq '^user\.bg +1 '; ok $? "the background job is still there"
stop; ok $? "and stops"
grep -q "ERROR" "$dir/u/log/dsjobd.log"; is $? 1 "no ERROR line in the log"

# Without root, switching to another user is a usage error, before binding.
if ! command -v setpriv >/dev/null 2>&1; then
    diag "no setpriv: --user without root is not tried"
    done_testing
    exit
fi
out=$(setpriv --reuid="$uid" --regid="$gid" --clear-groups "$DSJOBD" -p 0 --user root 2>&1); rc=$?
is "$rc" 2 "as $user, --user root exits 2"
case $out in
*"--user root: switching to another user needs root"*) ok 0 "saying why: $(echo "$out" | head -n 1)" ;;
*) ok 1 "saying why"; diag "got: $out" ;;
esac
done_testing
