"""The non-blocking C API (dsjob_async(3)) through its libevent example,
and dsjob.aio on it: thousands of jobs in flight on one connection,
streaming, errors with the server's reason, cancellation that leaves the
connection usable and nothing in flight, a lost connection, and async
handlers on dsjob.aio.Worker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest

import dsjob
import dsjob.aio
from conftest import PATIENCE, TOP_BUILDDIR, program, sized, start_dsjobd, wait_for

LIBEVENT_EXAMPLE = program(TOP_BUILDDIR / "examples" / "async-libevent")


def echo_worker(addr: str, fn) -> dsjob.Worker:
    """A worker of fn("echo") and fn("rev") (one WORK_DATA; "bad" raises)."""
    w = dsjob.Worker(addr)

    @w.function(fn("echo"))
    def echo(job):
        return job.payload

    @w.function(fn("rev"))
    def rev(job):
        if job.payload == b"bad":
            raise ValueError("bad one")
        job.send_data(b"x")
        return job.payload[::-1]

    return w


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, PATIENCE * 4))


def test_libevent_example(server, run_worker, fn) -> None:
    if not LIBEVENT_EXAMPLE.exists():
        pytest.skip("examples/async-libevent is not built")
    run_worker(echo_worker(server.addr, fn), concurrency=2)
    r = subprocess.run([str(LIBEVENT_EXAMPLE), server.addr, fn("rev"), "abc", "hello", "bad",
                        "zz"], capture_output=True, text=True, timeout=PATIENCE)
    assert r.returncode == 1  # one job failed
    lines = sorted(r.stdout.splitlines())
    assert lines == sorted(["0 data x", "0\tcba", "1 data x", "1\tolleh",
                            "2 failed: job raised an exception: ValueError: bad one",
                            "3 data x", "3\tzz"])


def test_libevent_example_no_server(tmp_path) -> None:
    if not LIBEVENT_EXAMPLE.exists():
        pytest.skip("examples/async-libevent is not built")
    s = start_dsjobd(tmp_path)
    addr = s.addr
    s.stop()
    r = subprocess.run([str(LIBEVENT_EXAMPLE), addr, "rev", "a"], capture_output=True,
                       text=True, timeout=PATIENCE)
    assert r.returncode == 1 and addr in r.stderr


def test_thousands_in_flight_on_one_connection(server, run_worker, fn) -> None:
    run_worker(echo_worker(server.addr, fn), concurrency=4)

    async def main():
        async with dsjob.aio.Client(server.addr) as c:
            payloads = [b"%d" % i for i in range(3000)]
            got = await asyncio.gather(*(c.submit(fn("echo"), p) for p in payloads))
            assert got == payloads
            assert len(c._conns) == 1 and c.pending() == 0
            ordered = [r async for r in c.map(fn("echo"), payloads[:500], concurrency=200,
                                              ordered=True)]
            assert ordered == payloads[:500]
            job = await c.submit(fn("nobody-does-this"), b"later", background=True)
            assert isinstance(job, dsjob.Job) and job.handle
            st = await c.status(job)
            assert st.known

    run(main())


def test_map_and_plain_jobs_beside_a_stream(server, run_worker, fn) -> None:
    """A plain foreground job's end reaches its future (or map's queue)
    from the C step, its WORK_DATA dropped there; a stream on the same
    connection still hears every event; map reports each failure with its
    index, and one left early forgets its jobs and leaves nothing behind."""
    run_worker(echo_worker(server.addr, fn), concurrency=4)

    async def main():
        async with dsjob.aio.Client(server.addr) as c:
            st = dsjob.Stream()
            chunks, plain = await asyncio.gather(
                collect(c.stream(fn("rev"), b"abc", state=st)), c.submit(fn("rev"), b"xyz"))
            assert chunks == [b"x"] and st.result == b"cba" and plain == b"zyx"
            payloads = [b"bad" if i % 50 == 7 else b"%d" % i for i in range(400)]
            got = []
            with pytest.raises(ExceptionGroup) as eg:
                async for r in c.map(fn("rev"), payloads, concurrency=64):
                    got.append(r)
            assert sorted(got) == sorted(p[::-1] for p in payloads if p != b"bad")
            assert sorted(e.index for e in eg.value.exceptions) == list(range(7, 400, 50))
            assert all(isinstance(e, dsjob.JobFailed) and e.text == "ValueError: bad one"
                       for e in eg.value.exceptions)
            it = c.map(fn("echo"), [b"%d" % i for i in range(1000)], concurrency=100)
            assert len([await it.__anext__() for _ in range(3)]) == 3
            await it.aclose()
            conn = c._conns[server.addr]
            assert c.pending() == 0 and not conn.jobs and not conn.sinks
            assert await c.submit(fn("echo"), b"after") == b"after"

    run(main())


async def collect(it) -> list:
    return [x async for x in it]


def test_errors_with_reasons(tmp_path, run_worker, fn) -> None:
    s = start_dsjobd(tmp_path, "--reject-no-worker")
    try:
        run_worker(echo_worker(s.addr, fn))

        async def main():
            async with dsjob.aio.Client(s.addr) as c:
                with pytest.raises(dsjob.JobFailed) as e:
                    await c.submit(fn("rev"), b"bad")
                assert e.value.text == "ValueError: bad one"
                with pytest.raises(dsjob.Refused) as e:
                    await c.submit("nobody", b"")
                assert e.value.code == "NO_WORKER"
                assert await c.submit(fn("rev"), b"ok") == b"ko"  # still usable

        run(main())
    finally:
        s.stop()


def test_stream(server, run_worker, fn) -> None:
    go_on = threading.Event()
    w = dsjob.Worker(server.addr)

    @w.function(fn("rows"))
    def rows(job):
        job.send_data(b"row 1")
        if not go_on.wait(PATIENCE):
            raise RuntimeError("the first row never arrived")
        job.send_status(1, 1)
        job.send_data(b"row 2")
        return b"end"

    run_worker(w)

    async def main():
        c = dsjob.aio.Client(server.addr)
        st = dsjob.Stream()
        it = c.stream(fn("rows"), b"", state=st)
        assert await it.__anext__() == b"row 1"
        go_on.set()
        assert [r async for r in it] == [b"row 2"]
        assert st.result == b"end" and st.status == (1, 1)
        await c.close()

    run(main())


def test_cancel_leaves_the_connection_usable(dsjobd, run_worker, fn) -> None:
    release = threading.Event()
    started = threading.Event()
    w = echo_worker(dsjobd.addr, fn)

    @w.function(fn("slow"))
    def slow(job):
        started.set()
        release.wait(PATIENCE)
        return b"late"

    run_worker(w, concurrency=2)

    async def main():
        async with dsjob.aio.Client(dsjobd.addr) as c:
            t = asyncio.ensure_future(c.submit(fn("slow"), b""))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, PATIENCE)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert c.pending() == 0  # forgotten at once, nothing kept
            release.set()
            assert await c.submit(fn("echo"), b"after") == b"after"
            assert c.pending() == 0

    run(main())


def test_lost_connection_fails_jobs_in_flight(tmp_path, run_worker) -> None:
    s = start_dsjobd(tmp_path)

    # No worker runs: the job stays queued until the server goes.
    async def main():
        c = dsjob.aio.Client(s.addr)
        t = asyncio.ensure_future(c.submit("hang", b""))
        await asyncio.get_running_loop().run_in_executor(None, lambda: wait_for(
            lambda: any(r["function"] == "hang" and r["total"] == 1
                        for r in dsjob.Client(s.addr).status()), "the job queued"))
        s.stop()
        with pytest.raises(dsjob.NoServer):
            await t
        assert c.pending() == 0
        with pytest.raises(dsjob.NoServer):
            await c.submit("hang", b"")
        await c.close()

    try:
        run(main())
    finally:
        s.stop()


def test_async_worker(server, fn) -> None:
    async def main():
        w = dsjob.aio.Worker(server.addr)

        @w.function(fn("slow_upper"))
        async def slow_upper(job):
            await asyncio.sleep(0.01)
            job.send_status(1, 1)
            return job.payload.upper()

        @w.function(fn("plain"))
        def plain(job):
            return b"plain " + job.payload

        task = asyncio.ensure_future(w.run(concurrency=4))
        c = dsjob.aio.Client(server.addr)
        got = await asyncio.gather(*(c.submit(fn("slow_upper"), b"ab%d" % i)
                                     for i in range(20)))
        assert got == [b"AB%d" % i for i in range(20)]
        assert await c.submit(fn("plain"), b"x") == b"plain x"
        w.stop()
        await task
        await c.close()

    run(main())


def test_cancel_while_connecting_leaves_the_others(dsjobd, run_worker, fn) -> None:
    # Jobs submitted before the connection is up wait for it together;
    # cancelling one of them leaves the connect and the others alone.
    run_worker(echo_worker(dsjobd.addr, fn))

    async def main():
        async with dsjob.aio.Client(dsjobd.addr) as c:
            tasks = [asyncio.ensure_future(c.submit(fn("echo"), b"%d" % i)) for i in range(5)]
            await asyncio.sleep(0)  # each waits for the connection now
            tasks[2].cancel()
            got = await asyncio.gather(*tasks, return_exceptions=True)
            assert isinstance(got[2], asyncio.CancelledError)
            assert [g for i, g in enumerate(got) if i != 2] == [b"0", b"1", b"3", b"4"]
            assert c.pending() == 0

    run(main())


PEAK_RSS = """
import asyncio, sys
import dsjob.aio

def peak_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

async def main(addr, n):
    c = dsjob.aio.Client(addr)
    before = peak_kb()
    tasks = [asyncio.ensure_future(c.submit("parked", b"x")) for _ in range(n)]
    while c.pending() < n:
        await asyncio.sleep(0.02)
    print(before, peak_kb())
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="a sanitizer's memory is not the package's")
def test_ten_thousand_tasks_in_flight_under_50_mb(tmp_path) -> None:
    # 10,000 jobs in flight, a task each as asyncio.gather makes
    # them (no worker: they stay in flight), in a process under 50 MB of
    # peak RSS. A job is one coroutine and one future, also while the
    # connection is being made (59 MB before, with a coroutine chain and a
    # shield a job during the connect). A server of its own: the jobs are
    # many. make check puts 2,000 in flight, each within its share of the
    # 50 MB: 2.7 kB over the process's peak before them (about 23 MB; 3.6
    # kB before); make check-long the 10,000.
    n = sized(2000, 10000)
    s = start_dsjobd(tmp_path)
    try:
        r = subprocess.run([sys.executable, "-c", PEAK_RSS, s.addr, str(n)],
                           capture_output=True, text=True, timeout=PATIENCE * 4)
    finally:
        s.stop()
    assert r.returncode == 0, r.stderr
    before, peak = map(int, r.stdout.split())
    assert peak - before < n * 2.7, f"{(peak - before) / n:.2f} kB a task in flight"
    if n == 10000:
        assert peak < 50 * 1024, f"peak RSS {peak / 1024:.1f} MB"
