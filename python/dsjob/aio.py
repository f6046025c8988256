"""dsjob for asyncio: a Client whose jobs wait on the event loop, on
libdsjobclient's non-blocking API (dsjob_async(3)): one connection per
server, any number of jobs in flight on it, driven by loop.add_reader and
add_writer (no thread per job); and a Worker whose handlers may be
``async def``."""

from __future__ import annotations

import asyncio
import collections

import zlib
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable

from . import _dsjob
from . import client as _client
from ._errors import JobFailed, NoServer
from ._util import priority as _priority
from ._util import server_list, timeout_ms, to_bytes
from .client import TLS, Job
from .worker import Worker as _SyncWorker

__all__ = ["Client", "Worker"]

_EV_CREATED = _dsjob.EV_CREATED
_EV_STATUS = _dsjob.EV_STATUS
_EV_DATA = _dsjob.EV_DATA
_EV_WARNING = _dsjob.EV_WARNING
_EV_COMPLETE = _dsjob.EV_COMPLETE
_EV_FAIL = _dsjob.EV_FAIL


def _failure(err: int, text: str) -> Exception:
    try:
        _dsjob.raise_error(err, text)
    except Exception as e:  # the exception the code stands for
        return e
    raise AssertionError("raise_error returned")


class _Sink:
    """Where map's jobs end: step() appends (index, result or exception)
    to ``items`` with no future, no callback and no task a job; the
    connection wakes ``waiter`` once the step is over."""

    __slots__ = ("items", "append", "waiter")

    def __init__(self) -> None:
        self.items: collections.deque = collections.deque()
        self.append = self.items.append
        self.waiter: asyncio.Future | None = None

    def wake(self) -> None:
        w = self.waiter
        if w is not None and self.items and not w.done():
            w.set_result(None)


class _Conn:
    """One server's connection: the C handle, its descriptor on the loop,
    and the jobs in flight by id."""

    def __init__(self, client: Client, addr: str) -> None:
        self.client = client
        self.addr = addr
        self.loop = asyncio.get_running_loop()
        # The jobs in flight by id: a future each, or (sink.append, index)
        # for map's (nothing else, to keep a job small); a stream's queue
        # and the background jobs aside. The C side reads the three: a
        # plain foreground job's end reaches its future or sink from
        # step() itself, and its other events are dropped there.
        self.jobs: dict[int, asyncio.Future | tuple] = {}
        self.queues: dict[int, asyncio.Queue] = {}
        self.background: set[int] = set()
        self.sinks: set[_Sink] = set()
        self.c = _dsjob.AsyncConn(addr, self._event, self.jobs, self.queues, self.background)
        if client.tls is not None:
            t = client.tls
            self.c.set_tls(t.ca_file, t.cert_file, t.key_file, t.flags())
        self.fd = -1
        self.writing = False
        self.flushing = False
        self.connecting: asyncio.Future | None = None
        self.waiters: list[asyncio.Future] = []

    def ready(self) -> asyncio.Future | None:
        """None when connected, else a future to await until the connection
        is up (or its exception): the connect runs once for every caller,
        each waiting on a future of its own, so that cancelling one leaves
        the others and the connect alone (and costs no coroutine)."""
        if self.fd >= 0:
            return None
        if self.connecting is None:
            self.connecting = asyncio.ensure_future(self._connect())
            self.connecting.add_done_callback(self._connected)
        w = self.loop.create_future()
        self.waiters.append(w)
        return w

    def _connected(self, t: asyncio.Future) -> None:
        self.connecting = None
        waiters, self.waiters = self.waiters, []
        for w in waiters:
            if w.done():
                continue
            if t.cancelled():
                w.cancel()
            elif t.exception() is not None:
                w.set_exception(t.exception())
            else:
                w.set_result(None)

    async def _connect(self) -> None:
        fd = await self.loop.run_in_executor(
            None, self.c.connect, timeout_ms(self.client.connect_timeout))
        self.fd = fd
        self.loop.add_reader(fd, self._ready)
        self._want_write()

    def _want_write(self) -> None:
        w = self.c.want_write()
        if w and not self.writing:
            self.loop.add_writer(self.fd, self._ready)
            self.writing = True
        elif not w and self.writing:
            self.loop.remove_writer(self.fd)
            self.writing = False

    def _flush_soon(self) -> None:
        """Jobs were queued: one step later in this turn of the loop writes
        all of them (a writer is watched for only if the socket does not
        take them all, so a turn costs no epoll_ctl)."""
        if not self.flushing:
            self.flushing = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flushing = False
        if self.fd >= 0 and self.c is not None:
            self._ready()

    def _ready(self) -> None:
        err = self.c.step()
        for s in self.sinks:
            s.wake()
        if err != 0:
            self._lost()
            return
        self._want_write()

    def _lost(self) -> None:
        """The connection failed: every job has had its fail event; stop
        watching the old descriptor (the next submit connects again)."""
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            if self.writing:
                self.loop.remove_writer(self.fd)
        self.fd = -1
        self.writing = False

    def _event(self, kind: int, id: int, a: Any, b: Any) -> None:
        if kind == _EV_COMPLETE:
            f = self.jobs.pop(id, None)
            if f is not None:
                self.queues.pop(id, None)
                if type(f) is tuple:
                    f[0]((f[1], a))
                elif not f.done():
                    f.set_result(a)
            return
        if kind == _EV_FAIL:
            f = self.jobs.pop(id, None)
            if f is None:
                return
            self.queues.pop(id, None)
            self.background.discard(id)
            if type(f) is tuple or not f.done():
                e = _failure(a, f"{self.addr}: {b}" if a == _dsjob.ERR_SERVER else b)
                if isinstance(e, JobFailed):
                    e.text = b if a == _dsjob.ERR_JOB_EXCEPTION else None
                if type(f) is tuple:
                    f[0]((f[1], e))
                else:
                    f.set_exception(e)
            return
        if kind == _EV_CREATED and id in self.background:
            self.background.discard(id)
            f = self.jobs.pop(id, None)
            if f is not None and not f.done():
                f.set_result(a)
            return
        q = self.queues.get(id)
        if q is not None:
            q.put_nowait(("created", a) if kind == _EV_CREATED else (kind, a, b))

    def submit(self, function: str, payload: Any, unique: str | None, prio: int,
               background: bool, queue: asyncio.Queue | None, sink: tuple | None = None
               ) -> tuple[int, asyncio.Future | None]:
        """Queues a job; its end goes to the future returned, or to
        ``sink``, a (sink.append, index) pair of map's (then None)."""
        if self.fd < 0 or self.c.fd() < 0:
            self._lost()
            raise NoServer(f"{self.addr}: not connected")
        # Only queued: the writer callback's step writes every job queued
        # in this turn of the loop in one go.
        id = self.c.submit(function, payload, unique, prio, background)
        if sink is not None:
            self.jobs[id] = sink
            f = None
        else:
            f = self.jobs[id] = self.loop.create_future()
        if background:
            self.background.add(id)
        if queue is not None:
            self.queues[id] = queue
        if not self.writing:
            self._flush_soon()
        return id, f

    def forget(self, id: int) -> None:
        self.queues.pop(id, None)
        self.background.discard(id)
        if self.jobs.pop(id, None) is not None:
            self.c.forget(id)

    def close(self) -> None:
        self._lost()
        for f in self.jobs.values():
            e = NoServer(f"{self.addr}: the client was closed")
            if type(f) is tuple:
                f[0]((f[1], e))
            elif not f.done():
                f.set_exception(e)
        self.jobs.clear()
        for s in self.sinks:
            s.wake()
        self.queues.clear()
        self.background.clear()
        self.c = None


class Client:
    """The asyncio client: the methods of :class:`dsjob.Client` as
    coroutines and async iterators, with jobs in flight on one connection
    per server (pipelined; thousands at once, no thread per job).
    Cancelling a task that awaits a job forgets the job (the server runs it
    anyway) and leaves the connection usable. A job with a unique key goes
    to the server its key hashes to (CRC-32, not the C client's ring), one
    without to the servers in turn. Make it inside a running loop, or call
    it there: connections belong to the loop that made them.
    """

    def __init__(self, servers: str | Iterable[str] | None = None, *,
                 tls: TLS | bool | None = None, timeout: float | None = None,
                 connect_timeout: float = 5.0) -> None:
        self.servers = server_list(servers)
        self.tls = TLS() if tls is True else (tls or None)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._conns: dict[str, _Conn] = {}
        self._rr = 0
        self._blocking: _client.Client | None = None

    def _sync(self) -> _client.Client:
        if self._blocking is None:
            self._blocking = _client.Client(self.servers, tls=self.tls, timeout=self.timeout,
                                            connect_timeout=self.connect_timeout)
        return self._blocking

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections; jobs still awaited raise NoServer."""
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def _pick(self, unique: str | None) -> list[str]:
        if not self.servers:
            raise NoServer("no server given (pass servers or set DSJOB_SERVERS)")
        n = len(self.servers)
        if n == 1:
            return self.servers
        if unique:
            first = zlib.crc32(unique.encode()) % n
        else:
            first = self._rr % n
            self._rr += 1
        return [self.servers[(first + k) % n] for k in range(n)]

    def _conn(self, addr: str) -> _Conn:
        c = self._conns.get(addr)
        if c is None or c.c is None:
            c = self._conns[addr] = _Conn(self, addr)
        return c

    def _start_now(self, order: list[str], function: str, payload: Any, unique: str | None,
                   prio: int, background: bool, queue: asyncio.Queue | None,
                   sink: tuple | None = None) -> tuple[_Conn, int, asyncio.Future | None] | None:
        """Submits on the first server's connection if it is up (no await,
        no coroutine: the common case); None when _start must wait."""
        c = self._conns.get(order[0])
        if c is None or c.fd < 0 or c.c is None:
            return None
        try:
            return (c, *c.submit(function, payload, unique, prio, background, queue, sink))
        except NoServer:
            return None

    async def _start(self, order: list[str], function: str, payload: Any, unique: str | None,
                     prio: int, background: bool, queue: asyncio.Queue | None,
                     sink: tuple | None = None) -> tuple[_Conn, int, asyncio.Future | None]:
        """Submits to the servers of ``order`` in turn, connecting as needed."""
        last: Exception | None = None
        for addr in order:
            try:
                conn = self._conn(addr)
                w = conn.ready()
                if w is not None:
                    await w
                id, f = conn.submit(function, payload, unique, prio, background, queue, sink)
                return conn, id, f
            except NoServer as e:
                last = e
        assert last is not None
        raise last

    async def submit(self, function: str, payload: bytes | str = b"", *,
                     unique: str | None = None, priority: str | int = "normal",
                     background: bool = False, at: float | int | None = None) -> Any:
        """As :meth:`dsjob.Client.submit`: the result bytes, or a
        :class:`dsjob.Job` for a background job (``at``: submitted through
        the blocking client in a thread)."""
        if at is not None:
            return await asyncio.to_thread(self._sync().submit, function, payload,
                                           unique=unique, priority=priority, at=at)
        # One coroutine (this one) and one future a job: the payload goes
        # to C as it is (bytes, str or None, as to_bytes takes it).
        prio = 0 if priority == "normal" else _priority(priority)
        order = self._pick(unique)
        started = self._start_now(order, function, payload, unique, prio, background, None)
        if started is None:
            started = await self._start(order, function, payload, unique, prio, background,
                                        None)
        conn, id, f = started
        try:
            if self.timeout:
                r = await asyncio.wait_for(asyncio.shield(f), self.timeout)
            else:
                r = await f
        except asyncio.TimeoutError:
            conn.forget(id)
            raise _failure(_dsjob.ERR_TIMEOUT, f"job did not end within {self.timeout} s")
        except asyncio.CancelledError:
            conn.forget(id)
            raise
        return Job(r, function, unique) if background else r

    async def background(self, function: str, payload: bytes | str = b"", **kw: Any) -> Job:
        return await self.submit(function, payload, background=True, **kw)

    async def stream(self, function: str, payload: bytes | str = b"", *,
                     unique: str | None = None, priority: str | int = "normal",
                     on_status: Callable[[int, int], Any] | None = None,
                     on_warning: Callable[[bytes], Any] | None = None,
                     state: _client.Stream | None = None) -> AsyncIterator[bytes]:
        """Yields the job's WORK_DATA chunks as they arrive; status and
        warnings go to the callbacks and ``state``; the result ends up in
        ``state.result``; a failure is raised by the iteration."""
        st = state if state is not None else _client.Stream()
        q: asyncio.Queue = asyncio.Queue()
        conn, id, f = await self._start(self._pick(unique), function, to_bytes(payload), unique,
                                        _priority(priority), False, q)
        try:
            while True:
                if q.empty() and f.done():
                    st.result = f.result()
                    return
                get = asyncio.ensure_future(q.get())
                done, _ = await asyncio.wait({get, f}, return_when=asyncio.FIRST_COMPLETED)
                if get not in done:
                    get.cancel()
                    continue
                item = get.result()
                if item[0] == _EV_DATA:
                    yield item[1]
                elif item[0] == _EV_STATUS:
                    st.status = (item[1], item[2])
                    if on_status:
                        on_status(item[1], item[2])
                elif item[0] == _EV_WARNING:
                    st.warnings.append(item[1])
                    if on_warning:
                        on_warning(item[1])
        finally:
            if not f.done():
                conn.forget(id)

    async def map(self, function: str, payloads: Iterable[bytes | str], *,
                  concurrency: int = 1000, ordered: bool = False,
                  priority: str | int = "normal") -> AsyncIterator[bytes]:
        """Runs one job per payload, ``concurrency`` in flight, and yields
        the results (in payload order with ``ordered``, else as they end).
        Once all have ended, an ExceptionGroup of the failures (each with
        ``.index``) is raised if any failed. No task, future or callback
        per job: step() appends each end to the map's queue itself."""
        if concurrency < 1:
            raise ValueError("concurrency must be 1 or more")
        prio = _priority(priority)
        loop = asyncio.get_running_loop()
        items = enumerate(payloads)
        sink = _Sink()
        ended = sink.items
        append = sink.append
        in_flight: dict[int, tuple[_Conn, int]] = {}
        conns: set[_Conn] = set()
        kept: dict[int, bytes | None] = {}
        errors: list[Exception] = []
        next_out = 0
        total = 0
        exhausted = False
        one = self.servers[0] if len(self.servers) == 1 else None
        try:
            while True:
                while not exhausted and len(in_flight) < concurrency:
                    try:
                        i, p = next(items)
                    except StopIteration:
                        exhausted = True
                        break
                    total += 1
                    if one is not None:
                        # One server, connected: the job goes straight to
                        # C (the next step writes it), as _Conn.submit does.
                        conn = self._conns.get(one)
                        if conn is not None and conn.fd >= 0 and conn.c is not None \
                                and conn in conns:
                            try:
                                id = conn.c.submit(function, p, None, prio, False)
                            except Exception:
                                pass  # the path below connects again, or raises
                            else:
                                conn.jobs[id] = (append, i)
                                in_flight[i] = (conn, id)
                                if not conn.writing:
                                    conn._flush_soon()
                                continue
                    order = self._pick(None)
                    started = self._start_now(order, function, p, None, prio, False, None,
                                              (append, i))
                    if started is None:
                        started = await self._start(order, function, p, None, prio, False, None,
                                                    (append, i))
                    conn, id, _ = started
                    if conn not in conns:
                        conns.add(conn)
                        conn.sinks.add(sink)
                    in_flight[i] = (conn, id)
                if not in_flight and not ended:
                    break
                if not ended:
                    sink.waiter = loop.create_future()
                    try:
                        await sink.waiter
                    finally:
                        sink.waiter = None
                while ended:
                    i, r = ended.popleft()
                    del in_flight[i]
                    if isinstance(r, Exception):
                        setattr(r, "index", i)
                        errors.append(r)
                        if ordered:
                            kept[i] = None
                    elif ordered:
                        kept[i] = r
                    else:
                        yield r
                if ordered:
                    while next_out in kept:
                        r = kept.pop(next_out)
                        next_out += 1
                        if r is not None:
                            yield r
        finally:
            for conn, id in in_flight.values():
                conn.forget(id)
            for conn in conns:
                conn.sinks.discard(sink)
        if errors:
            raise ExceptionGroup(f"{len(errors)} of {total} jobs of {function} failed", errors)

    async def status(self, job: Job | str | None = None, *, unique: str | None = None) -> Any:
        """As :meth:`dsjob.Client.status` (in a thread, on the blocking client)."""
        return await asyncio.to_thread(self._sync().status, job, unique=unique)

    async def result(self, job: Job | str) -> bytes:
        return await asyncio.to_thread(self._sync().result, job)

    async def workers(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._sync().workers)

    async def jobs(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._sync().jobs)

    async def dead(self, function: str | None = None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._sync().dead, function)

    async def limit(self, function: str, settings: str | None = None) -> dict[str, Any] | None:
        """As :meth:`dsjob.Client.limit`."""
        return await asyncio.to_thread(self._sync().limit, function, settings)

    async def limits(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._sync().limits)

    async def pause(self, function: str) -> None:
        await asyncio.to_thread(self._sync().pause, function)

    async def resume(self, function: str) -> None:
        await asyncio.to_thread(self._sync().resume, function)

    async def schedule_add(self, name: str, cron: str, function: str,
                           payload: bytes | str | None = None, **kw: Any) -> None:
        """As :meth:`dsjob.Client.schedule_add`."""
        await asyncio.to_thread(self._sync().schedule_add, name, cron, function, payload, **kw)

    async def schedule_pause(self, name: str) -> None:
        await asyncio.to_thread(self._sync().schedule_pause, name)

    async def schedule_resume(self, name: str) -> None:
        await asyncio.to_thread(self._sync().schedule_resume, name)

    async def schedule_remove(self, name: str) -> None:
        await asyncio.to_thread(self._sync().schedule_remove, name)

    async def schedules(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._sync().schedules)

    def pending(self) -> int:
        """Jobs in flight over every connection, as the C library counts them."""
        return sum(c.c.pending() for c in self._conns.values() if c.c is not None)


class Worker:
    """A worker whose handlers may be ``async def``: the C worker runs in
    threads (``concurrency`` of them) and each job's handler runs on the
    event loop that called :meth:`run`; a plain function runs in the C
    worker's thread as with :class:`dsjob.Worker`. The job's
    ``send_data``/``send_status``/``warn`` are quick writes and may be
    called from the handler directly."""

    def __init__(self, servers: str | Iterable[str] | None = None, **kw: Any) -> None:
        self._w = _SyncWorker(servers, **kw)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def functions(self) -> dict:
        return self._w.functions

    @property
    def servers(self) -> list[str]:
        return self._w.servers

    def function(self, name: str | None = None, *, timeout: float | None = None
                 ) -> Callable[[Callable], Callable]:
        def deco(fn: Callable) -> Callable:
            self.register(name or fn.__name__, fn, timeout=timeout)
            return fn

        return deco

    def register(self, name: str, fn: Callable[..., Any], *, timeout: float | None = None
                 ) -> None:
        if asyncio.iscoroutinefunction(fn):
            def call(job: Any, fn: Callable[..., Awaitable[Any]] = fn) -> Any:
                if self._loop is None:
                    raise RuntimeError("an async handler needs Worker.run() on a loop")
                return asyncio.run_coroutine_threadsafe(fn(job), self._loop).result()

            self._w.register(name, call, timeout=timeout)
        else:
            self._w.register(name, fn, timeout=timeout)

    async def run(self, concurrency: int = 1) -> None:
        """Runs jobs until :meth:`stop` (or the task is cancelled, which
        stops the worker and lets running jobs finish)."""
        self._loop = asyncio.get_running_loop()
        t = asyncio.ensure_future(asyncio.to_thread(self._w.run, concurrency))
        try:
            await asyncio.shield(t)
        except asyncio.CancelledError:
            self._w.stop()
            await t
            raise

    def stop(self) -> None:
        self._w.stop()


