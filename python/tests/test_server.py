"""dsjob.Server in-process: a port of its own, a target for clients and
workers, stop and join, the context manager, options by name, and with
work_dir background jobs that survive the server."""

from __future__ import annotations

import socket

import pytest

import dsjob
from conftest import PATIENCE


def test_in_process_round_trip(run_worker) -> None:
    with dsjob.Server(port=0) as s:
        assert s.port > 0 and s.target == f"127.0.0.1:{s.port}"
        w = dsjob.Worker(s.target)

        @w.function("upper")
        def upper(job):
            return job.payload.upper()

        r = run_worker(w)
        assert dsjob.Client(s.target).submit("upper", b"abc") == b"ABC"
        r.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=PATIENCE).close()


def test_start_later_and_join() -> None:
    s = dsjob.Server(start=False)
    port = s.port  # bound already: the port is known before it serves
    assert port > 0
    s.start()
    dsjob.Client(s.target).echo(b"ping")
    s.stop()
    s.join()
    with pytest.raises(RuntimeError):
        s.start()


def test_work_dir_keeps_background_jobs(tmp_path, run_worker) -> None:
    with dsjob.Server(work_dir=tmp_path) as s:
        job = dsjob.Client(s.target).background("survive", b"payload")
    with dsjob.Server(work_dir=tmp_path) as s:
        got = []
        w = dsjob.Worker(s.target)

        @w.function("survive")
        def survive(job):
            got.append((job.handle, job.payload))
            return b""

        assert w.work(timeout=PATIENCE)
        assert got == [(job.handle, b"payload")]


def test_options_by_name() -> None:
    with dsjob.Server(keep_results=60, max_dead=5, job_retries=2, verbose="INFO",
                      listen=["127.0.0.1"]) as s:
        c = dsjob.Client(s.target)
        j = c.background("f", b"")
        assert c.status(j).known
    with pytest.raises(TypeError, match="unknown server option 'no_such'"):
        dsjob.Server(no_such=1)
    with pytest.raises(ValueError, match="verbose"):
        dsjob.Server(verbose="LOUD")
