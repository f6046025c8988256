"""The blocking client against real servers: results, progress callbacks,
streaming, map through the task set, background jobs and their status,
the errors as exceptions with the server's reason, and the admin views."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import dsjob
from conftest import PATIENCE, start_dsjobd, wait_for


def reverse_worker(addr: str, fn) -> dsjob.Worker:
    """A worker of fn("reverse") (with progress), fn("fail") and fn("raise")."""
    w = dsjob.Worker(addr)

    @w.function(fn("reverse"))
    def reverse(job):
        job.send_status(1, 3)
        job.send_data(b"part:" + job.payload)
        job.warn("look out")
        job.send_status(3, 3)
        return job.payload[::-1]

    @w.function(fn("fail"))
    def fail(job):
        raise dsjob.WorkFail()

    @w.function(fn("raise"))
    def boom(job):
        raise ValueError("bad row " + job.payload.decode())

    return w


def test_version() -> None:
    assert dsjob.__version__ == "0.1.0"
    assert dsjob.library_version == "0.1.0"


def test_submit_and_progress(server, run_worker, fn) -> None:
    run_worker(reverse_worker(server.addr, fn))
    c = dsjob.Client(server.addr)
    seen: list[object] = []
    r = c.submit(fn("reverse"), b"hello", on_data=lambda d: seen.append(("data", d)),
                 on_status=lambda n, d: seen.append(("status", n, d)),
                 on_warning=lambda w: seen.append(("warning", w)))
    assert r == b"olleh"
    assert seen == [("status", 1, 3), ("data", b"part:hello"), ("warning", b"look out"),
                    ("status", 3, 3)]
    assert c.submit(fn("reverse"), "text") == b"txet"


def test_job_exception_text(server, run_worker, fn) -> None:
    run_worker(reverse_worker(server.addr, fn))
    c = dsjob.Client(server.addr)
    with pytest.raises(dsjob.JobFailed) as e:
        c.submit(fn("raise"), b"17")
    assert e.value.text == "ValueError: bad row 17"
    assert str(e.value) == "ValueError: bad row 17"
    with pytest.raises(dsjob.JobFailed) as e:
        c.submit(fn("fail"), b"")
    assert e.value.text is None


def test_no_server(tmp_path) -> None:
    s = start_dsjobd(tmp_path)
    addr = s.addr
    s.stop()
    with pytest.raises(dsjob.NoServer) as e:
        dsjob.Client(addr).submit("reverse", b"x")
    assert addr in str(e.value)
    assert isinstance(e.value, ConnectionError)
    with pytest.raises(dsjob.NoServer):
        dsjob.Client([]).submit("reverse", b"x")
    with pytest.raises(ValueError):
        dsjob.Client("127.0.0.1:99999")


def test_timeout(dsjobd, run_worker, fn) -> None:
    release = threading.Event()
    w = dsjob.Worker(dsjobd.addr)

    @w.function(fn("slow"))
    def slow(job):
        release.wait(PATIENCE)
        return b"late"

    run_worker(w)
    c = dsjob.Client(dsjobd.addr, timeout=0.3)
    try:
        with pytest.raises(dsjob.Timeout):
            c.submit(fn("slow"), b"")
    finally:
        release.set()


def test_refused_with_code(tmp_path) -> None:
    s = start_dsjobd(tmp_path, "--reject-no-worker")
    try:
        with pytest.raises(dsjob.Refused) as e:
            dsjob.Client(s.addr).submit("nobody", b"x")
        assert e.value.code == "NO_WORKER"
        assert "nobody" in e.value.text
    finally:
        s.stop()


def test_stream_yields_as_they_arrive(server, run_worker, fn) -> None:
    go_on = threading.Event()
    w = dsjob.Worker(server.addr)

    @w.function(fn("rows"))
    def rows(job):
        job.send_data(b"row 1")
        # The second row waits until the consumer has the first one: a
        # stream that buffered until the end would never see it.
        if not go_on.wait(PATIENCE):
            raise RuntimeError("the first row never reached the consumer")
        job.send_status(2, 2)
        job.send_data(b"row 2")
        return b"done"

    run_worker(w)
    st = dsjob.Stream()
    it = dsjob.Client(server.addr).stream(fn("rows"), b"", state=st)
    assert next(it) == b"row 1"
    go_on.set()
    assert list(it) == [b"row 2"]
    assert st.result == b"done"
    assert st.status == (2, 2)


def test_stream_raises_the_failure(server, run_worker, fn) -> None:
    run_worker(reverse_worker(server.addr, fn))
    with pytest.raises(dsjob.JobFailed, match="bad row 3"):
        list(dsjob.Client(server.addr).stream(fn("raise"), b"3"))


def test_map_ordered_and_failures(server, run_worker, fn) -> None:
    w = dsjob.Worker(server.addr)

    @w.function(fn("square"))
    def square(job):
        n = int(job.payload)
        if n % 7 == 3:
            raise ArithmeticError(f"no {n}")
        return str(n * n)

    run_worker(w, concurrency=4)
    c = dsjob.Client(server.addr)
    got = list(c.map(fn("square"), [str(i) for i in range(50) if i % 7 != 3], concurrency=16,
                     ordered=True))
    assert got == [str(i * i).encode() for i in range(50) if i % 7 != 3]
    results = []
    with pytest.raises(ExceptionGroup) as eg:
        for r in c.map(fn("square"), [str(i) for i in range(30)], concurrency=8):
            results.append(r)
    assert sorted(results) == sorted(str(i * i).encode() for i in range(30) if i % 7 != 3)
    failed = sorted((e.index, e.text) for e in eg.value.exceptions)
    assert failed == [(i, f"ArithmeticError: no {i}") for i in range(30) if i % 7 == 3]
    assert all(isinstance(e, dsjob.JobFailed) for e in eg.value.exceptions)


def test_map_resubmits_when_a_server_goes(tmp_path, run_worker) -> None:
    """Two servers; the first dies with every job queued on it. The task
    set submits them again to the other, and every one completes."""
    a = start_dsjobd(tmp_path)
    b = start_dsjobd(tmp_path)
    try:
        w = dsjob.Worker(b.addr)

        @w.function("echo")
        def echo(job):
            return job.payload

        run_worker(w)
        a.stop()
        c = dsjob.Client([a.addr, b.addr])
        payloads = [f"p{i}".encode() for i in range(40)]
        assert sorted(c.map("echo", payloads, concurrency=40)) == sorted(payloads)
    finally:
        a.stop()
        b.stop()


def test_background_status_and_result(server, run_worker, fn) -> None:
    c = dsjob.Client(server.addr)
    job = c.submit(fn("reverse"), b"later", background=True)
    assert isinstance(job, dsjob.Job) and job.handle
    st = c.status(job)
    assert st.known and not st.running
    run_worker(reverse_worker(server.addr, fn))
    if server.kind == "dsjobd":  # it keeps the outcome: the job stays known
        wait_for(lambda: _done(c, job), "the job to end")
    else:
        wait_for(lambda: not c.status(job).known, "the job to end")
    if server.kind == "dsjobd":
        assert c.result(job) == b"retal"
        failed = c.submit(fn("raise"), b"9", background=True)
        wait_for(lambda: any(d["handle"] == failed.handle for d in c.dead()), "the dead job")
        with pytest.raises(dsjob.JobFailed) as e:
            c.result(failed)
        assert e.value.text == "ValueError: bad row 9"
        dead = [d for d in c.dead() if d["handle"] == failed.handle]
        assert dead[0]["error"] == "ValueError: bad row 9" and dead[0]["function"] == fn("raise")


def _done(c: dsjob.Client, job: dsjob.Job) -> bool:
    return any(j["handle"] == job.handle and j["state"] == "done" for j in c.jobs())


def test_background_priorities_and_run_at(dsjobd, fn) -> None:
    c = dsjob.Client(dsjobd.addr)
    at = int(time.time()) + 3600
    later = c.submit(fn("nightly"), b"x", at=at)
    high = c.submit(fn("nightly"), b"y", background=True, priority="high")
    low = c.background(fn("nightly"), b"z", priority="low", unique="z-1")
    rows = {j["handle"]: j for j in c.jobs()}
    assert rows[later.handle]["run_at"] == at
    assert rows[high.handle]["priority"] == "high"
    assert rows[low.handle]["priority"] == "low" and rows[low.handle]["unique"] == "z-1"
    assert c.status(unique="z-1").known
    with pytest.raises(ValueError):
        c.submit(fn("nightly"), b"", priority="urgent")


def test_submit_many_pipelined(server, fn) -> None:
    c = dsjob.Client(server.addr)
    jobs = c.submit_many(fn("bulk"), [b"%d" % i for i in range(200)])
    assert len(jobs) == 200 and len({j.handle for j in jobs}) == 200
    total = [r["total"] for r in c.status() if r["function"] == fn("bulk")]
    assert total == [200]
    # The payload kinds of submit, and the Jobs (made in C) as submit makes them.
    kinds = [b"b", "s", bytearray(b"a"), memoryview(b"m"), None]
    kinds_fn = fn("kinds")
    jobs = c.submit_many(kinds_fn, kinds, uniques=["u1", None, "u3", "u4", "u5"])
    assert [(j.function, j.unique) for j in jobs] == [
        (kinds_fn, "u1"), (kinds_fn, None), (kinds_fn, "u3"), (kinds_fn, "u4"), (kinds_fn, "u5")]
    assert jobs[0] == dsjob.Job(jobs[0].handle, kinds_fn, "u1") and "u1" in repr(jobs[0])
    with pytest.raises(TypeError, match="payload must be bytes or str, not int"):
        c.submit_many(kinds_fn, [b"x", 1])


def test_admin_views(server, run_worker, fn) -> None:
    w = reverse_worker(server.addr, fn)
    w.id = fn("py-admin")
    run_worker(w)
    c = dsjob.Client(server.addr)
    status = {r["function"]: r for r in c.status()}
    assert status[fn("reverse")]["workers"] >= 1
    mine = [r for r in c.workers() if r["id"] == fn("py-admin")]
    assert mine and sorted(mine[0]["functions"]) == [fn("fail"), fn("raise"), fn("reverse")]
    c.submit(fn("queued-only"), b"", background=True)
    assert [j for j in c.jobs() if j["handle"]]


def test_limit_and_pause(dsjobd, run_worker, fn) -> None:
    """Flow control from Python: settings set and read back, a paused
    function's job waits while a real worker is there, and runs once resumed."""
    c = dsjob.Client(dsjobd.addr)
    pyflow = fn("pyflow")
    c.limit(pyflow, "concurrency 2 rate 10/s")
    row = c.limit(pyflow)
    assert row is not None and row["settings"] == "concurrency 2 rate 10/s"
    assert c.limit("unknown-fn") is None
    assert any(r["function"] == pyflow for r in c.limits())
    with pytest.raises(dsjob.Refused) as e:
        c.limit(pyflow, "concurrency nine")
    assert e.value.code == "INVALID_ARGUMENTS" and "nine" in e.value.text
    with pytest.raises(ValueError):
        c.limit("py flow", "concurrency 1")
    c.pause(pyflow)
    ran = threading.Event()
    w = dsjob.Worker(dsjobd.addr)

    @w.function(pyflow)
    def handler(job):
        ran.set()
        return b""

    run_worker(w)
    c.submit(pyflow, b"x", background=True)
    wait_for(lambda: (c.limit(pyflow) or {}).get("queued") == 1, "the job queued")
    row = c.limit(pyflow)
    assert "paused" in row["settings"] and row["held"] == "paused" and not ran.is_set()
    c.resume(pyflow)
    assert ran.wait(PATIENCE), "the resumed function's job ran"


def test_schedules(tmp_path, run_worker) -> None:
    """A schedule every second made from Python: its tick's job reaches a
    real worker with the payload, and the schedule is listed, paused and
    removed; the server's refusal is Refused with its words. (A server of
    its own: the listing is the server's.)"""
    dsjobd = start_dsjobd(tmp_path)
    try:
        _schedules(dsjobd, run_worker)
    finally:
        dsjobd.stop()


def _schedules(dsjobd, run_worker) -> None:
    """test_schedules' checks against dsjobd, a server of its own."""
    got: list[bytes] = []
    w = dsjob.Worker(dsjobd.addr)

    @w.function("pysched")
    def pysched(job):
        got.append(job.payload)
        return b""

    run_worker(w)
    c = dsjob.Client(dsjobd.addr)
    assert c.schedules() == []
    c.schedule_add("tick", "* * * * * *", "pysched", "it's a tick", priority="high", missed="once")
    wait_for(lambda: got, "a tick's job")
    assert got[0] == b"it's a tick"
    rows = c.schedules()
    assert len(rows) == 1 and rows[0]["name"] == "tick" and rows[0]["cron"] == "* * * * * *"
    assert rows[0]["priority"] == "high" and rows[0]["missed"] == "once" and not rows[0]["paused"]
    c.schedule_pause("tick")
    assert c.schedules()[0]["paused"] and c.schedules()[0]["next_run"] is None
    c.schedule_resume("tick")
    assert not c.schedules()[0]["paused"]
    c.schedule_remove("tick")
    assert c.schedules() == []
    with pytest.raises(dsjob.Refused) as e:
        c.schedule_add("bad", "61 * * * *", "pysched")
    assert e.value.code == "INVALID_ARGUMENTS" and "61" in e.value.text
    with pytest.raises(dsjob.Refused) as e:
        c.schedule_remove("nosuch")
    assert e.value.code == "UNKNOWN_SCHEDULE"
    with pytest.raises(ValueError):
        c.schedule_add("a b", "* * * * *", "pysched")
    with pytest.raises(ValueError):
        c.schedule_add("q", "* * * * *", "pysched", "'\"")

    async def listed() -> list:
        async with dsjob.aio.Client(dsjobd.addr) as ac:
            await ac.schedule_add("atick", "0 0 * * *", "pysched", tz="Europe/Berlin")
            return await ac.schedules()

    rows = asyncio.run(listed())
    assert [(r["name"], r["tz"]) for r in rows] == [("atick", "Europe/Berlin")]


def test_gil_released_while_waiting(dsjobd, run_worker, fn) -> None:
    """The worker's handler runs Python in this process while the client
    waits for its result: a submit that held the GIL would never end."""
    run_worker(reverse_worker(dsjobd.addr, fn))
    c = dsjob.Client(dsjobd.addr, timeout=PATIENCE)
    results = []
    threads = [threading.Thread(target=lambda: results.append(c.submit(fn("reverse"), b"ab")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE)
    assert results == [b"ba"] * 8


def test_after(server, run_worker, fn) -> None:
    """after=: the child runs once its parents have succeeded (dsjobd); gearmand
    knows no dependencies, and the job is then not submitted at all."""
    c = dsjob.Client(server.addr)
    if server.kind != "dsjobd":
        with pytest.raises(dsjob.Refused):
            c.submit(fn("merge"), b"x", background=True, after=["H:nowhere:1"])
        return
    ran: list[bytes] = []
    w = dsjob.Worker(server.addr)

    @w.function(fn("shard"))
    def shard(job):
        ran.append(job.payload)
        return b"r" + job.payload

    @w.function(fn("merge"))
    def merge(job):
        ran.append(job.payload)
        return b"".join(c.result(h) for h in job.payload.decode().split(","))

    parents = [c.submit(fn("shard"), str(i), background=True) for i in range(3)]
    handles = ",".join(p.handle for p in parents)
    child = c.submit(fn("merge"), handles, background=True, after=parents)
    with pytest.raises(ValueError):
        c.submit(fn("merge"), b"", after=parents)  # foreground: not with after=
    with pytest.raises(dsjob.Refused) as e:
        c.submit(fn("merge"), b"", background=True, after=["H:nowhere:1"])
    assert e.value.code == "DEPENDENCY"
    run_worker(w)
    wait_for(lambda: len(ran) == 4, "the shards and the merge")
    assert ran[-1] == handles.encode()  # the merge ran last

    reader = dsjob.Client(server.addr)  # c may still be in the merge's hands

    def kept(job: dsjob.Job):
        def result() -> bytes | None:
            # The merge has started; its result is kept once its end is in.
            try:
                return reader.result(job)
            except dsjob.Refused as e:
                if e.code != "NOT_DONE":
                    raise
                return None
        return result
    assert wait_for(kept(child), "the merge's kept result") == b"r0r1r2"
    # A parent named by (function, unique key), escapes and all; it is kept.
    keyed = c.submit(fn("shard"), "k", unique="a:b,c%", background=True)
    wait_for(lambda: len(ran) == 5, "the keyed shard")
    late = c.submit(fn("merge"), keyed.handle, background=True, after=[(fn("shard"), "a:b,c%")])
    assert wait_for(kept(late), "the merge after the keyed shard") == b"rk"
    with pytest.raises(dsjob.Refused) as e:
        c.submit(fn("merge"), b"", background=True, after=[(fn("shard"), "nosuch")])
    assert e.value.code == "DEPENDENCY"
