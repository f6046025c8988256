#!/usr/bin/env python3
"""make soak-sched: a schedule every second on three dsjobd sharing one
PostgreSQL, with kill -9 and restarts, for ten minutes (--short: one).

Each server is started with the same --schedule line. Every tick is
claimed in dsjob.schedules before its job is submitted, so whichever
servers are up the tick's job (unique key sched:NAME:TICK) is made once.
A Gearman worker on each server records every job it is given (unique
key, handle, server, time) and completes it at once. Meanwhile the soak
kills one server, or two, with SIGKILL or stops one with SIGTERM, and
starts it again a few seconds later; at least one server is up at every
moment after the first.

The check, after the run:
  fired once     no tick's job was made twice: one handle per tick (a
                 handle seen twice is an at-least-once re-run after a
                 crash, not a second firing, and is counted apart);
  none missed    every tick in a second during which some server was up
                 (serving, its schedules read) has a job.
Everything stops by itself (a watchdog bounds the run), and only the
processes it started, by PID.
"""
import argparse
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from soak_pg import Cluster, log, stop_all, LIVE, _die_with_parent  # noqa: E402

CAN_DO, PRE_SLEEP, NOOP, NO_JOB = 1, 4, 6, 10
WORK_COMPLETE, GRAB_JOB_UNIQ, JOB_ASSIGN_UNIQ = 13, 30, 31
FUNC = b"soak.tick"
NAME = "soaktick"
UP_AFTER_S = 1.5  # a started server fires from its next tick; this much slack for reading schedules


def pkt(t, *args):
    body = b"\0".join(args)
    return b"\0REQ" + struct.pack(">II", t, len(body)) + body


class Server:
    """One dsjobd, its up intervals (monotonic seconds) as the soak saw them."""

    def __init__(self, a, run_dir, dsn, name):
        self.a, self.name = a, name
        self.log = os.path.join(run_dir, "dsjobd-%s.log" % name)
        self.portfile = self.log + ".port"
        self.dsn = dsn
        self.proc = None
        self.port = None
        self.ups = []        # [start, end] of each time it served; end None while up
        self.lock = threading.Lock()

    def start(self):
        try:
            os.unlink(self.portfile)
        except FileNotFoundError:
            pass
        err = open(self.log + ".stderr", "a")
        self.proc = subprocess.Popen(
            [self.a.dsjobd, "-L", "127.0.0.1", "-p", "0", "--port-file", self.portfile,
             "-l", self.log, "--store", "postgres", "--pg-dsn", self.dsn,
             "--pg-lease", "5", "--pg-poll-ms", "500", "--schedule-refresh", "1",
             "--schedule", "%s '* * * * * *' %s" % (NAME, FUNC.decode())],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=_die_with_parent)
        err.close()
        LIVE.add(self.proc)
        t0, bound = time.monotonic(), time.monotonic() + 120
        while time.monotonic() < bound:  # bounded: a server that never serves fails the run
            if self.proc.poll() is not None:
                raise RuntimeError("dsjobd %s exited at start (see %s)" % (self.name, self.log))
            try:
                with open(self.portfile) as f:
                    p = int(f.read().strip() or 0)
                if p > 0:
                    with self.lock:
                        self.port = p
                    self.ups.append([time.monotonic(), None])
                    return time.monotonic() - t0
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.02)
        raise RuntimeError("dsjobd %s wrote no port in 120 s" % self.name)

    def up(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig):
        if self.proc is None:
            return
        t = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        LIVE.discard(self.proc)
        self.proc = None
        with self.lock:
            self.port = None
        # Up until the signal: a tick due before it was this server's to fire.
        if self.ups and self.ups[-1][1] is None:
            self.ups[-1][1] = t

    def get_port(self):
        with self.lock:
            return self.port


class Worker(threading.Thread):
    """A Gearman worker on one server, reconnecting when it goes."""

    def __init__(self, server, seen, stop):
        super().__init__(daemon=True)
        self.server, self.seen, self.stop_ev = server, seen, stop

    def run(self):
        while not self.stop_ev.is_set():
            port = self.server.get_port()
            if port is None:
                time.sleep(0.05)
                continue
            try:
                self.serve(port)
            except (OSError, ConnectionError):
                time.sleep(0.05)

    def serve(self, port):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.settimeout(1.0)
        buf = b""
        try:
            s.sendall(pkt(CAN_DO, FUNC) + pkt(GRAB_JOB_UNIQ))
            while not self.stop_ev.is_set():
                try:
                    data = s.recv(65536)
                except socket.timeout:
                    s.sendall(pkt(GRAB_JOB_UNIQ))  # a lost NOOP costs a second, not the run
                    continue
                if not data:
                    return
                buf += data
                while len(buf) >= 12:
                    t, n = struct.unpack(">II", buf[4:12])
                    if len(buf) < 12 + n:
                        break
                    body, buf = buf[12:12 + n], buf[12 + n:]
                    if t == NO_JOB:
                        s.sendall(pkt(PRE_SLEEP))
                    elif t == NOOP:
                        s.sendall(pkt(GRAB_JOB_UNIQ))
                    elif t == JOB_ASSIGN_UNIQ:
                        handle, _func, unique = body.split(b"\0", 3)[:3]
                        self.seen.append((unique.decode(), handle.decode(), self.server.name,
                                          time.monotonic()))
                        s.sendall(pkt(WORK_COMPLETE, handle, b"") + pkt(GRAB_JOB_UNIQ))
        finally:
            s.close()


def tick_of(unique):
    """sched:NAME:2026-12-05T12:00:01Z -> epoch seconds, or None."""
    pre = "sched:%s:" % NAME
    if not unique.startswith(pre):
        return None
    return int(datetime.strptime(unique[len(pre):], "%Y-%m-%dT%H:%M:%SZ")
               .replace(tzinfo=timezone.utc).timestamp())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true", help="one minute (CI)")
    ap.add_argument("--seconds", type=int, help="length of the chaos (default 600, --short 60)")
    ap.add_argument("--dsjobd", default=os.environ.get("DSJOBD", "server/dsjobd"))
    ap.add_argument("--pg-bin", default=os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    secs = a.seconds or (60 if a.short else 600)
    if not os.access(a.dsjobd, os.X_OK):
        print("soak-sched: %s is not executable" % a.dsjobd, file=sys.stderr)
        return 2
    if not os.access(a.pg_bin + "/initdb", os.X_OK):
        print("1..0 # SKIP no PostgreSQL in %s" % a.pg_bin)
        return 0
    rnd = random.Random(a.seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    watchdog = threading.Timer(secs + 900, lambda: os.kill(os.getpid(), signal.SIGTERM))
    watchdog.daemon = True
    watchdog.start()
    cluster = Cluster(a.pg_bin, 40)
    dsn = "host=127.0.0.1 port=%d user=postgres dbname=postgres" % cluster.port
    log("soak-sched: PostgreSQL on 127.0.0.1:%d, %d s, seed %d, load %s"
        % (cluster.port, secs, a.seed, open("/proc/loadavg").read().split()[:3]))
    servers = [Server(a, cluster.dir, dsn, n) for n in "abc"]
    seen, stop = [], threading.Event()
    kills = {"SIGKILL": 0, "SIGTERM": 0, "two at once": 0}
    events = []  # (wall time, server, signal) of each fault
    ok = False
    try:
        for s in servers:
            s.start()
        workers = [Worker(s, seen, stop) for s in servers]
        for w in workers:
            w.start()
        t_begin = time.monotonic()
        wall_begin = time.time()
        while time.monotonic() - t_begin < secs:
            time.sleep(rnd.uniform(2, 8))
            up = [s for s in servers if s.up()]
            if len(up) < 2:
                continue
            victims = [rnd.choice(up)]
            if len(up) == 3 and rnd.random() < 0.25:
                victims = rnd.sample(up, 2)
                kills["two at once"] += 1
            for v in victims:
                sig = signal.SIGKILL if rnd.random() < 0.75 else signal.SIGTERM
                kills[sig.name] += 1
                events.append((time.time(), v.name, sig.name))
                v.stop(sig)
            time.sleep(rnd.uniform(0.5, 5))
            for v in victims:
                v.start()
        t_end = time.monotonic()
        wall_end = time.time()
        # Let the last ticks' jobs reach a worker: causal, bounded by 60 s of nothing new.
        last, quiet_since = len(seen), time.monotonic()
        want_tick = int(wall_end)
        while time.monotonic() - quiet_since < 60:
            ticks = {tick_of(u) for u, _, _, _ in list(seen)}
            if want_tick in ticks:
                break
            time.sleep(0.2)
            if len(seen) != last:
                last, quiet_since = len(seen), time.monotonic()
        stop.set()
        for s in servers:
            s.stop(signal.SIGTERM)
        # The check: mono -> wall through the offset taken at the start.
        off = wall_begin - t_begin
        by_tick = {}
        for u, h, srv, _t in seen:
            t = tick_of(u)
            if t is not None:
                by_tick.setdefault(t, []).append(h)
        first, last_tick = int(wall_begin) + 2, int(wall_end) - 1
        covered, missed, twice, reruns = 0, [], [], 0
        for t in range(first, last_tick + 1):
            hs = by_tick.get(t, [])
            if len(set(hs)) > 1:
                twice.append(t)
            reruns += len(hs) - len(set(hs))
            # Up over the whole second of the tick (from UP_AFTER_S after its start).
            up = any(u0 + off + UP_AFTER_S <= t and (u1 is None or u1 + off >= t + 1)
                     for s in servers for u0, u1 in s.ups)
            if up:
                covered += 1
                if not hs:
                    missed.append(t)
        fmt = lambda ts: ", ".join(datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")
                                   for t in ts[:10]) + (" ..." if len(ts) > 10 else "")  # noqa: E731
        log("ticks %d..%d: %d with a server up, %d jobs seen, %d at-least-once re-runs"
            % (first, last_tick, covered, len(seen), reruns))
        log("faults: %s" % ", ".join("%s %d" % kv for kv in kills.items()))
        for t in missed + twice:
            near = ["%s %s at %+.2f s" % (n, sig, w - t) for w, n, sig in events if abs(w - t) < 5]
            log("tick %s: faults near it: %s" % (fmt([t]), ", ".join(near) or "none"))
        print("%s - fired once: %d ticks made twice%s"
              % ("ok 1" if not twice else "not ok 1", len(twice), (" (" + fmt(twice) + ")") if twice else ""))
        print("%s - none missed: %d of %d covered ticks without a job%s"
              % ("ok 2" if not missed else "not ok 2", len(missed), covered,
                 (" (" + fmt(missed) + ")") if missed else ""))
        print("%s - the soak saw ticks: %d covered" % ("ok 3" if covered >= secs // 3 else "not ok 3", covered))
        print("1..3")
        ok = not twice and not missed and covered >= secs // 3
        log("total %.0f s, load %s" % (time.monotonic() - t_begin,
                                       open("/proc/loadavg").read().split()[:3]))
        _ = t_end
    finally:
        stop.set()
        for s in servers:
            if s.proc is not None:
                s.proc.kill()
                s.proc.wait()
        stop_all()
        cluster.cleanup(a.keep or not ok)
        if not ok:
            log("kept %s" % cluster.dir)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
