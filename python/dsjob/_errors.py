"""The exceptions of dsjob. Every failure carries the reason the library or
the server gave; none is a bare code."""

from __future__ import annotations


class Error(Exception):
    """Base of every dsjob error. ``errno_dsjob`` is the library's
    ``enum dsjob_err`` value when one is known."""

    errno_dsjob: int | None = None


class NoServer(Error, ConnectionError):
    """No server could be used: none given, or none could be reached (the
    message names the server and the system's reason)."""


class Timeout(Error, TimeoutError):
    """A deadline passed: a server did not answer in time, or a job reported
    nothing for the I/O timeout."""


class Refused(Error):
    """The server answered with an ERROR packet: ``code`` is its error code
    (``"QUEUE_FULL"``, ``"NO_WORKER"``, ...), ``text`` its text."""

    def __init__(self, message: str, code: str = "", text: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.text = text


class JobFailed(Error):
    """The job ended without a result: ``text`` is the worker's exception
    text (WORK_EXCEPTION), or None for a plain WORK_FAIL. ``handle`` and
    ``index`` (in map) say which job, when known."""

    def __init__(self, message: str, text: str | None = None, handle: str | None = None,
                 index: int | None = None) -> None:
        super().__init__(message)
        self.text = text
        self.handle = handle
        self.index = index


class WorkFail(Exception):
    """Raise it in a worker's handler to end the job with a plain WORK_FAIL
    (no text) instead of a WORK_EXCEPTION."""
