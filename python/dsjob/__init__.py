"""dsjob for Python: submit jobs to Gearman job servers (dsjobd, gearmand),
do them in workers, and run a dsjobd in-process, on the project's C
libraries (libdsjobclient, libdsjobworker, libdsjobserver).

    import dsjob
    with dsjob.Server() as server:
        worker = dsjob.Worker(server.target)

        @worker.function("reverse")
        def reverse(job):
            return job.payload[::-1]

        ...
        print(dsjob.Client(server.target).submit("reverse", b"hello"))

See help(dsjob.Client), help(dsjob.Worker), help(dsjob.Server) and dsjob.aio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import Error, JobFailed, NoServer, Refused, Timeout, WorkFail
from . import _dsjob
from ._dsjob import Job as WorkerJob
from .client import Batch, Client, Job, Status, Stream, TLS
from .server import Server
from .worker import GiveBack, Worker

if TYPE_CHECKING:
    from . import aio

__version__ = "0.1.0"
library_version: str = _dsjob.library_version

__all__ = [
    "Client", "Batch", "Worker", "Server", "Job", "WorkerJob", "Status", "Stream", "TLS",
    "Error", "JobFailed", "NoServer", "Refused", "Timeout", "WorkFail", "GiveBack",
    "__version__", "library_version", "aio",
]


def __getattr__(name: str) -> Any:
    """dsjob.aio on first use (PEP 562): it imports asyncio, which a
    program of the blocking API alone need not pay for at its start.
    ``import dsjob.aio`` and ``from dsjob import aio`` work as before."""
    if name == "aio":
        import importlib

        return importlib.import_module(".aio", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, aio among them before its first use."""
    return sorted(set(globals()) | {"aio"})
