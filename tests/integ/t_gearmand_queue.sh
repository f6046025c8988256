#!/bin/sh
# A gearmand queue file taken over. Debian's gearmand 1.1.20 writes its
# libsqlite3 queue (high, normal, low jobs, a unique "-", empty uniques, a
# NUL in a payload, an epoch job) and is killed with SIGKILL; dsjobd is
# started on the same file: every job runs exactly once with its payload,
# each function's jobs in the order gearmand itself replays them (gearmand
# started again on a copy of the file is the reference), the epoch job not
# before its time. The old table is left, renamed; a restart takes nothing
# in again. --libsqlite3-table names another table.
. "$top_srcdir/tests/lib/server.sh"
dir=$(test_tmpdir)
if [ ! -x "$GEARMAND" ]; then
    echo "1..0 # SKIP no gearmand at $GEARMAND"
    exit 0
fi
export PYTHONDONTWRITEBYTECODE=1

# client.py PORT: submit the jobs; prints the epoch time given.
cat >"$dir/client.py" <<'PY'
import socket, struct, sys, time
port = int(sys.argv[1]); table_jobs = []
s = socket.create_connection(("127.0.0.1", port))
def send(t, *args):
    body = b"\0".join(args)
    s.sendall(b"\0REQ" + struct.pack(">II", t, len(body)) + body)
    h = s.recv(12); n = struct.unpack(">II", h[4:])[1]; d = b""
    while len(d) < n: d += s.recv(n - len(d))
    assert struct.unpack(">II", h[4:])[0] == 8, "no JOB_CREATED"
when = int(time.time()) + 5
send(34, b"q_a", b"u-low", b"a low")               # SUBMIT_JOB_LOW_BG
send(18, b"q_a", b"", b"a normal, no unique")      # SUBMIT_JOB_BG
send(18, b"q_b", b"", b"b normal, no unique")
send(32, b"q_a", b"u-high", b"a high\0with a NUL")  # SUBMIT_JOB_HIGH_BG
send(18, b"q_a", b"-", b"a normal, unique -")
send(18, b"q_b", b"u-b", b"b normal")
send(32, b"q_b", b"u-b-high", b"b high")
send(36, b"q_a", b"u-epoch", str(when).encode(), b"a epoch")  # SUBMIT_JOB_EPOCH
print(when)
PY

# worker.py PORT N: grab N jobs of q_a and q_b (polling, as gearmand wakes no
# sleeper for an epoch job), complete each; print "TIME FUNC PAYLOAD" a line.
cat >"$dir/worker.py" <<'PY'
import socket, struct, sys, time
port, want = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port)); buf = b""
def send(t, *args):
    body = b"\0".join(args)
    s.sendall(b"\0REQ" + struct.pack(">II", t, len(body)) + body)
def recv():
    global buf
    while len(buf) < 12 or len(buf) < 12 + struct.unpack(">I", buf[8:12])[0]:
        d = s.recv(65536)
        if not d: raise SystemExit("closed")
        buf += d
    t, n = struct.unpack(">II", buf[4:12]); body = buf[12:12 + n]; buf = buf[12 + n:]
    return t, body
send(1, b"q_b"); send(1, b"q_a")
got, idle = 0, 0
while got < want and idle < 150:          # 150 x 0.1 s with nothing: give up
    send(9)                               # GRAB_JOB
    t, body = recv()
    if t == 10:                           # NO_JOB
        idle += 1; time.sleep(0.1); continue
    handle, func, data = body.split(b"\0", 2)
    print("%d %s %r" % (int(time.time()), func.decode(), data), flush=True)
    send(13, handle, b"")                 # WORK_COMPLETE
    got += 1; idle = 0
send(9); t, body = recv()
print("after: %s" % ("NO_JOB" if t == 10 else "type %d" % t))
PY

server_start gearmand -q libsqlite3 --libsqlite3-db="$dir/q.db" || exit 1
when=$("$PYTHON" "$dir/client.py" "$SERVER_PORT")
ok $? "gearmand 1.1.20 took 8 background jobs into its libsqlite3 queue (epoch job at $when)"
server_kill9
cp "$dir/q.db" "$dir/ref.db"
rows=$("$PYTHON" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from gearman_queue").fetchone()[0])' "$dir/q.db")
is "$rows" 8 "after kill -9 its file holds 8 rows"

# The reference: gearmand replaying its own file.
server_start gearmand -q libsqlite3 --libsqlite3-db="$dir/ref.db" || exit 1
"$PYTHON" "$dir/worker.py" "$SERVER_PORT" 8 >"$dir/ref.out"
server_stop

server_start dsjobd -q libsqlite3 --libsqlite3-db="$dir/q.db" --verbose NOTICE
ok $? "dsjobd starts on gearmand's queue file"
grep -q "took 8 jobs of gearmand's queue table \"gearman_queue\" of '$dir/q.db' in; the table is now \"gearman_queue_dsjob_import\"" "$SERVER_LOG"
ok $? "and logs how many jobs it took in, and the table's new name"
"$PYTHON" "$dir/worker.py" "$SERVER_PORT" 8 >"$dir/ds.out"
ok $? "a worker runs them"
diag "gearmand's replay:"; sed 's/^/#   /' "$dir/ref.out"
diag "dsjobd's:"; sed 's/^/#   /' "$dir/ds.out"

jobs_of() { grep -v '^after' "$1" | cut -d' ' -f2- | sort; }
is "$(jobs_of "$dir/ds.out")" "$(jobs_of "$dir/ref.out")" \
    "dsjobd ran the same 8 jobs as gearmand's own replay, payloads and all"
is "$(jobs_of "$dir/ds.out" | uniq -d)" "" "each once"
for f in q_a q_b; do
    is "$(grep " $f " "$dir/ds.out" | grep -v epoch | cut -d' ' -f3-)" \
        "$(grep " $f " "$dir/ref.out" | grep -v epoch | cut -d' ' -f3-)" \
        "$f's jobs in gearmand's order: high, normal in submission order, low"
done
t=$(grep epoch "$dir/ds.out" | cut -d' ' -f1)
[ -n "$t" ] && [ "$t" -ge "$when" ]
ok $? "the epoch job ran at its time ($t >= $when), not before"
is "$(tail -1 "$dir/ds.out")" "after: NO_JOB" "then there is no job left"
server_stop

q() { "$PYTHON" -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "$dir/q.db" "$1"; }
is "$(q 'select count(*) from gearman_queue_dsjob_import')" 8 "gearmand's table is kept, renamed, with its 8 rows"
is "$(q 'select count(*) from jobs')" 0 "dsjobd's own table is empty: every job ended"
server_start dsjobd -q libsqlite3 --libsqlite3-db="$dir/q.db" --verbose NOTICE
grep -q "replayed 0 jobs" "$SERVER_LOG" && ! grep -q "took .* jobs of gearmand" "$SERVER_LOG"
ok $? "a restart takes nothing in again and replays nothing"
server_stop

# --libsqlite3-table: gearmand's queue under another name.
server_start gearmand -q libsqlite3 --libsqlite3-db="$dir/t.db" --libsqlite3-table=other_q || exit 1
"$PYTHON" "$dir/client.py" "$SERVER_PORT" >/dev/null
server_kill9
err=$("$DSJOBD" -q libsqlite3 --libsqlite3-db="$dir/t.db" -L 127.0.0.1 -p 0 2>&1)
rc=$?
case $err in *"not a dsjob store"*) r=0 ;; *) r=1 ;; esac
[ $rc -eq 1 ] && [ $r -eq 0 ]
ok $? "without --libsqlite3-table a file holding only other_q is refused (exit $rc): $err"
server_start dsjobd -q libsqlite3 --libsqlite3-db="$dir/t.db" --libsqlite3-table=other_q --verbose NOTICE
grep -q "took 8 jobs of gearmand's queue table \"other_q\"" "$SERVER_LOG"
ok $? "with --libsqlite3-table=other_q its 8 jobs are taken in"
server_stop
done_testing
