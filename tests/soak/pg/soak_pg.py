#!/usr/bin/env python3
"""make soak-pg: the chaos and pressure cells of the 2026 PostgreSQL job
queue comparison (hardbyte's suite), run against dsjobd --store postgres.

A throwaway PostgreSQL (initdb in a temp dir, 127.0.0.1, a free port) and
two dsjobd sharing it (A and B) serve Gearman producers, workers and
observers (bare Gearman over TCP, one poll loop): producers pipeline
SUBMIT_JOB_BG, workers (on both servers) run every job at once and write
WORK_COMPLETE, an observer asks GET_STATUS of each completion until the
server says the job is gone. Beside them a session calls dsjob.submit() in
transactions it commits or rolls back, and pairs of submits with one
unique key go to both servers at once. Then a cell injects its fault
while the load runs:

  pg-restart      PostgreSQL stopped -m immediate (a crash), down a while, started
  backend-kill    pg_terminate_backend() of every dsjobd session, several times
  conn-exhaust    other sessions take every connection slot, dsjobd's sessions
                  are terminated, the slots are held a while, then given back
  dsjobd-crash    kill -9 of both dsjobd, restarted
  repeated-kills  kill -9 of one dsjobd after another, each restarted
  idle-in-tx      a transaction left idle (xmin held) for minutes under load
  sustained       the load alone, for minutes
  readers         sessions scanning the table without pause under load
  burst           100,000 submits at once, then drained

Each cell ends with the submits stopped and everything drained, the
servers stopped, and the checker (check.py) run on the history and the
database. One table row per cell: acknowledged, lost, run twice, time to
recover (from the fault to the drain rate back at half the rate before
it), jobs/s during the fault and after it. Everything stops by itself
(a watchdog bounds each cell) and only the processes it started.
"""
import argparse
import bisect
import json
import os
import random
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402
from pgwire import PG, PGError  # noqa: E402

now = time.monotonic

CAN_DO, PRE_SLEEP, NOOP, JOB_CREATED, NO_JOB = 1, 4, 6, 8, 10
WORK_COMPLETE, WORK_FAIL, GET_STATUS, SUBMIT_JOB_BG, ERROR, STATUS_RES = 13, 14, 15, 18, 19, 20
WORK_EXCEPTION, GRAB_JOB_UNIQ, JOB_ASSIGN_UNIQ, SUBMIT_JOB_EPOCH = 25, 30, 31, 36
FUNC = b"soak"
WINDOW = 64          # submits in flight per producer
OBS_TRIES = 400      # GET_STATUS asks per completion
NO_PROGRESS_S = 60   # a drain that moves nothing this long has lost jobs
BUCKET = 0.5         # s per throughput bucket
RETRY_BACKOFF = 8    # s: C's --retry-backoff, longer than the crash takes


def pkt(t, *args):
    body = b"\0".join(args)
    return b"\0REQ" + struct.pack(">II", t, len(body)) + body


LIVE = set()  # every dsjobd started and not yet reaped, to stop at any exit


try:  # looked up before any fork: the child only makes the call
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (ImportError, OSError, AttributeError):
    _prctl = None


def _die_with_parent():
    """In the child before exec: SIGKILL when the soak dies (Linux)."""
    if _prctl is not None:
        _prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def stop_all():
    for p in list(LIVE):
        if p.poll() is None:
            p.kill()
            p.wait()
        LIVE.discard(p)


def log(msg):
    print("# " + msg, flush=True)


class Cluster:
    """A PostgreSQL of the soak's own (as tests/lib/pg.sh makes them)."""

    def __init__(self, pg_bin, max_conn):
        self.bin = pg_bin
        self.dir = tempfile.mkdtemp(prefix="dsjob-soakpg.", dir="/tmp")
        os.chmod(self.dir, 0o755)
        self.root = os.getuid() == 0
        if self.root:
            shutil.chown(self.dir, "postgres")
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "postgres.log")
        self.as_owner([pg_bin + "/initdb", "-D", self.data, "-U", "postgres", "-A", "trust",
                       "-E", "UTF8", "--no-sync"], quiet=True)
        with open(os.path.join(self.dir, "extra.conf"), "w") as f:
            f.write("listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n"
                    "shared_buffers = 32MB\nmax_connections = %d\n"
                    "superuser_reserved_connections = 3\nlog_min_messages = warning\n"
                    % (self.dir, max_conn))
        self.as_owner(["sh", "-c", "cat '%s/extra.conf' >> '%s/postgresql.conf'" % (self.dir, self.data)])
        for _ in range(5):
            self.port = free_port()
            self.as_owner(["sh", "-c", "echo 'port = %d' >> '%s/postgresql.conf'" % (self.port, self.data)])
            if self.pg_ctl("start", check=False) == 0:
                break
        else:
            raise RuntimeError("PostgreSQL did not start; see " + self.log)
        self.pid = self.postmaster()

    def as_owner(self, argv, quiet=False, check=True):
        if self.root:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        r = subprocess.run(argv, stdout=subprocess.DEVNULL if quiet else None,
                           stderr=subprocess.DEVNULL if quiet else None)
        if check and r.returncode != 0:
            raise RuntimeError("%s failed (%d)" % (argv, r.returncode))
        return r.returncode

    def pg_ctl(self, *args, check=True):
        return self.as_owner([self.bin + "/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60"]
                             + list(args), quiet=True, check=check)

    def postmaster(self):
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            return int(f.readline())

    def stop_immediate(self):
        self.pg_ctl("-m", "immediate", "stop")
        self.pid = None

    def start(self):
        self.pg_ctl("start")
        self.pid = self.postmaster()

    def connect(self, db="postgres", user="postgres", app="soak-pg"):
        return PG(self.port, user=user, db=db, app=app)

    def cleanup(self, keep):
        if self.pid:
            self.pg_ctl("-m", "fast", "stop", check=False)
            self.pid = None
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Dsjobd:
    def __init__(self, run, name, extra):
        self.run, self.name, self.extra = run, name, extra
        self.proc = None
        self.port = None
        self.log = os.path.join(run.dir, "dsjobd-%s.log" % name)
        self.portfile = self.log + ".port"
        self.exits = 0       # exits nobody asked for (restarted, as a supervisor would)
        self.want = False    # should be running
        self.restart_at = 0.0
        self.lock = threading.Lock()  # the loop polls it while the cell kills it

    def start(self):
        try:
            os.unlink(self.portfile)
        except FileNotFoundError:
            pass
        self.port = None
        self.want = True
        err = open(self.log + ".stderr", "a")
        self.proc = subprocess.Popen(
            [self.run.a.dsjobd, "-L", "127.0.0.1", "-p", "0", "--port-file", self.portfile,
             "-l", self.log, "--store", "postgres", "--pg-dsn", self.run.dsn,
             "--pg-lease", str(self.run.a.lease)] + self.extra,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=_die_with_parent)
        err.close()
        self.run.pids.add(self.proc.pid)
        LIVE.add(self.proc)

    def start_soon(self):
        """From the cell's thread: the loop's thread starts it (a child's
        PR_SET_PDEATHSIG follows the thread that forked it)."""
        with self.lock:
            self.restart_at = 0.0
            self.want = True

    def poll(self):
        """On the loop: the port once it is written; a restart if it exited."""
        with self.lock:
            self._poll()

    def _poll(self):
        if self.proc is None:
            if self.want and now() >= self.restart_at:
                self.start()
            return
        if self.proc.poll() is not None:
            self.run.pids.discard(self.proc.pid)
            self.proc = None
            self.port = None
            if self.want:
                self.exits += 1
                self.restart_at = now() + 1.0
            return
        if self.port is None:
            try:
                with open(self.portfile) as f:
                    p = int(f.read().strip() or 0)
                if p > 0:
                    self.port = p
            except (FileNotFoundError, ValueError):
                pass

    def kill9(self):
        with self.lock:
            self._kill9()

    def _kill9(self):
        self.want = False
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.run.pids.discard(self.proc.pid)
        self.proc = None
        self.port = None

    def stop(self):
        with self.lock:
            self._stop()

    def _stop(self):
        self.want = False
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.run.pids.discard(self.proc.pid)
        self.proc = None
        self.port = None


class Conn:
    def __init__(self, role, server):
        self.role, self.server = role, server
        self.sock = None
        self.gen = 0
        self.inb = b""
        self.out = bytearray()
        self.queued = 0
        self.written = 0
        self.fifo = []   # producer: ids awaiting an answer, in order
        self.fhead = 0
        self.asked = []  # observer: completions asked about, in order
        self.ahead = 0
        self.next_try = 0.0

    def inflight(self):
        return len(self.fifo) - self.fhead


class Job:
    __slots__ = ("id", "kind", "key", "server", "sent", "ack", "handle", "err", "execs", "obs")

    def __init__(self, id, kind, server, key=None):
        self.id, self.kind, self.server, self.key = id, kind, server, key
        self.sent = now()
        self.ack = self.handle = self.err = self.obs = None
        self.execs = []

    def as_dict(self, t0):
        r = lambda t: None if t is None else round(t - t0, 4)  # noqa: E731
        return {"id": self.id, "kind": self.kind, "key": self.key, "server": self.server,
                "sent": r(self.sent), "ack": r(self.ack), "handle": self.handle, "err": self.err,
                "execs": [[r(e[0]), e[1], e[2]] for e in self.execs], "obs": r(self.obs)}


class Run:
    """One cell: its database, its servers, the load, the fault, the check."""

    def __init__(self, a, cluster, cell):
        self.a, self.cluster, self.cell = a, cluster, cell
        self.db = "soak_" + cell.replace("-", "_")
        self.dir = tempfile.mkdtemp(prefix="dsjob-soakpg-%s." % cell, dir=a.tmp)
        self.pids = set()
        self.t0 = now()
        self.jobs = []     # submitted over Gearman, by id (the loop's thread only)
        self.tjobs = []    # submitted by dsjob.submit() (the transactions' thread)
        self.byname = {}   # payload -> job
        self.calls = []    # work for the loop's thread from the cell's
        self.burst_ids = []
        self.exec_times = []  # every execution's time, in order (the loop appends)
        self.txns = []
        self.snapshots = []
        self.phantoms = []
        self.survive = []
        self.faults = []   # (name, start, end)
        self.stopping = False
        self.done = False
        self.burst = 0
        self.backlog = 0   # acknowledged bg jobs not yet run
        self.obs_wait = []
        self.notes = []
        self.bad_packets = 0
        self.errors = 0
        ctl = cluster.connect()
        ctl.query("DROP DATABASE IF EXISTS %s" % self.db)
        ctl.query("DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dsjob')"
                  " THEN CREATE ROLE dsjob LOGIN; END IF; END$$")
        ctl.query("CREATE DATABASE %s OWNER dsjob" % self.db)
        ctl.close()
        self.dsn = ("host=127.0.0.1 port=%d dbname=%s user=dsjob connect_timeout=5"
                    % (cluster.port, self.db))
        # The crash cells check that a retry schedule, a dead set entry and a
        # kept result survive: every server of the cluster then keeps them
        # (a server without --max-dead or --keep-results that takes over a
        # dead server's rows drops them). With --keep-results an observed
        # completion is GET_STATUS known 1, running 0 (kept), not known 0.
        # repeated-kills runs the defaults, so that an observed completion
        # there is GET_STATUS known 0.
        self.keeps = cell == "dsjobd-crash"
        extra = (["--retry-on", "fail", "--retry-backoff", str(RETRY_BACKOFF), "--max-dead", "1000",
                  "--keep-results", "600"] if self.keeps else [])
        self.servers = [Dsjobd(self, "A", extra), Dsjobd(self, "B", extra)]
        self.conns = []
        for s in self.servers:
            for _ in range(a.producers):
                self.conns.append(Conn("prod", s))
            for _ in range(a.workers):
                self.conns.append(Conn("work", s))
            self.conns.append(Conn("obs", s))
            self.conns.append(Conn("probe", s))
        if self.keeps:
            # C serves the survival checks' functions, which only its own
            # worker does (A and B never lease them)
            c = Dsjobd(self, "C", extra)
            self.servers.append(c)
            self.conns.append(Conn("swork", c))
            self.conns.append(Conn("sprod", c))
        self.sel = selectors.DefaultSelector()
        self.next_probe = 0.0
        self.nkeys = 0

    # ---- history ----

    def new_job(self, kind, server, payload, key=None):
        j = Job(len(self.jobs), kind, server, key)
        self.jobs.append(j)
        self.byname[payload] = j
        return j

    # ---- the loop ----

    def conn_open(self, c):
        s = c.server
        if s.port is None or now() < c.next_try:
            return
        try:
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=1)
        except OSError:
            c.next_try = now() + 0.1
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        c.sock, c.gen, c.inb, c.out, c.queued, c.written = sock, c.gen + 1, b"", bytearray(), 0, 0
        c.fifo, c.fhead, c.asked, c.ahead = [], 0, [], 0
        self.sel.register(sock, selectors.EVENT_READ, c)
        if c.role == "work":
            self.send(c, pkt(CAN_DO, FUNC) + pkt(GRAB_JOB_UNIQ))
        elif c.role == "swork":
            self.send(c, pkt(CAN_DO, FUNC + b"_rt") + pkt(CAN_DO, FUNC + b"_dd")
                      + pkt(CAN_DO, FUNC + b"_kp") + pkt(GRAB_JOB_UNIQ))

    def conn_close(self, c):
        if c.sock is None:
            return
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()
        c.sock = None
        c.next_try = now() + 0.05
        # submits never answered: neither acknowledged nor refused
        c.fifo, c.fhead, c.asked, c.ahead = [], 0, [], 0

    def send(self, c, data):
        c.out += data
        c.queued += len(data)
        self.flush(c)

    def flush(self, c):
        if c.sock is None or not c.out:
            return
        try:
            n = c.sock.send(c.out)
        except BlockingIOError:
            n = 0
        except OSError:
            self.conn_close(c)
            return
        del c.out[:n]
        c.written += n
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.out else 0)
        try:
            self.sel.modify(c.sock, want, c)
        except (KeyError, ValueError):
            pass

    def produce(self, c):
        n = 0
        buf = []
        first = None
        if self.burst > 0:
            k = min(self.burst, 2000)
            self.burst -= k
            first = len(self.jobs)
        else:
            room = self.a.max_backlog - self.backlog - sum(x.inflight() for x in self.conns if x.role == "prod")
            k = min(WINDOW - c.inflight(), room) if not self.stopping else 0
        while n < k:
            payload = b"j%d" % len(self.jobs)
            j = self.new_job("bg", c.server.name, payload)
            buf.append(pkt(SUBMIT_JOB_BG, FUNC, b"", payload))
            c.fifo.append(j.id)
            n += 1
        if buf:
            self.send(c, b"".join(buf))
        if first is not None and n:
            self.burst_ids.extend(range(first, first + n))  # after the jobs exist

    def probe(self):
        """A unique key submitted to both servers at once, to run 3 s from now."""
        ps = [c for c in self.conns if c.role == "probe" and c.sock is not None]
        if len(ps) < 2 or self.stopping:
            return
        self.nkeys += 1
        key = b"u%d" % self.nkeys
        when = b"%d" % (int(time.time()) + 3)
        for c in ps:
            j = Job(len(self.jobs), "uq", c.server.name, key.decode())
            self.jobs.append(j)
            self.byname.setdefault(key, [])
            self.byname[key].append(j)
            c.fifo.append(j.id)
            self.send(c, pkt(SUBMIT_JOB_EPOCH, FUNC, key, when, key))

    def on_packet(self, c, t, args):
        if c.role in ("prod", "probe", "sprod"):
            if t not in (JOB_CREATED, ERROR) or c.fhead >= len(c.fifo):
                self.errors += 1
                return
            j = self.jobs[c.fifo[c.fhead]]
            c.fhead += 1
            if t == JOB_CREATED:
                j.ack, j.handle = now(), args[0].decode()
                if j.kind == "bg" and not j.execs:
                    self.backlog += 1
            else:
                j.err = now()
                self.errors += 1
                if self.errors <= 5:
                    log("%s: ERROR to a submit on %s: %s" % (self.cell, c.server.name, b" ".join(args)[:120]))
        elif c.role in ("work", "swork"):
            if t == JOB_ASSIGN_UNIQ:
                self.on_job(c, args)
            elif t == NO_JOB:
                self.send(c, pkt(PRE_SLEEP))
            elif t == NOOP:
                self.send(c, pkt(GRAB_JOB_UNIQ))
        elif c.role == "obs":
            if t != STATUS_RES or c.ahead >= len(c.asked):
                self.errors += 1
                return
            o = c.asked[c.ahead]
            c.ahead += 1
            j = o[0]
            if (args[1:3] == [b"1", b"0"]) if self.keeps else (len(args) >= 2 and args[1] == b"0"):
                if j.obs is None:
                    j.obs = now()
            elif o[5] < OBS_TRIES:
                self.obs_wait.append((j, o[1], o[2], o[3], o[4], o[5], now() + 0.005))

    def on_job(self, c, args):
        handle, func, uniq, data = args[0], args[1], args[2], b"\0".join(args[3:])
        t = now()
        j = self.byname.get(data)
        if isinstance(j, list):   # a unique probe: the submit whose handle this is
            js = j
            j = next((x for x in js if x.handle == handle.decode()), js[0])
        if j is None or (j.kind != "uq" and func != FUNC + {"bg": b"", "tx": b"", "rt": b"_rt", "dd": b"_dd", "kp": b"_kp"}[j.kind]):
            self.phantoms.append("%s ran %r (%s) on %s" % (func, data[:40], handle, c.server.name))
            self.send(c, pkt(WORK_COMPLETE, handle, b"") + pkt(GRAB_JOB_UNIQ))
            return
        j.execs.append((t, c.server.name, handle.decode()))
        self.exec_times.append(t)
        if j.kind == "bg" and len(j.execs) == 1 and j.ack is not None:
            self.backlog -= 1
        if j.kind == "rt" and len(j.execs) == 1:
            out = pkt(WORK_FAIL, handle)            # retried after the backoff
        elif j.kind == "dd":
            out = pkt(WORK_EXCEPTION, handle, b"dead " + data)   # --retry-on fail: dead at once
        elif j.kind == "kp":
            out = pkt(WORK_COMPLETE, handle, b"kept " + data)
        else:
            out = pkt(WORK_COMPLETE, handle, b"")
        self.send(c, out)
        if j.kind in ("bg", "tx", "uq"):
            self.obs_wait.append((j, handle, c, c.gen, c.queued, 0, 0.0))
        self.send(c, pkt(GRAB_JOB_UNIQ))

    def observe(self):
        keep = []
        tnow = now()
        obsc = {c.server: c for c in self.conns if c.role == "obs"}
        for o in self.obs_wait:
            j, handle, w, gen, off, tries, due = o
            if w.gen != gen:
                continue   # that worker's connection died: its WORK_COMPLETE may not have gone
            oc = obsc[w.server]
            if oc.sock is None or w.written < off or due > tnow:
                keep.append(o)
                continue
            oc.asked.append((j, handle, w, gen, off, tries + 1))
            self.send(oc, pkt(GET_STATUS, handle))
        self.obs_wait = keep

    def read(self, c):
        try:
            d = c.sock.recv(1 << 18)
        except BlockingIOError:
            return
        except OSError:
            d = b""
        if not d:
            self.conn_close(c)
            return
        buf = c.inb + d
        off = 0
        while len(buf) - off >= 12:
            t, n = struct.unpack(">II", buf[off + 4:off + 12])
            if len(buf) - off < 12 + n:
                break
            if buf[off:off + 4] != b"\0RES":
                self.bad_packets += 1
                self.conn_close(c)
                return
            body = buf[off + 12:off + 12 + n]
            off += 12 + n
            self.on_packet(c, t, body.split(b"\0") if body else [])
            if c.sock is None:
                return
        c.inb = buf[off:]

    def turn(self):
        while self.calls:
            self.calls.pop(0)()
        for s in self.servers:
            s.poll()
        for c in self.conns:
            if c.sock is None:
                self.conn_open(c)
        for c in self.conns:
            if c.role == "prod" and c.sock is not None:
                self.produce(c)
        if now() >= self.next_probe:
            self.next_probe = now() + 2.0
            self.probe()
        self.observe()
        for key, ev in self.sel.select(0.01):
            c = key.data
            if ev & selectors.EVENT_WRITE:
                self.flush(c)
            if c.sock is not None and ev & selectors.EVENT_READ:
                self.read(c)

    # ---- side sessions ----

    def pg(self, app="soak-pg", user="postgres"):
        return self.cluster.connect(db=self.db, user=user, app=app)

    def txn_actor(self):
        """dsjob.submit() in transactions, committed or rolled back at random."""
        pg = None
        k = 0
        rng = random.Random(self.a.seed + 1)
        while not self.stopping:
            try:
                if pg is None:
                    pg = self.pg(app="soak-sql", user="dsjob")
                k += 1
                payload = "t%d" % k
                j = Job(k, "tx", "sql")
                self.tjobs.append(j)
                self.byname[payload.encode()] = j
                pg.query("BEGIN")
                h = pg.execute("SELECT dsjob.submit($1, $2::bytea)", [FUNC.decode(), payload])[0][0]
                commit = rng.random() < 0.75
                rec = {"id": k, "outcome": "unknown", "handle": h, "t": round(now() - self.t0, 4)}
                self.txns.append(rec)
                try:
                    pg.query("COMMIT" if commit else "ROLLBACK")
                    rec["outcome"] = "commit" if commit else "rollback"
                except PGError:
                    # an error to a COMMIT (a FATAL at a shutdown) may come
                    # after the commit record was flushed: unknown
                    if not commit:
                        rec["outcome"] = "rollback"
                    pg = None
                    continue
                except (OSError, EOFError):
                    if not commit:
                        rec["outcome"] = "rollback"
                    raise
            except PGError:
                # Before this transaction's record (the connect, its BEGIN or
                # its submit): the last record stays as its COMMIT left it.
                # A connect refused while PostgreSQL starts again comes here
                # with k still the last transaction's, whose COMMIT may have
                # been flushed before its session died: unknown, not rolled
                # back (a rolled-back one counts as run if it ran).
                try:
                    pg.query("ROLLBACK")
                except Exception:
                    pg = None
            except (OSError, EOFError):
                # the session died before its COMMIT went: the transaction aborted
                if not self.txns or self.txns[-1]["id"] != k:
                    self.txns.append({"id": k, "outcome": "rollback", "handle": None,
                                      "t": round(now() - self.t0, 4)})
                pg = None
                time.sleep(0.2)
            time.sleep(0.02)
        if pg is not None:
            pg.close()

    def snapshot(self, why):
        """The live rows now: an acknowledged job not yet handed out must be one."""
        for _ in range(100):
            try:
                pg = self.pg()
                break
            except (OSError, EOFError, PGError):
                time.sleep(0.2)
        else:
            self.notes.append("no snapshot at " + why)
            return
        t0 = now()
        rows = pg.query("SELECT handle FROM dsjob.jobs WHERE state = 0 AND func = 'soak'")
        t1 = now()
        pg.close()
        self.snapshots.append({"why": why, "t0": round(t0 - self.t0, 4), "t1": round(t1 - self.t0, 4),
                               "handles": [r[0] for r in rows]})

    def live_rows(self):
        try:
            pg = self.pg()
            n = pg.query("SELECT count(*) FROM dsjob.jobs WHERE state = 0 AND func = 'soak'")[0][0]
            pg.close()
            return int(n)
        except (OSError, EOFError, PGError):
            return -1

    def dsjobd_backends(self, pg):
        return [int(r[0]) for r in pg.query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'dsjobd' AND datname = current_database()")]

    # ---- phases ----

    def wait_until(self, cond, secs):
        end = now() + secs
        while now() < end and not cond():
            time.sleep(0.05)
        return cond()

    def wait_moving(self, cond):
        """Until cond holds, or nothing has run for NO_PROGRESS_S."""
        last, since = -1, now()
        while not cond():
            n = len(self.exec_times)
            if n != last:
                last, since = n, now()
            elif now() - since > NO_PROGRESS_S:
                return False
            time.sleep(0.5)
        return True

    def serving(self):
        return all(s.port is not None for s in self.servers) and all(
            c.sock is not None for c in self.conns if c.role == "work")

    def execs_between(self, t0, t1):
        et = self.exec_times
        return bisect.bisect_left(et, t1) - bisect.bisect_left(et, t0)

    def rate_series(self, t0, t1):
        nb = max(1, int((t1 - t0) / BUCKET + 0.999))
        b = [0] * nb
        for t in self.exec_times[bisect.bisect_left(self.exec_times, t0):]:
            if t < t1:
                b[min(nb - 1, int((t - t0) / BUCKET))] += 1
        return b

    def fault(self, name, fn):
        t0 = now()
        fn()
        t1 = now()
        self.faults.append((name, t0, t1))
        return t0, t1


# ---- the cells ----

def cell_pg_restart(r, a):
    def f():
        r.cluster.stop_immediate()
        time.sleep(a.down)
        r.cluster.start()
        r.snapshot("after the PostgreSQL crash")
    return [r.fault("pg-restart", f)]


def cell_backend_kill(r, a):
    out = []
    ctl = r.pg()
    for i in range(a.backend_kills):
        def f():
            pids = r.dsjobd_backends(ctl)
            for p in pids:
                ctl.query("SELECT pg_terminate_backend(%d)" % p)
            r.notes.append("kill %d: %d dsjobd sessions" % (i + 1, len(pids)))
        out.append(r.fault("backend-kill", f))
        time.sleep(a.kill_gap)
    r.snapshot("after the backend kills")
    ctl.close()
    return out


def cell_conn_exhaust(r, a):
    ctl = r.pg()
    held = []
    stop = threading.Event()

    def fill():
        while not stop.is_set():
            try:
                held.append(r.cluster.connect(app="soak-filler"))
            except (PGError, OSError, EOFError):
                time.sleep(0.02)

    def f():
        while True:
            try:
                held.append(r.cluster.connect(app="soak-filler"))
            except PGError as e:
                if e.code != "53300":
                    raise
                break
        th = threading.Thread(target=fill, daemon=True)
        th.start()
        for p in r.dsjobd_backends(ctl):
            ctl.query("SELECT pg_terminate_backend(%d)" % p)
        t_end = now() + a.exhaust
        mx = 0
        while now() < t_end:
            mx = max(mx, len(r.dsjobd_backends(ctl)))
            time.sleep(0.2)
        stop.set()
        th.join()
        r.notes.append("%d other sessions held every slot for %.0f s; dsjobd sessions during it at most %d"
                       % (len(held), a.exhaust, mx))
        for s in held:
            s.close()
    out = [r.fault("conn-exhaust", f)]
    r.snapshot("after the exhaustion")
    ctl.close()
    return out


def survive_setup(r):
    """Jobs that fail once (retry schedule), die (dead set) and keep a result on A."""
    def submit():
        c = next(c for c in r.conns if c.role == "sprod")
        for kind in ("rt", "dd", "kp"):
            for i in range(3):
                payload = b"%s%d" % (kind.encode(), i)
                j = r.new_job(kind, "C", payload)
                c.fifo.append(j.id)
                r.send(c, pkt(SUBMIT_JOB_BG, FUNC + b"_" + kind.encode(), b"", payload))
    r.calls.append(submit)


def survive_read(r):
    pg = r.pg()
    rows = {}
    for h, st, att, ra, res in pg.query(
            "SELECT handle, state, attempts, extract(epoch from run_at)::bigint, encode(coalesce(result, ''), 'escape')"
            " FROM dsjob.jobs WHERE func IN ('soak_rt', 'soak_dd', 'soak_kp')"):
        rows[h] = (int(st), int(att), int(ra), res)
    pg.close()
    return rows


def cell_dsjobd_crash(r, a, kills=1, both=True):
    out = []
    if r.keeps:
        survive_setup(r)
        # wait until the retry schedule, the dead set and the kept results are rows
        ok = r.wait_until(lambda: len([v for v in survive_read(r).values() if v[0] != 0 or v[1] > 0]) >= 9, 30)
        before = survive_read(r)
        if not ok:
            r.notes.append("the survival rows did not all commit: %s" % before)
    for k in range(kills):
        targets = r.servers if both else [r.servers[k % 2]]

        def f():
            for s in targets:
                s.kill9()
            r.snapshot("after kill -9")
            time.sleep(a.down if both else 0.2)
            for s in targets:
                s.start_soon()
            r.wait_until(lambda: all(s.port is not None for s in targets), 30)
        out.append(r.fault("dsjobd-crash", f))
        if kills > 1:
            r.wait_until(r.serving, 30)
            time.sleep(a.kill_gap)
    if not r.keeps:
        return out
    after = survive_read(r)
    for h, v in before.items():
        st, att, ra, res = v
        kind = {1: "dead set entry", 0: "retry schedule"}.get(st, "kept result")
        w = after.get(h)
        if st == 0 and att >= 1:
            # a retry: still there with its schedule, or run again no earlier than it
            j = next((j for j in r.jobs if j.handle == h), None)
            early = [e for e in (j.execs[1:] if j else []) if time.time() - (now() - e[0]) < ra - 1]
            ok = (w is not None and w[1] >= att) or (w is None and j is not None and len(j.execs) >= 2)
            why = "row %s -> %s, runs %s" % (v, w, len(j.execs) if j else "?")
            if early:
                ok, why = False, "ran again %.1f s before its run-at" % (ra - (time.time() - (now() - early[0][0])))
        else:
            ok = w is not None and w[0] == st and w[3] == res
            why = "row %s -> %s" % (v, w)
        r.survive.append({"what": kind, "handle": h, "ok": ok, "why": why})
    # and the server says so: the dead set and a kept result through the admin protocol
    # (by whichever server took the dead server's rows over)
    r.wait_until(lambda: all(s.port is not None for s in r.servers), 30)
    txt = "".join(admin(s.port, "show dead soak_dd") for s in r.servers if s.port)
    for h, v in before.items():
        if v[0] == 1:
            r.survive.append({"what": "show dead on some server lists it", "handle": h, "ok": h in txt,
                              "why": txt[:200]})
    return out


def admin(port, cmd):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(cmd.encode() + b"\n")
        buf = b""
        end = now() + 5
        while now() < end and not (buf.endswith(b"\n.\n") or buf == b".\n" or buf.startswith(b"ERR")):
            d = s.recv(65536)
            if not d:
                break
            buf += d
        s.close()
        return buf.decode(errors="replace")
    except OSError as e:
        return "admin: %s" % e


def cell_repeated_kills(r, a):
    return cell_dsjobd_crash(r, a, kills=a.repeated, both=False)


def cell_idle_in_tx(r, a):
    def f():
        pg = r.pg(app="soak-idle")
        xid = pg.query("BEGIN; SELECT txid_current()")[0][0]
        time.sleep(a.idle)
        ctl = r.pg()
        st = ctl.query("SELECT n_dead_tup, n_live_tup, pg_total_relation_size('dsjob.jobs')"
                       " FROM pg_stat_user_tables WHERE relid = 'dsjob.jobs'::regclass")
        ctl.close()
        pg.query("ROLLBACK")
        pg.close()
        if st:
            r.notes.append("xmin %s held %.0f s: dead tuples %s, live %s, table %d kB at its end"
                           % (xid, a.idle, st[0][0], st[0][1], int(st[0][2]) // 1024))
    return [r.fault("idle-in-tx", f)]


def cell_sustained(r, a):
    return [r.fault("sustained", lambda: time.sleep(a.sustained))]


def cell_readers(r, a):
    stop = threading.Event()
    scans = [0]

    def reader():
        pg = r.pg(app="soak-reader")
        while not stop.is_set():
            pg.query("SELECT count(*), sum(length(data)) FROM dsjob.jobs")
            pg.query("SELECT id, handle, state FROM dsjob.jobs WHERE state = 0 ORDER BY id DESC LIMIT 200")
            scans[0] += 2
        pg.close()

    def f():
        ths = [threading.Thread(target=reader, daemon=True) for _ in range(a.readers)]
        for t in ths:
            t.start()
        time.sleep(a.reader_secs)
        stop.set()
        for t in ths:
            t.join()
        r.notes.append("%d readers, %d scans" % (a.readers, scans[0]))
    return [r.fault("readers", f)]


def cell_burst(r, a):
    def f():
        t0 = now()
        r.burst = a.burst
        r.wait_until(lambda: r.burst == 0, 60)
        ids = r.burst_ids
        at = [0]

        def answered():  # resumes where the last look stopped
            while at[0] < len(ids) and (r.jobs[ids[at[0]]].ack or r.jobs[ids[at[0]]].err):
                at[0] += 1
            return len(ids) >= a.burst and at[0] == len(ids)
        r.wait_until(answered, 600)
        acked = sum(1 for i in ids if r.jobs[i].ack)
        r.notes.append("%d of %d burst submits acknowledged in %.1f s (%.0f/s)"
                       % (acked, a.burst, now() - t0, acked / max(0.001, now() - t0)))
        r.snapshot("after the burst's acknowledgements")
    out = [r.fault("burst", f)]
    t0 = now()
    ids = r.burst_ids
    # bounded by progress, not by the clock: a loaded machine drains slowly
    at = [0]

    def drained():  # the first burst job not yet run, from where the last look stopped
        while at[0] < len(ids) and (r.jobs[ids[at[0]]].execs or not r.jobs[ids[at[0]]].ack):
            at[0] += 1
        return at[0] == len(ids)
    r.wait_moving(drained)
    r.notes.append("the burst drained %.1f s after its last acknowledgement (%.0f jobs/s with the load beside it)"
                   % (now() - t0, len(ids) / max(0.001, now() - t0)))
    return out


CELLS = {
    "pg-restart": (cell_pg_restart, True),
    "backend-kill": (cell_backend_kill, True),
    "conn-exhaust": (cell_conn_exhaust, True),
    "dsjobd-crash": (cell_dsjobd_crash, True),
    "repeated-kills": (cell_repeated_kills, True),
    "idle-in-tx": (cell_idle_in_tx, False),
    "sustained": (cell_sustained, False),
    "readers": (cell_readers, False),
    "burst": (cell_burst, False),
}


def run_cell(a, cluster, cell):
    r = Run(a, cluster, cell)
    fn, chaos = CELLS[cell]
    for s in r.servers:
        s.start()
    result = {"cell": cell}
    err = []
    done = threading.Event()

    def script():
        try:
            if not r.wait_until(r.serving, 60):
                raise RuntimeError("the servers did not serve within 60 s")
            threading.Thread(target=r.txn_actor, daemon=True).start()
            time.sleep(a.warm)
            tw = now()
            base = r.execs_between(tw - a.warm + 1, tw) / max(0.5, a.warm - 1)
            faults = fn(r, a)
            t_end = faults[-1][1] if faults else now()
            r.wait_until(r.serving, 60)
            if chaos:
                # the after-phase begins once the rate is back at half the
                # rate before (bounded), so that it measures after recovery
                r.wait_until(lambda: r.execs_between(now() - 1, now()) >= 0.5 * base, 120)
            time.sleep(a.after)
            t_after = now()
            r.stopping = True
            # drain: every acknowledged job run, the table empty; bounded by progress
            last, since = -1, now()
            while True:
                owed = r.backlog  # acknowledged bg jobs not yet run, kept by the loop
                txo = {t["id"] for t in r.txns if t["outcome"] == "commit"}
                owed += sum(1 for j in r.tjobs if j.id in txo and not j.execs)
                owed += sum(1 for j in r.jobs if j.kind == "rt" and len(j.execs) < 2)
                live = r.live_rows() if owed == 0 else -1
                if owed == 0 and live == 0 and not r.obs_wait:
                    break
                prog = (owed, live, len(r.exec_times))
                if prog != last:
                    last, since = prog, now()
                elif now() - since > NO_PROGRESS_S:
                    r.notes.append("drain stopped moving: %d owed, %d live rows" % (owed, live))
                    break
                time.sleep(0.5)
            t_drained = now()
            result.update(base=base, faults=faults, t_end=t_end, t_after=t_after, t_drained=t_drained)
        except Exception as e:  # noqa: BLE001
            import traceback
            err.append(traceback.format_exc())
            r.stopping = True
        finally:
            done.set()

    th = threading.Thread(target=script, daemon=True)
    th.start()
    deadline = now() + a.cell_bound
    while not done.is_set() and now() < deadline:
        r.turn()
    if not done.is_set():
        err.append("watchdog: the cell did not end within %d s" % a.cell_bound)
    # a few more turns for the last observations
    end = now() + 2
    while now() < end and r.obs_wait:
        r.turn()
    r.stopping = True
    time.sleep(0.1)
    final_live = []
    try:
        pg = r.pg()
        final_live = [x[0] for x in pg.query(
            "SELECT handle FROM dsjob.jobs WHERE state = 0 AND func = 'soak'")]
        pg.close()
    except (OSError, EOFError, PGError) as e:
        err.append("final read: %s" % e)
    for c in r.conns:
        r.conn_close(c)
    for s in r.servers:
        s.stop()
    hist = {"cell": cell, "jobs": [j.as_dict(r.t0) for j in r.jobs + r.tjobs], "txns": r.txns,
            "snapshots": r.snapshots, "phantoms": r.phantoms, "survive": r.survive,
            "final_live": final_live, "notes": r.notes,
            "faults": [(n, round(x - r.t0, 3), round(y - r.t0, 3)) for n, x, y in r.faults]}
    with open(os.path.join(r.dir, "history.json"), "w") as f:
        json.dump(hist, f)
    res, counts = check.check(hist)
    # figures
    if "faults" in result:
        f0 = result["faults"][0][0]
        f1 = result["t_end"]
        base = result["base"]
        during = r.execs_between(f0, f1) / max(0.001, f1 - f0)
        rec = None
        fl = result["faults"][-1][0]
        if chaos:
            series = r.rate_series(f1, result["t_drained"])
            for i in range(len(series) - 1):
                if (series[i] + series[i + 1]) / (2 * BUCKET) >= 0.5 * base:
                    rec = f1 + i * BUCKET - fl
                    break
        t_rec = fl + rec if rec is not None else f1
        after = r.execs_between(t_rec, result["t_after"]) / max(0.001, result["t_after"] - t_rec)
        result.update(during=during, after=after, recover=rec)
    result.update(counts=counts, res=res, err=err, notes=r.notes, dir=r.dir,
                  exits=sum(s.exits for s in r.servers))
    ok = not err and all(x[1] for x in res)
    result["ok"] = ok
    if ok and not a.keep:
        shutil.rmtree(r.dir, ignore_errors=True)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--short", action="store_true", help="the CI form: shorter faults, a 10,000 burst")
    ap.add_argument("--dsjobd", default=os.environ.get("DSJOBD", "server/dsjobd"))
    ap.add_argument("--pg-bin", default=os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
    ap.add_argument("--tmp", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--producers", type=int, default=2, help="per server")
    ap.add_argument("--workers", type=int, default=4, help="per server")
    ap.add_argument("--max-backlog", type=int, default=3000)
    ap.add_argument("--lease", type=int, default=6, help="dsjobd --pg-lease")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--burst", type=int, help="submits of the burst (default 100,000, --short 10,000)")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    full = not a.short
    a.warm = 5 if full else 3
    a.after = 10 if full else 4
    a.down = 5 if full else 2
    a.backend_kills = 5 if full else 3
    a.kill_gap = 2 if full else 1
    a.exhaust = 10 if full else 4
    a.repeated = 20 if full else 5
    a.idle = 180 if full else 15
    a.sustained = 120 if full else 10
    a.readers = 4
    a.reader_secs = 30 if full else 8
    a.burst = a.burst or (100000 if full else 10000)
    # the last resort only: every wait is bounded by progress (NO_PROGRESS_S)
    a.cell_bound = 7200 if full else 900
    if not os.access(a.dsjobd, os.X_OK):
        print("soak-pg: %s is not executable" % a.dsjobd, file=sys.stderr)
        return 2
    if not os.access(a.pg_bin + "/initdb", os.X_OK):
        print("1..0 # SKIP no PostgreSQL in %s" % a.pg_bin)
        return 0
    cells = [c for c in a.cells.split(",") if c]
    for c in cells:
        if c not in CELLS:
            print("soak-pg: unknown cell %s (%s)" % (c, ", ".join(CELLS)), file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    cluster = Cluster(a.pg_bin, 40)
    log("soak-pg: PostgreSQL on 127.0.0.1:%d (%s), cells %s, seed %d%s, load %s"
        % (cluster.port, a.pg_bin, ",".join(cells), a.seed, " (short)" if a.short else "",
           open("/proc/loadavg").read().split()[:3]))
    results = []
    t0 = now()
    try:
        for c in cells:
            log("%s ..." % c)
            res = run_cell(a, cluster, c)
            results.append(res)
            for name, ok, detail in res["res"]:
                log("%s: %s %s: %s" % (c, "ok" if ok else "FAILED", name, detail))
            for n in res["notes"]:
                log("%s: %s" % (c, n))
            log("%s: %s" % (c, ", ".join("%s %s" % kv for kv in res["counts"].items())))
            for e in res["err"]:
                log("%s: error: %s" % (c, e.strip().replace("\n", "\n# ")))
            if not res["ok"]:
                log("%s: kept %s" % (c, res["dir"]))
    finally:
        stop_all()
        cluster.cleanup(a.keep or any(not x["ok"] for x in results))
    fmt = "%-15s %12s %5s %9s %11s %14s %13s  %s"
    print()
    print(fmt % ("cell", "acknowledged", "lost", "run twice", "recover s", "jobs/s during", "jobs/s after",
                 "guarantees"))
    rc = 0
    for x in results:
        c = x["counts"]
        failed = [n for n, ok, _ in x["res"] if not ok]
        print(fmt % (x["cell"], c["acknowledged"], c["lost"] + c["txn lost"], c["run twice"],
                     "-" if x.get("recover") is None else "%.1f" % x["recover"],
                     "%.0f" % x["during"] if "during" in x else "-",
                     "%.0f" % x["after"] if "after" in x else "-",
                     "ok" if x["ok"] else "FAILED: " + ", ".join(failed + (["error"] if x["err"] else []))))
        if not x["ok"]:
            rc = 1
    log("total %.0f s, load %s" % (now() - t0, open("/proc/loadavg").read().split()[:3]))
    return rc


if __name__ == "__main__":
    sys.exit(main())
