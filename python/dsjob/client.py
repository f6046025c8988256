"""The blocking client: dsjob.Client on libdsjobclient."""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from . import _dsjob, admin
from ._errors import Error, JobFailed, NoServer, Refused
from ._util import priority as _priority
from ._util import server_list, timeout_ms, to_bytes

if TYPE_CHECKING:
    import ssl


@dataclass
class TLS:
    """TLS settings of a Client or Worker: ``ca_file`` (None: the system's
    CAs), an optional client certificate, and how much to verify
    (``verify=False`` accepts any certificate: for tests only;
    ``verify_name=False`` checks the chain but not the name)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    verify_name: bool = True

    def flags(self) -> int:
        f = 0
        if not self.verify:
            f |= _dsjob.TLS_NO_VERIFY
        if not self.verify_name:
            f |= _dsjob.TLS_NO_VERIFY_NAME
        return f

    def context(self) -> ssl.SSLContext:
        """An ssl.SSLContext of these settings, for the admin connections."""
        import ssl  # here: most programs never open an admin connection over TLS

        ctx = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        if not self.verify or not self.verify_name:
            ctx.check_hostname = False
        if not self.verify:
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


# A submitted background job: ``handle`` is the server's name for it. A
# class of the extension (dsjob._dsjob.SubmittedJob), so that submit_many
# makes each in C and the handle's str only when it is read; it has the
# __init__, __eq__, __repr__ and pickling of the dataclass it was, and
# here its dataclass fields, so that dataclasses.fields, asdict and
# replace keep working on it.
Job = _dsjob.SubmittedJob


@dataclass
class _JobFields:
    handle: str
    function: str
    unique: str | None = None


Job.__dataclass_fields__ = _JobFields.__dataclass_fields__  # type: ignore[attr-defined]
Job.__dataclass_params__ = _JobFields.__dataclass_params__  # type: ignore[attr-defined]
Job.__match_args__ = _JobFields.__match_args__  # type: ignore[attr-defined]
Job.__annotations__ = _JobFields.__annotations__
del _JobFields


def _parent(p: "Job | str | tuple[str, str]") -> str:
    """An after= entry: a Job's handle, a handle, or a (function, unique)
    pair as "unique:FUNCTION:UNIQUE" with %25, %2C, %3A escapes."""
    if isinstance(p, Job):
        return p.handle
    if isinstance(p, tuple):
        function, unique = p

        def esc(v: str, colon: bool) -> str:
            out = v.replace("%", "%25").replace(",", "%2C")
            return out.replace(":", "%3A") if colon else out
        return "unique:" + esc(str(function), True) + ":" + esc(str(unique), False)
    return str(p)


@dataclass
class Status:
    """What GET_STATUS said about a job."""

    known: bool
    running: bool
    numerator: int
    denominator: int
    waiting: int = 0


@dataclass
class Stream:
    """The state of a streamed job, updated as packets arrive: the last
    WORK_STATUS, the warnings so far, and the result once it ended."""

    status: tuple[int, int] | None = None
    warnings: list[bytes] = field(default_factory=list)
    result: bytes | None = None


_END = object()


class Client:
    """A client of Gearman job servers (dsjobd or gearmand) on libdsjobclient.

    ``servers`` is a "host:port,host:port" string as DSJOB_SERVERS takes
    them, a list of addresses, or None for $DSJOB_SERVERS. ``timeout`` (in
    seconds) bounds every wait for a server: a foreground job that reports
    nothing for that long raises Timeout (None: no limit).
    ``connect_timeout`` bounds a connect. ``tls`` is a TLS instance (or
    True for the system's CAs). A Client may be shared by threads: calls
    are serialized on its one connection per server, with the GIL released
    while they wait.
    """

    def __init__(self, servers: str | Iterable[str] | None = None, *,
                 tls: TLS | bool | None = None, timeout: float | None = None,
                 connect_timeout: float = 5.0) -> None:
        self.servers = server_list(servers)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.tls = TLS() if tls is True else (tls or None)
        self._c = self._new_handle()

    def _new_handle(self) -> _dsjob.Client:
        c = _dsjob.Client(timeout_ms(self.connect_timeout), timeout_ms(self.timeout))
        if self.tls is not None:
            c.set_tls(self.tls.ca_file, self.tls.cert_file, self.tls.key_file,
                      self.tls.flags())
        for s in self.servers:
            c.add_server(s)
        return c

    def __repr__(self) -> str:
        return f"dsjob.Client({','.join(self.servers)!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (the next call opens them again)."""
        self._c = self._new_handle()

    def submit(self, function: str, payload: bytes | str = b"", *, unique: str | None = None,
               priority: str | int = "normal", background: bool = False,
               at: float | int | None = None,
               after: Iterable[Job | str | tuple[str, str]] | None = None, after_fail: str = "fail",
               on_data: Callable[[bytes], Any] | None = None,
               on_status: Callable[[int, int], Any] | None = None,
               on_warning: Callable[[bytes], Any] | None = None) -> Any:
        """Run a job. In the foreground (the default) wait for it and return
        its result bytes; WORK_DATA, WORK_STATUS and WORK_WARNING go to the
        callbacks as they arrive. With ``background=True`` or ``at`` (a run-at
        time, seconds since the epoch) return a :class:`Job` once a server
        has accepted it.

        ``unique`` is the unique key ("-": coalesce on the payload);
        ``priority`` is "normal", "high" or "low".

        ``after`` (background jobs, dsjobd only): the jobs (:class:`Job`,
        handles, or ``(function, unique)`` pairs: the job of that unique key,
        live or kept) this one waits for; dsjobd holds it until they have all
        succeeded. ``after_fail`` says what it does if one fails for good:
        "fail" (it fails too, "parent H failed"), "cancel" (it is dropped)
        or "run" (it runs anyway). An unknown handle raises Refused
        ("DEPENDENCY"); so does gearmand, which knows no dependencies (the
        job is then not submitted). The child reads its parents' results
        with :meth:`Client.result` (dsjobd --keep-results);
        pass it their handles in its payload.

        Raises JobFailed (with the worker's exception text), Refused (the
        server's ERROR code), Timeout or NoServer.
        """
        prio = 0 if priority == "normal" else _priority(priority)
        policies = {"fail": 0, "cancel": 1, "run": 2}
        if after_fail not in policies:
            raise ValueError("after_fail must be 'fail', 'cancel' or 'run'")
        parents = None
        if after is not None:
            if not background and at is None:
                raise ValueError("after= is for background jobs (background=True or at=)")
            parents = [_parent(p) for p in after]
        if background or at is not None:
            if at is not None and prio != 0:
                raise ValueError("a job with a run-at time has the normal priority")
            handle = self._c.submit_bg(function, to_bytes(payload), unique, prio,
                                       None if at is None else int(at), parents,
                                       policies[after_fail])
            return Job(handle, function, unique)
        # The payload goes to C as it is (bytes, str or None, as to_bytes takes it).
        return self._c.submit(function, payload, unique, prio, on_data, on_status, on_warning)

    def background(self, function: str, payload: bytes | str = b"", **kw: Any) -> Job:
        """``submit(..., background=True)``: returns the :class:`Job`."""
        return self.submit(function, payload, background=True, **kw)

    def stream(self, function: str, payload: bytes | str = b"", *,
               unique: str | None = None, priority: str | int = "normal",
               on_status: Callable[[int, int], Any] | None = None,
               on_warning: Callable[[bytes], Any] | None = None,
               state: Stream | None = None) -> Iterator[bytes]:
        """Run a foreground job and yield its WORK_DATA chunks as they arrive.
        Status and warnings go to the callbacks (in the thread that waits)
        and into ``state`` (a :class:`Stream`), with the WORK_COMPLETE bytes
        in ``state.result`` at the end. The job's failure is raised by the
        iteration. The job is waited for in a thread of its own with a
        connection of its own, so the iterator may be consumed slowly."""
        st = state if state is not None else Stream()
        q: queue.Queue[Any] = queue.Queue()

        def status(n: int, d: int) -> None:
            st.status = (n, d)
            if on_status:
                on_status(n, d)

        def warning(w: bytes) -> None:
            st.warnings.append(w)
            if on_warning:
                on_warning(w)

        def run() -> None:
            try:
                c = self._new_handle()
                st.result = c.submit(function, to_bytes(payload), unique, _priority(priority),
                                     q.put, status, warning)
                q.put(_END)
            except BaseException as e:  # handed to the consumer
                q.put(e)

        t = threading.Thread(target=run, name=f"dsjob-stream-{function}", daemon=True)
        t.start()
        try:
            while True:
                item = q.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            t.join()

    def map(self, function: str, payloads: Iterable[bytes | str], *, concurrency: int = 100,
            ordered: bool = False, unique: Callable[[bytes], str | None] | None = None,
            priority: str | int = "normal", timeout: float | None = None) -> Iterator[Any]:
        """Run one foreground job per payload, ``concurrency`` in flight at
        once through the C task set (pipelined on one connection per
        server; a job whose connection fails is submitted again to the next
        server). Yields the results, in the order of ``payloads`` with
        ``ordered=True``, else as they end (per window of ``concurrency``).
        Failures do not stop the others: once every job has ended, an
        ExceptionGroup of JobFailed / Refused / NoServer (each with
        ``.index``, the payload's position) is raised if any failed.
        ``unique`` makes each payload's unique key."""
        if concurrency < 1:
            raise ValueError("concurrency must be 1 or more")
        prio = _priority(priority)
        errors: list[Exception] = []
        items = iter(payloads)
        base = 0
        while True:
            # C takes the payloads as to_bytes does; unique() gets bytes.
            window = list(itertools.islice(items, concurrency))
            if not window:
                break
            uniques = None
            if unique:
                window = [to_bytes(p) for p in window]
                uniques = [unique(p) for p in window]
            ended = self._c.run_tasks(function, window, uniques, prio, False,
                                      timeout_ms(timeout))
            results: dict[int, bytes] = {}
            for index, err, result, errmsg, handle in ended:
                if err == 0:
                    if ordered:
                        results[index] = result
                    else:
                        yield result
                else:
                    errors.append(_task_error(err, errmsg, handle, base + index))
            if len(ended) < len(window):
                done = {e[0] for e in ended}
                for i in range(len(window)):
                    if i not in done:
                        errors.append(_task_error(_dsjob.ERR_TIMEOUT, "the job did not end in "
                                                  "time", "", base + i))
            if ordered:
                for i in range(len(window)):
                    if i in results:
                        yield results[i]
            base += len(window)
        if errors:
            raise ExceptionGroup(f"{len(errors)} of {base} jobs of {function} failed", errors)

    def submit_many(self, function: str, payloads: Sequence[bytes | str], *,
                    priority: str | int = "normal",
                    uniques: Sequence[str | None] | None = None) -> list[Job]:
        """Submit many background jobs pipelined through the C task set and
        return their :class:`Job` handles in the order of ``payloads``.
        Raises an ExceptionGroup when some were refused."""
        # The payloads go to C as they are (bytes, str or None, as to_bytes
        # takes them) and C makes the Jobs: no Python work a job.
        jobs, failed = self._c.submit_many(function, payloads, uniques or None,
                                           _priority(priority), Job)
        if failed:
            errors = [_task_error(err, errmsg, handle, index)
                      for index, err, errmsg, handle in failed]
            raise ExceptionGroup(f"{len(errors)} of {len(jobs)} submits to {function} failed",
                                 errors)
        return jobs

    def status(self, job: Job | str | None = None, *, unique: str | None = None) -> Any:
        """A job's :class:`Status` by handle (a :class:`Job` or its handle)
        or by unique key: whether a server knows it, whether it runs, its
        last WORK_STATUS and (by unique) the foreground clients waiting.
        Without either, the servers' admin "status": one dict per function
        (function, total, running, workers; "server" when there are
        several)."""
        if job is None and unique is None:
            return self._each(admin.status)
        handle = job.handle if isinstance(job, Job) else job
        return Status(*self._c.status(handle, unique))

    def echo(self, data: bytes | str = b"ping") -> None:
        """Check that every server answers ECHO_REQ with the same bytes."""
        self._c.echo(to_bytes(data))

    # Batches (dsjobd), on the admin text protocol of the first server.

    def _batch_line(self, line: str, kind: str = "line") -> bytes:
        return self._admin()[0].ask(line, kind)

    def batch(self, id: str, *, on_complete: str | None = None,
              on_success: str | None = None) -> Batch:
        """Open dsjobd batch ``id`` (1 to 64 of A-Z a-z 0-9 _ . : -) with the
        functions of its callbacks, and return it as a :class:`Batch` whose
        ``submit`` joins jobs to it::

            with client.batch("nightly", on_complete="dataset.merge") as b:
                for shard in range(8):
                    b.submit("dataset.shard", str(shard))

        Raises Refused (BATCH_EXISTS, or STORE_ERROR with a store that keeps
        no batches) and NoServer.
        """
        for name in (on_complete, on_success):
            if name is not None and (not name or any(ch.isspace() for ch in name)):
                raise ValueError(f"bad callback function name {name!r}")
        words = [f"batch open {id}"]
        if on_complete:
            words.append(f"on-complete={on_complete}")
        if on_success:
            words.append(f"on-success={on_success}")
        self._batch_line(" ".join(words))
        return Batch(self, id)

    def batch_status(self, id: str) -> dict[str, Any]:
        """A batch's counts and flags: ``id``, ``total``, ``pending``,
        ``done``, ``failed``, ``dead`` (ints), ``closed``, ``fired_complete``,
        ``fired_success`` (bools), ``on_complete``, ``on_success`` (None for
        none). Refused (UNKNOWN_BATCH) if there is no such batch."""
        return _status_fields(self._batch_line(f"batch status {id}").split(b"\n", 1)[0])

    def batches(self) -> list[dict[str, Any]]:
        """Every batch of the first server, as :meth:`batch_status` gives one."""
        rows = []
        for line in self._batch_line("batch list", "listing").split(b"\n"):
            f = line.rstrip(b"\r").split(b"\t")
            if len(f) != 11:
                continue
            d = [x.decode(errors="replace") for x in f]
            rows.append({"id": d[0], "total": int(d[1]), "pending": int(d[2]),
                         "done": int(d[3]), "failed": int(d[4]), "dead": int(d[5]),
                         "closed": d[6] == "closed",
                         "on_complete": None if d[7] == "-" else d[7],
                         "on_success": None if d[8] == "-" else d[8],
                         "fired_complete": d[9] == "yes", "fired_success": d[10] == "yes"})
        return rows

    # Admin views, on the admin text protocol.

    def _admin(self) -> list[admin.AdminConnection]:
        if not self.servers:
            raise NoServer("no server given (pass servers or set DSJOB_SERVERS)")
        ctx = self.tls.context() if self.tls else None
        t = self.timeout or 5.0
        return [admin.AdminConnection(s, t, ctx) for s in self.servers]

    def _each(self, fn: Callable[[admin.AdminConnection], list[dict[str, Any]]]
              ) -> list[dict[str, Any]]:
        rows = []
        conns = self._admin()
        for conn in conns:
            for row in fn(conn):
                if len(conns) > 1:
                    row = {"server": conn.addr, **row}
                rows.append(row)
        return rows

    def workers(self) -> list[dict[str, Any]]:
        """The servers' "workers": fd, ip, id and functions of each connection."""
        return self._each(admin.workers)

    def jobs(self) -> list[dict[str, Any]]:
        """Every job the servers hold ("show jobs detail"; gearmand's "show
        jobs" fills what it has)."""
        return self._each(admin.jobs)

    def dead(self, function: str | None = None) -> list[dict[str, Any]]:
        """The dead set (dsjobd's "show dead"): the failed background jobs
        kept by --max-dead, with their last failure's text in "error"."""
        return self._each(lambda c: admin.dead(c, function))

    # Flow control and schedules (dsjobd only), on the admin text protocol:
    # a change goes to every server and needs an --admin-allow peer of each.

    def _change(self, line: str) -> None:
        for conn in self._admin():
            admin.change(conn, line)

    def limit(self, function: str, settings: str | None = None) -> dict[str, Any] | None:
        """Sets flow control of function on every server, with settings as
        dsjobd's "limit" command takes them ("concurrency 4 rate 100/s",
        "key-concurrency 2", "off"); with settings None, reads the first
        server's: a dict (function, settings, running, queued, tokens,
        keys, held, started), or None if it does not know the function."""
        name = admin._word(function, "function")
        if settings is not None:
            self._change(f"limit {name} {settings}")
            return None
        rows = admin.limits(self._admin()[0], name)
        return rows[0] if rows else None

    def limits(self) -> list[dict[str, Any]]:
        """Every function's flow control on the servers, as :meth:`limit` reads one."""
        return self._each(admin.limits)

    def pause(self, function: str) -> None:
        """No job of function starts on any server (queued jobs stay, submits are taken)."""
        self.limit(function, "paused")

    def resume(self, function: str) -> None:
        """Jobs of function start again after :meth:`pause`."""
        self.limit(function, "resumed")

    def schedule_add(self, name: str, cron: str, function: str,
                     payload: bytes | str | None = None, *, tz: str | None = None,
                     priority: str | None = None, missed: str | None = None) -> None:
        """Makes (or replaces) the periodic schedule name on every server:
        each tick of cron (five fields, or six with seconds first) submits
        one background job of function with payload (text); tz an IANA
        zone, priority "high"/"normal"/"low", missed "skip" or "once"
        (what happens to ticks missed while no server ran)."""
        words = [admin._word(name, "name"), admin.sched_quote(cron, "cron"),
                 admin._word(function, "function")]
        if payload is not None:
            text = payload.decode() if isinstance(payload, bytes) else payload
            words.append(admin.sched_quote(text, "payload"))
        for key, val in (("tz", tz), ("priority", priority), ("missed", missed)):
            if val is not None:
                words.append(f"{key}={admin._word(val, key)}")
        self._change("schedule add " + " ".join(words))

    def schedule_pause(self, name: str) -> None:
        """Pauses the schedule name: its ticks submit nothing until resumed."""
        self._change(f"schedule pause {admin._word(name, 'name')}")

    def schedule_resume(self, name: str) -> None:
        """Resumes the schedule name from its next tick."""
        self._change(f"schedule resume {admin._word(name, 'name')}")

    def schedule_remove(self, name: str) -> None:
        """Removes the schedule name."""
        self._change(f"schedule rm {admin._word(name, 'name')}")

    def schedules(self) -> list[dict[str, Any]]:
        """The servers' periodic schedules: name, cron, tz, function,
        priority, missed, paused, next_run, last_run, last_outcome, fires."""
        return self._each(admin.schedules)

    def result(self, job: Job | str) -> bytes:
        """The kept result of a background job (dsjobd --keep-results): its
        bytes, or JobFailed with the worker's exception text."""
        handle = job.handle if isinstance(job, Job) else job
        last: Exception | None = None
        for conn in self._admin():
            try:
                return admin.job_outcome(admin.result(conn, handle), handle)
            except Refused as e:
                last = e
                if e.code == "NOT_DONE" and e.text.endswith(" dead"):
                    for row in admin.dead(conn):
                        if row["handle"] == handle:
                            raise JobFailed(row["error"] or f"job {handle} failed",
                                            row["error"] or None, handle) from None
            except JobFailed:
                raise
            except Error as e:
                last = e
        assert last is not None
        raise last


def _status_fields(line: bytes) -> dict[str, Any]:
    """"OK id=b total=3 closed=no ..." as a dict: numbers as int, yes/no as bool,
    "-" as None."""
    out: dict[str, Any] = {}
    for word in line.decode(errors="replace").split()[1:]:
        key, _, val = word.partition("=")
        name = key.replace("-", "_")
        if val.isdigit():
            out[name] = int(val)
        elif val in ("yes", "no"):
            out[name] = val == "yes"
        else:
            out[name] = None if val == "-" else val
    return out


class Batch:
    """A dsjobd batch (see BATCHES in dsjobd(8)), made by
    :meth:`Client.batch`: the background jobs :meth:`submit` sends join it,
    and once it is closed and they have all ended the server submits its
    ``on_complete`` job, and if every one succeeded its ``on_success`` job,
    each once, with a JSON summary (counts, failed handles) as payload.

    Used as a context manager it is closed at the end of the block (unless
    an exception left it, when it stays open). A batch lives on the
    client's first server.
    """

    def __init__(self, client: Client, id: str) -> None:
        self.client = client
        self.id = id
        self._c = _dsjob.Client(timeout_ms(client.connect_timeout), timeout_ms(client.timeout))
        if client.tls is not None:
            self._c.set_tls(client.tls.ca_file, client.tls.cert_file, client.tls.key_file,
                            client.tls.flags())
        self._c.add_server(client.servers[0])
        self._c.set_batch(id)

    def __repr__(self) -> str:
        return f"dsjob.Batch({self.id!r})"

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        if exc_type is None:
            self.close()

    def submit(self, function: str, payload: bytes | str = b"", *, unique: str | None = None,
               priority: str | int = "normal") -> Job:
        """Submit a background job into the batch; the :class:`Job` once the
        server has accepted it. Refused (UNKNOWN_BATCH, BATCH_CLOSED) if the
        batch is gone or closed."""
        prio = 0 if priority == "normal" else _priority(priority)
        handle = self._c.submit_bg(function, to_bytes(payload), unique, prio, None)
        return Job(handle, function, unique)

    def close(self) -> None:
        """Take no more jobs; a batch closed with none fires at once."""
        self.client._batch_line(f"batch close {self.id}")

    def status(self) -> dict[str, Any]:
        """See :meth:`Client.batch_status`."""
        return self.client.batch_status(self.id)


def _task_error(err: int, errmsg: str, handle: str, index: int) -> Exception:
    try:
        _dsjob.raise_error(err, errmsg)
    except Exception as e:  # the exception the code stands for
        if isinstance(e, JobFailed):
            e.handle = handle or None
        setattr(e, "index", index)
        return e
    raise AssertionError("raise_error returned")
