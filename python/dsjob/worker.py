"""Workers: dsjob.Worker on libdsjobworker."""

from __future__ import annotations

import logging
import os
import signal
import threading
import traceback
from typing import Any, Callable, Iterable

from . import _dsjob
from ._errors import NoServer, WorkFail
from ._util import server_list
from .client import TLS

Job = _dsjob.Job
Handler = Callable[[Job], Any]

log = logging.getLogger("dsjob.worker")


class GiveBack(Exception):
    """Raise it in a handler for a job that could not even start: the
    connection is closed so the server queues the job again (it counts
    against --job-retries) and the worker pauses before taking more."""


def _outcome(job: Job, r: Any, e: BaseException | None) -> tuple[int, bytes]:
    """What the C dispatch leaves to Python (it completes a job whose
    handler returned bytes, str or None itself): ``e`` the handler's
    exception, else ``r`` what it returned. WorkFail is a WORK_FAIL,
    GiveBack a give-back, any other exception a WORK_EXCEPTION with "Type:
    message" (so the dead set shows it); a bytes-like result completes the
    job, anything else is a WORK_EXCEPTION TypeError."""
    if e is not None:
        if isinstance(e, WorkFail):
            return _dsjob.WORK_FAIL, b""
        if isinstance(e, GiveBack):
            return _dsjob.WORK_GIVE_BACK, b""
        log.warning("job %s of %s raised:\n%s", job.handle, job.function,
                    "".join(traceback.format_exception(e)))
        return _dsjob.WORK_EXCEPTION, f"{type(e).__name__}: {e}".encode(errors="replace")
    if isinstance(r, str):
        return _dsjob.WORK_COMPLETE, r.encode()
    if isinstance(r, (bytes, bytearray, memoryview)):
        return _dsjob.WORK_COMPLETE, bytes(r)
    text = f"TypeError: the handler of {job.function} returned {type(r).__name__}, " \
           "not bytes or str"
    log.warning("%s", text)
    return _dsjob.WORK_EXCEPTION, text.encode()


class Worker:
    """A worker for Gearman job servers (dsjobd or gearmand) on
    libdsjobworker.

    ``servers`` as for :class:`dsjob.Client`. Register handlers with the
    :meth:`function` decorator (or :meth:`register`), then :meth:`run`.
    A handler takes a :class:`dsjob.Job` (``payload``, ``handle``,
    ``unique``, ``function``, ``send_data()``, ``send_status(n, d)``,
    ``warn()``) and returns bytes or str (None: empty). An exception
    becomes a WORK_EXCEPTION with its text, :class:`dsjob.WorkFail` a plain
    WORK_FAIL, :class:`GiveBack` a give-back.
    """

    def __init__(self, servers: str | Iterable[str] | None = None, *,
                 tls: TLS | bool | None = None, id: str | None = None,
                 connect_timeout: float = 5.0, io_timeout: float = 30.0) -> None:
        self.servers = server_list(servers)
        self.tls = TLS() if tls is True else (tls or None)
        self.id = id
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self.functions: dict[str, tuple[Handler, float | None]] = {}
        self._w: _dsjob.Worker | None = None
        self._stopping = False

    def __repr__(self) -> str:
        return f"dsjob.Worker({','.join(self.servers)!r}, functions={list(self.functions)!r})"

    def function(self, name: str | None = None, *, timeout: float | None = None
                 ) -> Callable[[Handler], Handler]:
        """Decorator: ``@worker.function("resize", timeout=30)`` registers
        the function under ``name`` (default: its __name__). ``timeout`` (in
        seconds) is announced with CAN_DO_TIMEOUT: the server takes the job
        back when it runs longer."""

        def deco(fn: Handler) -> Handler:
            self.register(name or fn.__name__, fn, timeout=timeout)
            return fn

        return deco

    def register(self, name: str, fn: Handler, *, timeout: float | None = None) -> None:
        """Registers ``fn`` for ``name`` (see :meth:`function`)."""
        if name in self.functions:
            raise ValueError(f"function '{name}' is already registered")
        if not callable(fn):
            raise TypeError("the handler must be callable")
        self.functions[name] = (fn, timeout)
        if self._w is not None:
            self._w.register(name, fn, _outcome, _ms(timeout))

    def _handle(self) -> _dsjob.Worker:
        if self._w is None:
            if not self.servers:
                raise NoServer("no server given (pass servers or set DSJOB_SERVERS)")
            w = _dsjob.Worker(_ms(self.connect_timeout), _ms(self.io_timeout))
            if self.tls is not None:
                w.set_tls(self.tls.ca_file, self.tls.cert_file, self.tls.key_file,
                          self.tls.flags())
            for s in self.servers:
                w.add_server(s)
            if self.id:
                w.set_id(self.id)
            for name, (fn, timeout) in self.functions.items():
                w.register(name, fn, _outcome, _ms(timeout))
            self._w = w
            if self._stopping:
                w.stop()
        return self._w

    def work(self, timeout: float | None = None) -> bool:
        """Wait for one job (at most ``timeout`` seconds), run it in this
        thread and send its result. Returns whether a job ran."""
        return self._handle().work(_ms(timeout))

    def run(self, concurrency: int = 1, *, processes: int | None = None) -> int:
        """Run jobs until :meth:`stop` or SIGTERM/SIGINT (in the main
        thread): each stops taking jobs and lets the running ones finish
        and send their results. ``concurrency`` jobs run at once in threads
        of the C library, each with its own connections (handlers share the
        GIL; the waits do not hold it). ``processes=N`` forks N processes
        instead, each running this worker with ``concurrency`` threads and
        its own connections (for CPU-bound Python); SIGTERM to this process
        is passed on to them. Returns the signal that stopped it, or 0."""
        if processes:
            return self._run_processes(processes, concurrency)
        main = threading.current_thread() is threading.main_thread()
        return self._handle().run(concurrency, main)

    def _run_processes(self, n: int, concurrency: int) -> int:
        if self._w is not None:
            raise RuntimeError("run(processes=N) must come before any other call that works")
        pids = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    self._handle().run(concurrency, True)
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        caught = 0

        def forward(sig: int, frame: object) -> None:
            nonlocal caught
            caught = sig
            for p in pids:
                try:
                    os.kill(p, signal.SIGTERM)
                except ProcessLookupError:
                    pass

        old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)} \
            if threading.current_thread() is threading.main_thread() else {}
        try:
            for p in pids:
                while True:
                    try:
                        os.waitpid(p, 0)
                        break
                    except InterruptedError:
                        continue
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        return caught

    def stop(self) -> None:
        """Stop taking jobs; running ones finish. From any thread or a
        signal handler. A stopped worker stays stopped."""
        self._stopping = True
        if self._w is not None:
            self._w.stop()


def _ms(seconds: float | None) -> int:
    if seconds is None or seconds <= 0:
        return 0
    return max(1, int(seconds * 1000))
