"""dsjob.Job, the background job submit and submit_many return: a class of
the extension that keeps the handle's bytes of a submit_many job and makes
its str on the first read, with the __init__, equality, repr, pickling and
dataclass fields of the dataclass it was. Handles of 63 and 200 bytes (and
one not UTF-8) come from a fake server that names jobs as it is told."""

from __future__ import annotations

import copy
import dataclasses
import gc
import pickle
import socket
import struct
import threading
import tracemalloc
from typing import Iterator

import pytest

import dsjob

REQ, RES = b"\0REQ", b"\0RES"
OPTION_REQ, OPTION_RES, JOB_CREATED = 26, 27, 8
SUBMIT_BG = {18, 32, 34}  # SUBMIT_JOB_BG, _HIGH_BG, _LOW_BG


class FakeServer:
    """Answers OPTION_REQ, and each background submit with JOB_CREATED of
    the handle name(n, function, unique) for the n-th submit (from 0)."""

    def __init__(self, name) -> None:
        self.name = name
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.n = 0
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                out = b""
                while len(buf) >= 12:
                    magic, kind, size = struct.unpack(">4sII", buf[:12])
                    assert magic == REQ
                    if len(buf) < 12 + size:
                        break
                    body, buf = buf[12:12 + size], buf[12 + size:]
                    if kind == OPTION_REQ:
                        out += struct.pack(">4sII", RES, OPTION_RES, size) + body
                    elif kind in SUBMIT_BG:
                        function, unique, _ = body.split(b"\0", 2)
                        h = self.name(self.n, function, unique)
                        self.n += 1
                        out += struct.pack(">4sII", RES, JOB_CREATED, len(h)) + h
                if out:
                    conn.sendall(out)

    def close(self) -> None:
        self.sock.close()


def sized(length: int):
    """Handles of exactly length bytes, each its own: H:xxx...n."""
    def name(n: int, function: bytes, unique: bytes) -> bytes:
        tail = b"%d" % n
        return b"H:" + b"x" * (length - 2 - len(tail)) + tail
    return name


@pytest.fixture
def fake() -> Iterator[callable]:
    servers = []

    def start(name) -> FakeServer:
        servers.append(FakeServer(name))
        return servers[-1]
    yield start
    for s in servers:
        s.close()


@pytest.mark.parametrize("length", [3, 62, 63, 64, 200, 255, 3000])
def test_handles_of_any_length(fake, length: int) -> None:
    s = fake(sized(length))
    c = dsjob.Client(s.addr)
    jobs = c.submit_many("f", [b"a", "b", None], uniques=["u0", None, "u2"])
    want = [sized(length)(i, b"", b"").decode() for i in range(3)]
    assert [len(j.handle) for j in jobs] == [length] * 3
    assert [j.handle for j in jobs] == want
    assert jobs == [dsjob.Job(want[0], "f", "u0"), dsjob.Job(want[1], "f"),
                    dsjob.Job(want[2], "f", "u2")]
    assert repr(jobs[1]) == f"Job(handle={want[1]!r}, function='f', unique=None)"


def test_handles_read_after_the_client_is_gone(fake) -> None:
    # The handles' bytes are the Job's own, not the task set's nor the client's.
    s = fake(sized(200))
    c = dsjob.Client(s.addr)
    jobs = c.submit_many("f", [b"p%d" % i for i in range(300)])
    c.close()
    del c
    gc.collect()
    assert [j.handle for j in jobs] == [sized(200)(i, b"", b"").decode() for i in range(300)]
    assert jobs[7].handle is jobs[7].handle  # made once


def test_handle_not_utf8(fake) -> None:
    s = fake(lambda n, f, u: b"H:\xff\xfe:%d" % n)
    jobs = dsjob.Client(s.addr).submit_many("f", [b"x"])
    assert jobs[0].handle == "H:\udcff\udcfe:0"
    assert jobs[0] == dsjob.Job("H:\udcff\udcfe:0", "f")


def test_function_and_unique_as_given(fake) -> None:
    s = fake(sized(20))
    fn = "résumé"
    jobs = dsjob.Client(s.addr).submit_many(fn, [b"x", b"y"], uniques=["ü1", None],
                                            priority="low")
    assert jobs[0].function is fn and jobs[1].function is fn
    assert jobs[0].unique == "ü1" and jobs[1].unique is None


def test_job_as_the_dataclass(fake) -> None:
    j = dsjob.Job("H:a:1", "f", "u")
    assert j == dsjob.Job(handle="H:a:1", function="f", unique="u")
    assert j != dsjob.Job("H:a:1", "f") and j != ("H:a:1", "f", "u")
    assert repr(j) == "Job(handle='H:a:1', function='f', unique='u')"
    with pytest.raises(TypeError):
        hash(j)
    assert pickle.loads(pickle.dumps(j)) == j and copy.deepcopy(j) == j
    assert dataclasses.is_dataclass(j) and dataclasses.asdict(j) == {
        "handle": "H:a:1", "function": "f", "unique": "u"}
    assert [f.name for f in dataclasses.fields(dsjob.Job)] == ["handle", "function", "unique"]
    assert dataclasses.replace(j, unique=None) == dsjob.Job("H:a:1", "f")
    match j:
        case dsjob.Job(h, f, u):
            assert (h, f, u) == ("H:a:1", "f", "u")
    j.handle, j.unique = "H:b:2", None
    assert j == dsjob.Job("H:b:2", "f")
    del j.unique
    with pytest.raises(AttributeError):
        j.unique
    with pytest.raises(TypeError, match="Job.handle must be str, not int"):
        dsjob.Job(1, "f")
    with pytest.raises(TypeError, match="Job.unique must be str or None"):
        j.unique = b"u"
    # A job of submit_many: its handle made on reading, pickled and set like any other.
    s = fake(sized(30))
    m = dsjob.Client(s.addr).submit_many("f", [b"x", b"y"])
    assert pickle.loads(pickle.dumps(m)) == m
    m[1].handle = "mine"
    assert m[1] == dsjob.Job("mine", "f")
    del m[0].handle
    with pytest.raises(AttributeError):
        m[0].handle


def test_job_subclass(fake) -> None:
    class Mine(dsjob.Job):
        pass
    j = Mine("H:a:1", "f")
    j.note = j  # a cycle through a subclass's __dict__ is collected
    assert j != dsjob.Job("H:a:1", "f") and repr(j).startswith(
        "test_job_subclass.<locals>.Mine(handle='H:a:1'")
    s = fake(sized(9))
    jobs = dsjob.Client(s.addr)._c.submit_many("f", [b"x"], None, 0, Mine)[0]
    assert type(jobs[0]) is Mine and jobs[0] == Mine(sized(9)(0, b"", b"").decode(), "f")


def test_jobs_blocks_freed(fake) -> None:
    # submit_many cuts its jobs out of shared blocks: a block lives as long
    # as one of its jobs, and no longer.
    s = fake(sized(40))
    c = dsjob.Client(s.addr)
    c.submit_many("f", [b"x"] * 10)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        jobs = c.submit_many("f", [b"x"] * 5000)
        full = tracemalloc.get_traced_memory()[0] - base
        kept = jobs[::1000]
        want = [j.handle for j in kept]
        del jobs
        gc.collect()
        some = tracemalloc.get_traced_memory()[0] - base
        assert [j.handle for j in kept] == want == [sized(40)(i, b"", b"").decode()
                                                    for i in range(10, 5010, 1000)]
        del kept, want
        gc.collect()
        after = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert full > 5000 * 40 and some < full / 4 and after < full / 20, (full, some, after)
