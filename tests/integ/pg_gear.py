"""A bare Gearman client, worker and admin peer for the postgres store's
tests (tests/integ/t_pg_*.sh), with the bytes exact: payloads, unique keys
and results may hold any byte. Also a TCP proxy that can cut or freeze its
connections. Only 127.0.0.1.

    python3 pg_gear.py hostile PORT PSQL...  the SQL fuzz of t_pg_hostile.sh
    python3 pg_gear.py badrow PORT KIND   20 submits of one client pipelined, then one
        of another client in the same batch: KIND long-unique (3000 bytes of
        1-255), epoch (SUBMIT_JOB_EPOCH 99999999999999) or poison (payload
        "poison"); prints "innocent CREATED REFUSED" and "bad ANSWER"
    python3 pg_gear.py coalesce PORT FUNC UNIQ TAG  one client's 20 submits of FUNC with
        unique keys TAG-0..TAG-19, 5 without one, and one with UNIQ, pipelined in
        one write (one batch); prints "created N" (JOB_CREATED answers), "handle
        TAG-I H" for each keyed submit and "live H" for UNIQ's
    python3 pg_gear.py badrow PORT KIND KIND...  each KIND in turn, its lines
        prefixed with "KIND "
    python3 pg_gear.py pendings PORT1 FILE1 PORT2 FILE2  pending PORT1 cancel and
        pending PORT2 priority at once, in two threads, into FILE1 and FILE2
    python3 pg_gear.py submits PORT FUNC OPTION N  OPTION_REQ OPTION and N
        SUBMIT_JOB_BG of FUNC (payloads j1..jN) in one write; prints "option
        ANSWER" and "created N"
    python3 pg_gear.py pending PORT cancel|priority  a job still in the open batch
        (the server gathers commits for a while): submit one to learn the
        handles, submit a second without waiting, then "cancel job H2" or
        "priority H2 high" at once; prints "h2 H2", "admin ANSWER", "ack ANSWER"
    python3 pg_gear.py proxy LISTEN_PORT_FILE UPSTREAM_PORT CONTROL_DIR
        a proxy: CONTROL_DIR/cut (made by the test) closes, with RST, the
        client side of every connection open then and keeps the upstream
        side (a NAT or firewall that forgot the flow: PostgreSQL never
        notices); CONTROL_DIR/freeze stops forwarding (a peer gone without
        a word), CONTROL_DIR/thaw starts again. It writes the port it
        listens on to LISTEN_PORT_FILE and runs until killed.
"""
import builtins
import io
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time

T = dict(CAN_DO=1, GRAB_JOB=9, NO_JOB=10, JOB_ASSIGN=11, WORK_COMPLETE=13, SUBMIT_JOB_BG=18,
         JOB_CREATED=8, ERROR=19, NOOP=6, PRE_SLEEP=4, GRAB_JOB_UNIQ=30, JOB_ASSIGN_UNIQ=31,
         SUBMIT_JOB_LOW_BG=34, SUBMIT_JOB_EPOCH=36, OPTION_REQ=26, OPTION_RES=27)
N = {v: k for k, v in T.items()}


def pkt(t, *args):
    body = b"\0".join(a if isinstance(a, bytes) else str(a).encode() for a in args)
    return b"\0REQ" + struct.pack(">II", T[t], len(body)) + body


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def send(self, t, *args):
        self.s.sendall(pkt(t, *args))

    def _fill(self, timeout):
        r, _, _ = select.select([self.s], [], [], timeout)
        if not r:
            return False
        d = self.s.recv(1 << 20)
        if not d:
            raise EOFError("closed")
        self.buf += d
        return True

    def recv(self, timeout=30.0):
        """The next packet as (name, [fields]); None after timeout seconds."""
        end = time.time() + timeout
        while True:
            if len(self.buf) >= 12:
                t, n = struct.unpack(">II", self.buf[4:12])
                if len(self.buf) >= 12 + n:
                    body = self.buf[12:12 + n]
                    self.buf = self.buf[12 + n:]
                    return N.get(t, t), body
            left = end - time.time()
            if left <= 0 or not self._fill(left):
                return None

    def admin(self, line, timeout=30.0):
        self.s.sendall(line.encode() + b"\n")
        end = time.time() + timeout
        while b"\n" not in self.buf:
            left = end - time.time()
            if left <= 0 or not self._fill(left):
                return None
        l, self.buf = self.buf.split(b"\n", 1)
        return l.decode(errors="replace").rstrip("\r")


def split(body, n):
    """A packet's body as n fields: the last one takes the rest (it may hold NULs)."""
    return body.split(b"\0", n - 1)


# Function names (UTF-8 text, no NUL), unique keys (bytes, no NUL) and
# payloads (any bytes) that broke or could break SQL built from literals.
FUNCS = [
    "q'uote",
    "back\\slash",
    "bs\\'q",
    "hx\\x41",
    "semi;colon--",
    "dollar$$body$$",
    "utf8-\u00e9\u00ff\u2603",
    "inj\\',NULL,false,''::bytea,''::bytea,1,now(),NULL,NULL);CREATE TABLE public.pwned_f();--",
    "inj2'); CREATE TABLE public.pwned_g(); --",
    "E'\\\\'",
]
UNIQS = [
    b"u'1",
    b"\\x41",
    b"\\'",
    b"\xff\xfe\x80\x01",
    b"'||(SELECT 1)||'",
    b"\\\\'); CREATE TABLE public.pwned_u(); --",
    b"E'\\x00'",
    bytes(range(1, 256)),
    b"plain",
    b"\\",
]


def payload(i):
    return bytes([0, 0xff, ord("'"), ord("\\"), ord("x")]) + b"\\x6869'\\'" + \
        bytes((i * 7 + k) % 256 for k in range(300)) + b"\0end"


def hostile(port, psql):
    def sql(q):
        return subprocess.run(psql + ["-c", q], capture_output=True, text=True, check=True).stdout

    def kill_backends():
        # Every connection but psql's own: dsjobd's writer and its LISTEN connection.
        return sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                   " WHERE datname = 'dsjob' AND pid <> pg_backend_pid()"
                   " AND backend_type = 'client backend'").strip()

    fails = 0
    n = 0

    def ok(cond, what):
        nonlocal fails, n
        n += 1
        print("%s %d - %s" % ("ok" if cond else "not ok", n, what))
        if not cond:
            fails += 1

    want = {}  # handle -> (func, uniq, data)
    jobs = [(FUNCS[i % len(FUNCS)], UNIQS[i % len(UNIQS)] + b"#%d" % i, payload(i))
            for i in range(2 * len(FUNCS))]
    half = len(jobs) // 2

    def submit(batch, label):
        # One at a time: each is a batch of its own, as an attacker's would be.
        c = Conn(port)
        got = 0
        for f, u, d in batch:
            c.send("SUBMIT_JOB_BG", f.encode(), u, d)
            r = c.recv()
            if r and r[0] == "JOB_CREATED":
                want[r[1].decode()] = (f, u, d)
                got += 1
            else:
                print("#   %s: %r -> %r" % (label, f, r))
        c.s.close()
        ok(got == len(batch), "%s: %d of %d hostile submits answered JOB_CREATED" %
           (label, got, len(batch)))

    submit(jobs[:half], "before the reconnect")
    print("# backends ended:", kill_backends())
    submit(jobs[half:], "after pg_terminate_backend (default standard_conforming_strings off)")
    # A unique key of a live job: the submit coalesces onto it (a SELECT after the commit).
    f, u, d = jobs[half]
    c = Conn(port)
    c.send("SUBMIT_JOB_BG", f.encode(), u, b"other payload")
    r = c.recv()
    h0 = [h for h, v in want.items() if v == (f, u, d)]
    ok(r is not None and r[0] == "JOB_CREATED" and [r[1].decode()] == h0,
       "a submit with a live job's hostile function and unique key coalesces onto it (%r)" % (r,))
    # Function settings: admin retry, for names without spaces.
    for f in FUNCS:
        if " " in f:
            continue
        a = c.admin("retry %s 3 100 2000" % f)
        ok(a == "OK", "retry %r 3 100 2000 -> %r" % (f, a))
    c.s.close()
    print("# backends ended:", kill_backends())
    rows = sql("SELECT handle, encode(convert_to(func, 'UTF8'), 'hex'), encode(uniq, 'hex'),"
               " encode(data, 'hex') FROM dsjob.jobs WHERE state = 0 ORDER BY id")
    got = {}
    for line in rows.splitlines():
        h, fh, uh, dh = line.split("|")
        got[h] = (bytes.fromhex(fh).decode(), bytes.fromhex(uh), bytes.fromhex(dh))
    ok(got == want, "the table holds each job byte for byte (%d rows, %d submitted)" %
       (len(got), len(want)))
    for h in want:
        if got.get(h) != want[h]:
            print("#   %s: want %r\n#   got %r" % (h, want[h], got.get(h)))
            break
    # retry answers OK before its commit (which the backends' end may make
    # go again): wait for the rows, bounded by a long time, not a sleep.
    want_names = sorted(f for f in FUNCS if " " not in f)
    deadline = time.monotonic() + 120
    while True:
        names = sql("SELECT encode(convert_to(name, 'UTF8'), 'hex') FROM dsjob.funcs ORDER BY 1")
        names = sorted(bytes.fromhex(x).decode() for x in names.split())
        if names == want_names or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    ok(names == want_names, "dsjob.funcs holds each hostile name as given (%d)" % len(names))
    # A worker takes them all (the lease op names the functions) and sends
    # a hostile result back; --keep-results keeps it in the row.
    w = Conn(port)
    for f in FUNCS:
        w.send("CAN_DO", f.encode())
    ran = {}
    end = time.time() + 60
    while len(ran) < len(want) and time.time() < end:
        w.send("GRAB_JOB_UNIQ")
        r = w.recv()
        if r is None:
            break
        if r[0] == "NO_JOB":
            w.send("PRE_SLEEP")
            r = w.recv(2)  # NOOP, or try again
            continue
        if r[0] != "JOB_ASSIGN_UNIQ":
            continue
        h, f, u, d = split(r[1], 4)
        ran[h.decode()] = (f.decode(), u, d)
        w.send("WORK_COMPLETE", h, b"res'\\" + d[::-1])
    w.s.close()
    ok(ran == want, "a worker got each job byte for byte (%d of %d)" % (len(ran), len(want)))
    for h in want:
        if ran.get(h) != want[h]:
            print("#   %s: want %r\n#   got %r" % (h, want[h], ran.get(h)))
            break
    end = time.time() + 30
    while time.time() < end:
        kept = sql("SELECT handle, encode(result, 'hex') FROM dsjob.jobs WHERE state = 2")
        kept = dict(l.split("|") for l in kept.splitlines())
        if len(kept) >= len(want):
            break
        time.sleep(0.2)
    ok(all(bytes.fromhex(kept.get(h, "")) == b"res'\\" + v[2][::-1] for h, v in want.items()),
       "each kept result is the worker's bytes (%d rows)" % len(kept))
    pwned = sql("SELECT count(*) FROM pg_class WHERE relname LIKE 'pwned%'").strip()
    ok(pwned == "0", "no injected statement ran (tables named pwned*: %s)" % pwned)
    print("1..%d" % n)
    return 1 if fails else 0


def badrow(port, kind, out=None):
    def print(*args):  # each line into out, when given
        builtins.print(*args, file=out or sys.stdout)
    a, b = Conn(port), Conn(port)
    a.s.sendall(b"".join(pkt("SUBMIT_JOB_BG", "bad_" + kind, "", "job-%d" % i) for i in range(20)))
    time.sleep(0.05)
    if kind == "long-unique":
        b.send("SUBMIT_JOB_BG", "bad_" + kind, bytes(k % 255 + 1 for k in range(3000)), "x")
    elif kind == "epoch":
        b.send("SUBMIT_JOB_EPOCH", "bad_" + kind, "", "99999999999999", "x")
    else:
        b.send("SUBMIT_JOB_BG", "bad_" + kind, "", "poison")
    res = [a.recv() for i in range(20)]
    print("innocent", sum(1 for r in res if r and r[0] == "JOB_CREATED"),
          sum(1 for r in res if not r or r[0] != "JOB_CREATED"))
    for r in res:
        if not r or r[0] != "JOB_CREATED":
            print("# innocent refused:", r)
            break
    r = b.recv()
    print("bad", r[0] if r else None, r[1].replace(b"\0", b" ").decode(errors="replace") if r else "")


def coalesce(port, func, live, tag):
    c = Conn(port)
    keys = ["%s-%d" % (tag, i) for i in range(20)]
    subs = [(k, k) for k in keys[:10]] + [(None, "")] * 5 + [("live", live)] + \
        [(k, k) for k in keys[10:]]
    c.s.sendall(b"".join(pkt("SUBMIT_JOB_BG", func, u, "data-%d" % i)
                         for i, (_, u) in enumerate(subs)))
    res = [c.recv() for _ in subs]
    print("created", sum(1 for r in res if r and r[0] == "JOB_CREATED"))
    for (name, _), r in zip(subs, res):
        if name is None:
            continue
        h = r[1].decode(errors="replace") if r else "none"
        print("live" if name == "live" else "handle " + name, h if r and r[0] == "JOB_CREATED"
              else "%s:%s" % (r[0] if r else None, h))


def submits(port, func, option, n):
    """OPTION_REQ option, then n SUBMIT_JOB_BG of func (payloads j1..jN), all in
    one write on one connection: the server gathers them into its commits
    as it would n clients' at once, where one submit answered before the
    next goes would wait for a commit each."""
    c = Conn(port)
    c.s.sendall(pkt("OPTION_REQ", option) +
                b"".join(pkt("SUBMIT_JOB_BG", func, "", "j%d" % i) for i in range(1, n + 1)))
    r = c.recv(120)
    print("option", r[0] if r else None)
    res = [c.recv(120) for _ in range(n)]
    print("created", sum(1 for r in res if r and r[0] == "JOB_CREATED"))
    for r in res:
        if not r or r[0] != "JOB_CREATED":
            print("# not created:", r)
            break


def pending(port, what, out=None):
    def print(*args):  # each line into out, when given
        builtins.print(*args, file=out or sys.stdout)
    c0 = Conn(port)
    t = "SUBMIT_JOB_LOW_BG" if what == "priority" else "SUBMIT_JOB_BG"
    c0.send(t, "pend_" + what, "", "first")
    r = c0.recv()
    prefix, n = r[1].decode().rsplit(":", 1)
    h2 = "%s:%0*d" % (prefix, len(n), int(n) + 1)  # the same width: dsjobd pads its numbers
    print("h2", h2)
    c = Conn(port)
    c.send(t, "pend_" + what, "", "second")
    # The server has the second submit once it knows its handle (pending).
    for _ in range(200):
        probe = Conn(port)
        seen = not (probe.admin("show job " + h2) or "ERR").startswith("ERR")
        probe.s.close()
        if seen:
            break
        time.sleep(0.05)
    if what == "cancel":
        print("admin", c0.admin("cancel job " + h2))
    else:
        print("admin", c0.admin("priority %s high" % h2))
    r = c.recv()
    print("ack", r[0] if r else None, r[1].decode(errors="replace") if r else "")


def proxy(port_file, upstream, control):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % ls.getsockname()[1])
    os.rename(port_file + ".tmp", port_file)
    pairs, zombies, frozen = {}, [], False
    client_side = set()
    while True:
        if os.path.exists(os.path.join(control, "cut")):
            os.unlink(os.path.join(control, "cut"))
            for s in list(pairs):
                if s in client_side:
                    up = pairs.pop(s)
                    pairs.pop(up, None)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.close()
                    client_side.discard(s)
                    zombies.append(up)
        if os.path.exists(os.path.join(control, "freeze")):
            os.unlink(os.path.join(control, "freeze"))
            frozen = True
        if os.path.exists(os.path.join(control, "thaw")):
            os.unlink(os.path.join(control, "thaw"))
            frozen = False
        r, _, _ = select.select([ls] + ([] if frozen else list(pairs)), [], [], 0.05)
        for s in r:
            if s is ls:
                c, _ = ls.accept()
                u = socket.create_connection(("127.0.0.1", upstream))
                pairs[c] = u
                pairs[u] = c
                client_side.add(c)
                continue
            if s not in pairs:
                continue
            try:
                d = s.recv(65536)
            except OSError:
                d = b""
            p = pairs.get(s)
            if not d:
                pairs.pop(s, None)
                pairs.pop(p, None)
                client_side.discard(s)
                client_side.discard(p)
                s.close()
                p.close()
                continue
            try:
                p.sendall(d)
            except OSError:
                pass


if __name__ == "__main__":
    if sys.argv[1] == "hostile":
        sys.exit(hostile(int(sys.argv[2]), sys.argv[3:]))
    if sys.argv[1] == "badrow":
        # Several kinds: one after the other, each kind's lines prefixed
        # with it (one python for them all).
        if len(sys.argv) == 4:
            badrow(int(sys.argv[2]), sys.argv[3])
        else:
            for kind in sys.argv[3:]:
                buf = io.StringIO()
                badrow(int(sys.argv[2]), kind, buf)
                for line in buf.getvalue().splitlines():
                    print(kind, line)
    if sys.argv[1] == "submits":
        submits(int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
    if sys.argv[1] == "pendings":
        # pending PORT1 cancel and pending PORT2 priority at once, each into
        # its FILE.
        ts = []
        for port, what, path in ((sys.argv[2], "cancel", sys.argv[3]),
                                 (sys.argv[4], "priority", sys.argv[5])):
            f = open(path, "w")
            t = threading.Thread(target=pending, args=(int(port), what, f))
            t.start()
            ts.append((t, f))
        for t, f in ts:
            t.join()
            f.close()
    if sys.argv[1] == "coalesce":
        coalesce(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
    if sys.argv[1] == "pending":
        pending(int(sys.argv[2]), sys.argv[3])
    if sys.argv[1] == "proxy":
        proxy(sys.argv[2], int(sys.argv[3]), sys.argv[4])
