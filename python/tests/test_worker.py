"""Workers against real servers: handlers in threads at once, the job's
reports, exceptions as WORK_EXCEPTION/WORK_FAIL, SIGTERM letting the
running job finish, and processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import dsjob
from conftest import PATIENCE, registered, wait_for


def test_concurrency_runs_jobs_at_once(server, run_worker, fn) -> None:
    barrier = threading.Barrier(4, timeout=PATIENCE)
    w = dsjob.Worker(server.addr)

    @w.function(fn("meet"))
    def meet(job):
        # Returns only once 4 handlers run at the same time.
        return str(barrier.wait())

    run_worker(w, concurrency=4)
    got = list(dsjob.Client(server.addr).map(fn("meet"), [b""] * 4, concurrency=4))
    assert sorted(got) == [b"0", b"1", b"2", b"3"]


def test_threads_keep_their_thread_locals(server, run_worker, fn) -> None:
    # Each of run()'s threads keeps its Python thread state from one job to
    # the next (it was made and dropped per job in the library's threads),
    # so what a handler keeps in a threading.local (a connection, say) lasts.
    barrier = threading.Barrier(2, timeout=PATIENCE)
    local = threading.local()
    w = dsjob.Worker(server.addr)

    @w.function(fn("count"))
    def count(job):
        local.n = getattr(local, "n", 0) + 1
        barrier.wait()  # each round's two jobs run one in each thread
        return str(local.n)

    run_worker(w, concurrency=2)
    c = dsjob.Client(server.addr)
    got = [int(r) for _ in range(3) for r in c.map(fn("count"), [b""] * 2, concurrency=2)]
    assert sorted(got) == [1, 1, 2, 2, 3, 3]


def test_exception_reaches_dead_set(tmp_path, run_worker) -> None:
    from conftest import start_dsjobd
    s = start_dsjobd(tmp_path, "--max-dead", "10")
    try:
        w = dsjob.Worker(s.addr)

        @w.function("parse")
        def parse(job):
            raise KeyError("column 'x'")

        @w.function("wrong_type")
        def wrong_type(job):
            return 42

        run_worker(w)
        c = dsjob.Client(s.addr)
        job = c.background("parse", b"row")
        wait_for(lambda: c.dead("parse"), "the dead job")
        (d,) = c.dead("parse")
        assert d["handle"] == job.handle
        assert d["error"] == "KeyError: \"column 'x'\""
        with pytest.raises(dsjob.JobFailed, match="returned int, not bytes or str"):
            c.submit("wrong_type", b"")
    finally:
        s.stop()


def test_job_outlives_its_handler_no_more(dsjobd, run_worker, fn) -> None:
    kept = []
    w = dsjob.Worker(dsjobd.addr)

    @w.function(fn("keep"))
    def keep(job):
        kept.append(job)
        return job.handle

    run_worker(w)
    handle = dsjob.Client(dsjobd.addr).submit(fn("keep"), b"p").decode()
    assert handle.startswith("H:")
    with pytest.raises(RuntimeError, match="has ended"):
        kept[0].send_data(b"late")
    with pytest.raises(RuntimeError, match="has ended"):
        kept[0].payload


def test_jobs_a_handler_keeps_stay_its_own(dsjobd, run_worker, fn) -> None:
    """A Job its handler did not keep serves a later job (no allocation a
    job): each reads its own payload, and a kept one is never reused."""
    kept = []
    w = dsjob.Worker(dsjobd.addr)

    @w.function(fn("echo"))
    def echo(job):
        p = job.payload
        if int(p) % 3 == 0:
            kept.append((job, p))
        return p

    run_worker(w, concurrency=2)
    c = dsjob.Client(dsjobd.addr)
    payloads = [b"%d" % i for i in range(60)]
    assert [c.submit(fn("echo"), p) for p in payloads] == payloads
    assert len({id(j) for j, _ in kept}) == len(kept) == 20
    assert all(j.payload == p for j, p in kept)


def test_work_one_job_in_this_thread(dsjobd, fn) -> None:
    w = dsjob.Worker(dsjobd.addr)
    seen = []

    @w.function(fn("one"))
    def one(job):
        seen.append((job.function, job.unique, threading.current_thread().name))
        return b"ok"

    c = dsjob.Client(dsjobd.addr)
    c.background(fn("one"), b"", unique="u1")
    assert w.work(timeout=PATIENCE) is True
    assert seen == [(fn("one"), "u1", threading.current_thread().name)]
    assert w.work(timeout=0.1) is False


WORKER_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import dsjob
    addr, gate, processes, suffix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    w = dsjob.Worker(addr)

    @w.function("long" + suffix)
    def long(job):
        job.send_data(str(os.getpid()))
        # Finish only once the test has sent SIGTERM and said so.
        while not os.path.exists(gate):
            time.sleep(0.01)
        return b"finished " + job.payload

    @w.function("pid" + suffix)
    def pid(job):
        open(os.path.join(job.payload.decode(), str(os.getpid())), "w").close()
        while len(os.listdir(job.payload.decode())) < 2:
            time.sleep(0.01)
        return str(os.getpid())

    sig = w.run(concurrency=1, processes=processes or None)
    print("stopped by", sig, flush=True)
""")


def start_script(tmp_path: Path, addr: str, fn, processes: int = 0
                 ) -> tuple[subprocess.Popen, Path]:
    """WORKER_SCRIPT in a process of its own: functions fn("long"), fn("pid")."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    gate = tmp_path / "gate"
    p = subprocess.Popen([sys.executable, str(script), addr, str(gate), str(processes),
                          fn("")], stdout=subprocess.PIPE, text=True)
    return p, gate


def test_sigterm_lets_the_running_job_finish(server, tmp_path, fn) -> None:
    p, gate = start_script(tmp_path, server.addr, fn)
    try:
        wait_for(lambda: registered(server.addr, fn("long")), "the worker process")
        c = dsjob.Client(server.addr)
        st = dsjob.Stream()
        it = c.stream(fn("long"), b"job 1", state=st)
        assert int(next(it)) == p.pid  # the job runs in the worker process now
        p.send_signal(signal.SIGTERM)
        # The worker stops taking jobs: a job queued now is not taken.
        queued = c.background(fn("long"), b"job 2")
        gate.touch()
        assert list(it) == [] and st.result == b"finished job 1"
        out, _ = p.communicate(timeout=PATIENCE)
        assert p.returncode == 0
        assert out.strip() == f"stopped by {int(signal.SIGTERM)}"
        assert c.status(queued).known and not c.status(queued).running
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_processes(dsjobd, tmp_path, fn) -> None:
    p, _ = start_script(tmp_path, dsjobd.addr, fn, processes=2)
    try:
        wait_for(lambda: registered(dsjobd.addr, fn("pid"), 2), "two worker processes")
        meet = tmp_path / "meet"
        meet.mkdir()
        c = dsjob.Client(dsjobd.addr)
        pids = set(c.map(fn("pid"), [str(meet)] * 2, concurrency=2))
        assert len(pids) == 2 and str(p.pid).encode() not in pids
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=PATIENCE)
        assert p.returncode == 0 and "stopped by 15" in out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
