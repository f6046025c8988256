"""dsjob.Server: a dsjobd in this process, on libdsjobserver."""

from __future__ import annotations

from typing import Any

from . import _dsjob


class Server:
    """A job server in this process, as tf.data's DispatchServer is used.

    ``Server(port=0, work_dir=None, start=True, **options)``: ``port=0``
    picks a free port (read it from :attr:`port` or :attr:`target`);
    ``work_dir`` keeps background jobs in SQLite there, so they survive the
    process (the DispatchServer's fault-tolerant mode). ``options`` are
    dsjobd's options by name with "_" for "-" (``keep_results=60``,
    ``max_dead=100``, ``listen="127.0.0.1"``, ``verbose="INFO"``,
    ``log_file="stderr"``; the log is off by default). It listens on
    127.0.0.1 unless told otherwise, and serves in a thread of its own
    (the GIL plays no part there). Use it as a context manager to stop it
    at the end.
    """

    def __init__(self, port: int = 0, work_dir: str | None = None, start: bool = True,
                 **options: Any) -> None:
        opts = dict(options)
        opts["port"] = port
        if work_dir is not None:
            opts["work_dir"] = str(work_dir)
            opts.setdefault("store", "sqlite")
        self._s = _dsjob.Server(opts)
        self._port = self._s.port
        self._target = self._s.address
        self._http_port = self._s.http_port
        self._stopped = False
        if start:
            self.start()

    @property
    def port(self) -> int:
        """The TCP port the server is bound to."""
        return self._port

    @property
    def target(self) -> str:
        """"host:port" to give to a Client or Worker."""
        return self._target

    @property
    def http_port(self) -> int:
        """The HTTP port (http_port=0 picks one), -1 without HTTP."""
        return self._http_port

    def start(self) -> None:
        """Serve in a thread of the server's own (idempotent)."""
        if self._stopped:
            raise RuntimeError("a stopped server cannot start again: make a new one")
        self._s.start()

    def join(self) -> None:
        """Wait until the server has stopped (GIL released)."""
        if not self._stopped:
            self._s.join()

    def stop(self, graceful: bool = False) -> None:
        """Stop the server, wait for it, and free it: its port, its store
        (another Server may then open the same work_dir). ``graceful``: stop
        accepting and handing out jobs, let running ones finish first."""
        if not self._stopped:
            self._stopped = True
            self._s.stop(graceful)
            try:
                self._s.join()
            finally:
                self._s.close()

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"dsjob.Server(target={self.target!r})"
