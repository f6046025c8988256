"""The Python package's figures for bench/python/run, of the shapes of
cref.c, each printing the seconds of the measured part, wall time and
the process's CPU time (rss: kB):

  pyside.py bg SERVER N             Client.submit_many: N background submits pipelined
  pyside.py bg-aio SERVER N         dsjob.aio: N background submits gathered on one connection
  pyside.py fg SERVER N             Client.submit: N foreground round trips, one at a time
  pyside.py inflight SERVER N K     dsjob.aio map: N foreground jobs, K in flight
  pyside.py rss SERVER N            dsjob.aio map: N foreground jobs in flight (no worker), then
                                    the process's peak RSS in kB once the server holds all N
  pyside.py rss-tasks SERVER N      the same with a task per job (asyncio.ensure_future)
  pyside.py worker SERVER C         a threaded no-op dsjob.Worker, C threads, until SIGTERM
"""

import asyncio
import sys
import time

import dsjob
import dsjob.aio


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def main() -> None:
    mode, server, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "worker":
        w = dsjob.Worker(server)
        w.register("noop", lambda job: b"")
        w.run(concurrency=n)
        return
    if mode == "bg":
        c = dsjob.Client(server)
        t0, cpu0 = time.monotonic(), time.process_time()
        c.submit_many("noop", [b"x"] * n)
        print(f"{time.monotonic() - t0:.6f} {time.process_time() - cpu0:.6f}")
    elif mode == "fg":
        c = dsjob.Client(server)
        t0, cpu0 = time.monotonic(), time.process_time()
        for _ in range(n):
            c.submit("noop", b"x")
        print(f"{time.monotonic() - t0:.6f} {time.process_time() - cpu0:.6f}")
    elif mode == "bg-aio":
        async def bg() -> str:
            c = dsjob.aio.Client(server)
            await c.submit("noop", b"x", background=True)  # connected before the clock
            t0, cpu0 = time.monotonic(), time.process_time()
            await asyncio.gather(*(c.submit("noop", b"x", background=True)
                                   for _ in range(n - 1)))
            return f"{time.monotonic() - t0:.6f} {time.process_time() - cpu0:.6f}"
        print(asyncio.run(bg()))
    elif mode == "inflight":
        k = int(sys.argv[4])

        async def inflight() -> str:
            c = dsjob.aio.Client(server)
            t0, cpu0 = time.monotonic(), time.process_time()
            async for _ in c.map("noop", [b"x"] * n, concurrency=k):
                pass
            return f"{time.monotonic() - t0:.6f} {time.process_time() - cpu0:.6f}"
        print(asyncio.run(inflight()))
    elif mode in ("rss", "rss-tasks"):
        async def rss() -> int:
            c = dsjob.aio.Client(server)
            if mode == "rss-tasks":  # a task per job, as asyncio.gather makes them
                tasks = [asyncio.ensure_future(c.submit("parked", b"x")) for _ in range(n)]
            else:  # map: n in flight, a future per job and no task

                async def drain() -> None:
                    async for _ in c.map("parked", [b"x"] * n, concurrency=n):
                        pass
                tasks = [asyncio.ensure_future(drain())]
            sync = dsjob.Client(server)
            loop = asyncio.get_running_loop()
            while True:
                rows = await loop.run_in_executor(None, sync.status)
                if any(r["function"] == "parked" and r["total"] >= n for r in rows):
                    break
                await asyncio.sleep(0.05)
            assert c.pending() == n
            kb = rss_kb()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return kb
        print(asyncio.run(rss()))

if __name__ == "__main__":
    main()
