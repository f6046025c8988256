"""bench/python/run: the Python package beside libdsjobclient/libdsjobworker
(cref.c), php-gearman and Perl Gearman::Client, in one run, each shape on a
fresh dsjobd (in memory, loopback, port 0) of the build tree:

  bg        background submits, pipelined where the client can
  fg        foreground round trips of a no-op job, one at a time (a C worker)
  inflight  foreground no-op jobs with 1,000 in flight (C worker, 4 threads)
  drain     a worker draining no-op jobs queued beforehand: one thread, and
            four threads (php and Perl: four processes, a connection each,
            as the four threads have)
  rss       the asyncio client's peak RSS with 10,000 jobs in flight, through
            map (a future per job) and with a task per job

Each figure is the median of --rounds runs, in jobs per second. The targets
of issue 23 item 8 are printed beside the ratios. It stops by itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOP_SRCDIR = HERE.parents[1]


class Dsjobd:
    def __init__(self, dsjobd: str, tmp: Path) -> None:
        pf = tmp / f"port.{time.monotonic_ns()}"
        self.p = subprocess.Popen([dsjobd, "-L", "127.0.0.1", "-p", "0", "--port-file", str(pf),
                                   "-l", "none"])
        deadline = time.monotonic() + 30
        while not (pf.exists() and pf.read_text().strip()):
            if time.monotonic() > deadline or self.p.poll() is not None:
                raise SystemExit("bench: dsjobd did not start")
            time.sleep(0.02)
        self.addr = f"127.0.0.1:{pf.read_text().strip()}"

    def stop(self) -> None:
        self.p.terminate()
        self.p.wait()


def queued(addr: str, function: str = "noop") -> int:
    import dsjob
    for r in dsjob.Client(addr).status():
        if r["function"] == function:
            return r["total"]
    return 0


def workers(addr: str, function: str = "noop") -> int:
    import dsjob
    for r in dsjob.Client(addr).status():
        if r["function"] == function:
            return r["workers"]
    return 0


class Bench:
    def __init__(self, args: argparse.Namespace, env: dict, tmp: Path) -> None:
        self.a = args
        self.env = env
        self.tmp = tmp
        b = Path(args.top_builddir)
        # The program itself, not libtool's wrapper, so that SIGTERM reaches it.
        real = b / "bench" / "python" / ".libs" / "cref"
        self.cref = str(real if real.exists() else b / "bench" / "python" / "cref")
        self.dsjobd = str(b / "server" / "dsjobd")
        self.py = [sys.executable, str(HERE / "pyside.py")]
        self.php = ["php", str(HERE / "peer.php")]
        self.perl = ["perl", str(HERE / "peer.pl")]
        self.cpu: dict[str, list[float]] = {}  # jobs a CPU second, by command

    def out(self, cmd: list[str]) -> str:
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-400:]}")
        return r.stdout.strip()

    def worker(self, cmd: list[str], addr: str, n: int) -> subprocess.Popen:
        p = subprocess.Popen(cmd, env=self.env)
        deadline = time.monotonic() + 60
        while workers(addr) < n:
            if time.monotonic() > deadline or p.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd)}: the worker did not register")
            time.sleep(0.02)
        return p

    @staticmethod
    def stop(p: subprocess.Popen) -> None:
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def client_rate(self, cmd: list[str], n: int, worker: list[str] | None = None,
                    nworkers: int = 1, extra: tuple[str, ...] = ()) -> float:
        s = Dsjobd(self.dsjobd, self.tmp)
        w = None
        try:
            if worker:
                w = self.worker([*worker, s.addr, str(nworkers)], s.addr, nworkers)
            out = self.out([*cmd, s.addr, str(n), *extra]).split()
            secs = float(out[0])
            if len(out) > 1:  # cref and pyside: the CPU time of the measured part too
                self.cpu.setdefault(" ".join(cmd), []).append(n / float(out[1]))
        finally:
            if w is not None:
                self.stop(w)
            s.stop()
        return n / secs

    def drain_rate(self, worker: list[str], n: int, nworkers: int, procs: int = 1) -> float:
        """A worker of nworkers threads, or procs processes of one (php
        and Perl have no threads), drains n jobs queued beforehand."""
        s = Dsjobd(self.dsjobd, self.tmp)
        try:
            self.out([self.cref, "bg", s.addr, str(n)])
            assert queued(s.addr) == n
            ps = [subprocess.Popen([*worker, s.addr, str(nworkers)], env=self.env)
                  for _ in range(procs)]
            try:
                deadline = time.monotonic() + 600
                while queued(s.addr) >= n:
                    if any(p.poll() is not None for p in ps) or time.monotonic() > deadline:
                        raise RuntimeError(f"{worker}: took no job")
                    time.sleep(0.002)
                t0 = time.monotonic()
                while (left := queued(s.addr)) > 0:
                    if any(p.poll() is not None for p in ps) or time.monotonic() > deadline:
                        raise RuntimeError(f"{worker}: stopped with {left} jobs left")
                    time.sleep(0.005)
                secs = time.monotonic() - t0
            finally:
                for p in ps:
                    self.stop(p)
        finally:
            s.stop()
        return n / secs

    def median(self, f, *args) -> float:
        return statistics.median(f(*args) for _ in range(self.a.rounds))

    def alternated(self, *runs: tuple) -> list[float]:
        """The medians of runs (each (f, *args)), their rounds taken in
        turn, so that a change of the machine's load falls on each alike."""
        got: list[list[float]] = [[] for _ in runs]
        for _ in range(self.a.rounds):
            for k, (f, *args) in enumerate(runs):
                got[k].append(f(*args))
        return [statistics.median(g) for g in got]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top-builddir", default=os.environ.get("top_builddir", str(TOP_SRCDIR)))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small counts, one round: a smoke")
    ap.add_argument("--no-peers", action="store_true", help="leave php and perl out")
    ap.add_argument("--only", default="bg,fg,inflight,drain,rss",
                    help="the shapes to run, comma-separated (default: all)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    k = 0.05 if args.quick else 1.0
    if args.quick:
        args.rounds = 1
    n_bg, n_fg, n_in, n_dr, n_peer_bg, n_peer_fg, n_peer_in, n_peer_dr = (
        int(x * k) for x in (50000, 5000, 50000, 50000, 20000, 3000, 20000, 10000))
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="dsjob-bench-py.") as tmp:
        b = Bench(args, env, Path(tmp))
        peers = not args.no_peers
        cref, py, php, perl = [b.cref], b.py, b.php, b.perl
        cw = [b.cref, "worker"]
        res: dict[str, float] = {}
        print(f"# bench/python: {args.rounds} round(s), medians in jobs/s; "
              f"{os.cpu_count()} CPUs, loopback, dsjobd in memory", flush=True)
        if "bg" in only:  # rounds alternated: the ratio of bg C and bg py is a target
            res["bg C"], res["bg py"], res["bg py-aio"] = b.alternated(
                (b.client_rate, [*cref, "bg"], n_bg), (b.client_rate, [*py, "bg"], n_bg),
                (b.client_rate, [*py, "bg-aio"], n_bg))
        if "fg" in only:
            res["fg C"] = b.median(b.client_rate, [*cref, "fg"], n_fg, cw)
            res["fg py"] = b.median(b.client_rate, [*py, "fg"], n_fg, cw)
        if "inflight" in only:
            res["inflight C"] = b.median(b.client_rate, [*cref, "inflight"], n_in, cw, 4,
                                         ("1000",))
            res["inflight py-aio"] = b.median(b.client_rate, [*py, "inflight"], n_in, cw, 4,
                                              ("1000",))
        if "drain" in only:
            res["drain C"] = b.median(b.drain_rate, [b.cref, "worker"], n_dr, 1)
            res["drain py"] = b.median(b.drain_rate, [*py, "worker"], n_dr, 1)
            res["drain C 4"] = b.median(b.drain_rate, [b.cref, "worker"], n_dr, 4)
            res["drain py 4"] = b.median(b.drain_rate, [*py, "worker"], n_dr, 4)
        if peers:
            if "bg" in only:
                res["bg php"] = b.median(b.client_rate, [*php, "bg"], n_peer_bg)
                res["bg perl"] = b.median(b.client_rate, [*perl, "bg"], n_peer_bg)
            if "fg" in only:
                res["fg php"] = b.median(b.client_rate, [*php, "fg"], n_peer_fg, cw)
                res["fg perl"] = b.median(b.client_rate, [*perl, "fg"], n_peer_fg, cw)
            if "inflight" in only:  # task sets of 1,000, as cref's
                res["inflight php"] = b.median(b.client_rate, [*php, "inflight"], n_peer_in, cw,
                                               4, ("1000",))
                res["inflight perl"] = b.median(b.client_rate, [*perl, "inflight"], n_peer_in,
                                                cw, 4, ("1000",))
            if "drain" in only:
                res["drain php"] = b.median(b.drain_rate, [*php, "worker"], n_peer_dr, 1)
                res["drain perl"] = b.median(b.drain_rate, [*perl, "worker"], n_peer_dr, 1)
                res["drain php 4"] = b.median(b.drain_rate, [*php, "worker"], n_peer_dr, 1, 4)
                res["drain perl 4"] = b.median(b.drain_rate, [*perl, "worker"], n_peer_dr, 1, 4)
        rss = {}
        for mode in ("rss", "rss-tasks") if "rss" in only else ():
            s = Dsjobd(b.dsjobd, Path(tmp))
            try:
                rss[mode] = int(b.out([*py, mode, s.addr, str(int(10000 * k) or 1)]))
            finally:
                s.stop()
    for name, v in res.items():
        print(f"{name:18s} {v:12.0f} jobs/s")
    cpu = {}
    if "bg" in only:
        for name, cmd in (("bg C", [*cref, "bg"]), ("bg py", [*py, "bg"])):
            cpu[name] = statistics.median(b.cpu[" ".join(cmd)])
            print(f"{name + ' CPU':18s} {cpu[name]:12.0f} jobs a CPU second of the client")
    for mode, kb in rss.items():
        print(f"{mode:18s} {kb / 1024:12.1f} MB peak RSS of dsjob.aio with {int(10000 * k)} "
              f"jobs in flight ({'map' if mode == 'rss' else 'a task per job'})")

    def ratio(a: str, c: str, want: float, note: str = "") -> None:
        if a in res and c in res:
            r = res[a] / res[c]
            print(f"{a} / {c} = {r:.2f} (want >= {want}: {'ok' if r >= want else 'MISSED'})"
                  + note)

    print("# ratios")
    ratio("bg py", "bg C", 0.8)
    if cpu:
        r = cpu["bg py"] / cpu["bg C"]
        print(f"bg py / bg C in the client's CPU time = {r:.2f} (leaves out the waiting on "
              "dsjobd, not the load's effect on the caches)")
    ratio("inflight py-aio", "inflight C", 0.7)
    ratio("drain py", "drain C", 0.5)
    ratio("drain py 4", "drain C 4", 0.5)
    if peers:
        for mine, shape in (("bg py", "bg"), ("fg py", "fg"), ("inflight py-aio", "inflight"),
                            ("drain py", "drain"), ("drain py 4", "drain")):
            for p in ("php", "perl"):
                ratio(mine, f"{shape} {p}" + (" 4" if mine.endswith(" 4") else ""), 2.0)
    for mode, kb in rss.items():
        print(f"{mode} {kb / 1024:.1f} MB (want < 50: {'ok' if kb < 50 * 1024 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
