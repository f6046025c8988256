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

from ._errors import Error, JobFailed, NoServer, Refused, Timeout, WorkFail
from . import _dsjob
from ._dsjob import Job as WorkerJob
from .client import Batch, Client, Job, Status, Stream, TLS
from .server import Server
from .worker import GiveBack, Worker
from . import aio

__version__ = "0.1.0"
library_version: str = _dsjob.library_version

__all__ = [
    "Client", "Batch", "Worker", "Server", "Job", "WorkerJob", "Status", "Stream", "TLS",
    "Error", "JobFailed", "NoServer", "Refused", "Timeout", "WorkFail", "GiveBack",
    "__version__", "library_version", "aio",
]
