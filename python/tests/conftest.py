"""Fixtures of the dsjob Python suite: real servers (the build tree's
dsjobd on port 0 with --port-file, as tests/lib/server.sh starts it, and
gearmand 1.1.20), and workers in threads that are known to be registered
before a test submits. Every wait is for an event, bounded by a generous
"nothing moved" timeout (the machines are loaded).

make check runs each test that takes the `server` fixture against dsjobd
alone, at the sizes of make check; python/tests/long.sh (make check-long,
which CI runs) runs the suite against dsjobd and gearmand 1.1.20, the
reference, at full size (DSJOB_PY_SERVERS, DSJOB_PY_LONG). The tests that
leave nothing behind that another could see share one server of each kind
for the whole run (`server`, `dsjobd`), each with function names of its own
(`fn`); those that change the server's settings, stop it or count what it
holds start their own."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

import dsjob

TOP_BUILDDIR = Path(os.environ.get("top_builddir", Path(__file__).resolve().parents[2]))
TOP_SRCDIR = Path(os.environ.get("top_srcdir", Path(__file__).resolve().parents[2]))


def program(path: str | Path) -> Path:
    """The program itself for libtool's wrapper script at path (what the
    build leaves at server/dsjobd and examples/* while their libraries are
    not installed): .libs/NAME beside it, with the wrapper's library
    directories put on LD_LIBRARY_PATH for every process the suite starts.
    The wrapper is a bash script that runs a cd and a sed on every start, and
    the suite starts dsjobd and the example programs often (as
    tests/lib/server.sh's unwrap_libtool). Anything else is returned as it is."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(65536)
    except OSError:
        return path
    if "temporary wrapper script for .libs/" not in head:
        return path
    real = path.parent / ".libs" / path.name
    libs = ""
    for line in head.splitlines():
        line = line.strip()
        if line.startswith('LD_LIBRARY_PATH="') and line.endswith(':$LD_LIBRARY_PATH"'):
            libs = line[len('LD_LIBRARY_PATH="'):-len(':$LD_LIBRARY_PATH"')]
            break
    if not libs or not os.access(real, os.X_OK):
        return path
    have = os.environ.get("LD_LIBRARY_PATH", "")
    for d in reversed(libs.split(":")):
        if d and d not in have.split(":"):
            have = d + (":" + have if have else "")
    os.environ["LD_LIBRARY_PATH"] = have
    return real


DSJOBD = str(program(os.environ.get("DSJOBD") or TOP_BUILDDIR / "server" / "dsjobd"))
GEARMAND = os.environ.get("GEARMAND") or shutil.which("gearmand", path="/usr/sbin:/usr/bin")
PATIENCE = 30.0  # seconds without progress before a wait gives up
#: The servers a test that takes `server` runs against (make check: dsjobd).
SERVERS = os.environ.get("DSJOB_PY_SERVERS", "dsjobd").split()
#: make check-long's full sizes rather than make check's (python/tests/long.sh).
LONG = os.environ.get("DSJOB_PY_LONG", "") == "1"


def sized(check: int, long: int) -> int:
    """A count of make check (check) or, in make check-long, of its full size."""
    return long if LONG else check


def wait_for(cond: Callable[[], object], what: str, timeout: float = PATIENCE) -> object:
    """Polls cond until it is true; fails the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        # 0.02 s for the first half second, then 0.1 s: a long wait on a
        # loaded machine does not spend its CPU on asking.
        time.sleep(0.02 if time.monotonic() < deadline - timeout + 0.5 else 0.1)


class Proc:
    """A server process we started: its address, log, and how to stop it."""

    def __init__(self, kind: str, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.kind = kind
        self.proc = proc
        self.port = port
        self.log = log
        self.addr = f"127.0.0.1:{port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_dsjobd(tmp: Path, *args: str) -> Proc:
    log = tmp / f"dsjobd.{time.monotonic_ns()}.log"
    pf = Path(str(log) + ".port")
    p = subprocess.Popen([DSJOBD, "-L", "127.0.0.1", "-p", "0", "--port-file", str(pf),
                          "-l", str(log), *args])
    wait_for(lambda: (pf.exists() and pf.read_text().strip()) or p.poll() is not None,
             "dsjobd's port file")
    if p.poll() is not None:
        pytest.fail(f"dsjobd exited {p.returncode}: {log.read_text() if log.exists() else ''}")
    return Proc("dsjobd", p, int(pf.read_text()), log)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def can_connect(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def start_gearmand(tmp: Path, *args: str) -> Proc:
    if not GEARMAND or not os.access(GEARMAND, os.X_OK):
        pytest.skip("gearmand is not installed")
    port = free_port()
    log = tmp / f"gearmand.{time.monotonic_ns()}.log"
    p = subprocess.Popen([GEARMAND, "--listen=127.0.0.1", f"--port={port}", "--threads=0",
                          f"--log-file={log}", *args])
    wait_for(lambda: can_connect(port) or p.poll() is not None, "gearmand to listen")
    if p.poll() is not None:
        pytest.fail(f"gearmand exited {p.returncode}")
    return Proc("gearmand", p, port, log)


SHARED_ARGS = ("--keep-results", "300", "--max-dead", "100")


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Proc]]:
    """shared(kind): the one dsjobd (with kept results and a dead set, for
    the admin views) or gearmand of the run, started on first use."""
    servers: dict[str, Proc] = {}

    def get(kind: str) -> Proc:
        s = servers.get(kind)
        if s is None:
            s = servers[kind] = start_server(kind, tmp_path_factory.mktemp(f"shared-{kind}"))
        elif s.proc.poll() is not None:
            pytest.fail(f"the shared {kind} exited {s.proc.returncode}: see {s.log}")
        return s

    yield get
    for s in servers.values():
        s.stop()


def start_server(kind: str, tmp: Path) -> Proc:
    """A dsjobd with kept results and a dead set, or a gearmand 1.1.20."""
    return start_dsjobd(tmp, *SHARED_ARGS) if kind == "dsjobd" else start_gearmand(tmp)


@pytest.fixture
def dsjobd(shared: Callable[[str], Proc]) -> Proc:
    """The run's dsjobd, with kept results and a dead set, for the admin views."""
    return shared("dsjobd")


@pytest.fixture
def gearmand(tmp_path: Path) -> Iterator[Proc]:
    s = start_gearmand(tmp_path)
    yield s
    s.stop()


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, shared: Callable[[str], Proc]) -> Proc:
    """Each test that takes it runs against the run's dsjobd (and, in make
    check-long, its gearmand 1.1.20)."""
    return shared(request.param)


@pytest.fixture(params=SERVERS)
def own_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Proc]:
    """As `server`, but a server of the test's own, for a test whose workers
    must be the only ones."""
    s = start_server(request.param, tmp_path)
    yield s
    s.stop()


@pytest.fixture
def fn() -> Callable[[str], str]:
    """fn(name): name as the test's own function name on a shared server
    (name.N, N this test's number), so no test sees another's jobs or workers."""
    n = next(_test_numbers)
    return lambda name: f"{name}.{n}"


_test_numbers = itertools.count(1)


def registered(addr: str, function: str, n: int = 1) -> bool:
    """Whether the server lists at least n workers for function."""
    try:
        rows = dsjob.Client(addr).status()
    except dsjob.Error:
        return False
    return any(r["function"] == function and r["workers"] >= n for r in rows)


class Running:
    """A Worker running in a thread; stop() stops it and joins the thread."""

    def __init__(self, worker: dsjob.Worker, concurrency: int) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(concurrency,), daemon=True)
        self.thread.start()

    def _run(self, concurrency: int) -> None:
        try:
            self.worker.run(concurrency)
        except BaseException as e:
            self.error = e

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(PATIENCE)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert self.error is None, self.error


@pytest.fixture
def run_worker() -> Iterator[Callable[..., Running]]:
    """run_worker(worker, concurrency=1): runs it in a thread and returns
    once the server lists it for each of its functions."""
    started: list[Running] = []

    def start(worker: dsjob.Worker, concurrency: int = 1) -> Running:
        r = Running(worker, concurrency)
        started.append(r)
        for s in worker.servers:
            for f in worker.functions:
                wait_for(lambda: registered(s, f, concurrency), f"a worker for {f} on {s}")
        return r

    yield start
    for r in started:
        r.stop()
