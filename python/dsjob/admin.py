"""The admin text protocol (status, workers, show jobs detail, show dead,
show result, limit, schedule), spoken over a plain socket (or TLS) to each server, returning
plain Python data. libdsjobclient speaks only the binary protocol; the dsjob
CLI's admin verbs (tools/admin.c) are the reference for these replies."""

from __future__ import annotations

import re
import socket
from typing import TYPE_CHECKING, Any

from ._errors import Error, JobFailed, NoServer, Refused, Timeout

if TYPE_CHECKING:
    import ssl

_HEX = re.compile(rb"\\x([0-9a-fA-F]{2})")


def unescape(field: bytes) -> bytes:
    """dsjobd's escapes undone: "-" is empty, \\xHH a byte."""
    if field == b"-":
        return b""
    return _HEX.sub(lambda m: bytes([int(m.group(1), 16)]) if m.group(1) != b"00" else m.group(0),
                    field)


def _split_addr(addr: str) -> tuple[str, int]:
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else 4730
    if addr.count(":") == 1:
        host, port = addr.split(":")
        return host, int(port)
    return addr, 4730


class AdminConnection:
    """One server's admin connection, opened per request."""

    def __init__(self, addr: str, timeout: float, tls: ssl.SSLContext | None) -> None:
        self.addr = addr
        self.timeout = timeout
        self.tls = tls

    def _connect(self) -> socket.socket:
        try:
            if self.addr.startswith("/"):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(self.timeout)
                s.connect(self.addr)
                return s
            host, port = _split_addr(self.addr)
            s = socket.create_connection((host, port), timeout=self.timeout)
            if self.tls is not None:
                s = self.tls.wrap_socket(s, server_hostname=host)
            return s
        except OSError as e:
            raise NoServer(f"{self.addr}: {e}") from e

    def ask(self, line: str, kind: str) -> bytes:
        """Sends line; returns the whole reply (kind "line", "listing" or "result")."""
        s = self._connect()
        buf = b""
        try:
            s.sendall(line.encode() + b"\n")
            while not self._complete(buf, kind):
                chunk = s.recv(65536)
                if not chunk:
                    raise Error(f"{self.addr}: the server closed the connection mid-reply")
                buf += chunk
        except socket.timeout as e:
            raise Timeout(f"{self.addr}: no complete reply to '{line}' in time") from e
        except OSError as e:
            raise NoServer(f"{self.addr}: {e}") from e
        finally:
            s.close()
        first = buf.split(b"\n", 1)[0].rstrip(b"\r")
        if first == b"ERR" or (first.startswith(b"ERR ") and b"\t" not in first):
            parts = first.decode(errors="replace").split(" ", 2)
            code = parts[1] if len(parts) > 1 else ""
            text = parts[2].replace("+", " ") if len(parts) > 2 else ""
            raise Refused(f"{self.addr}: {code}: {text}", code, text)
        return buf

    @staticmethod
    def _complete(buf: bytes, kind: str) -> bool:
        nl = buf.find(b"\n")
        if nl < 0:
            return False
        first = buf[:nl]
        if first.startswith(b"ERR") and b"\t" not in first:
            return True
        if kind == "result":
            m = re.match(rb"OK \S+ (\d+) ", first)
            if m:
                return len(buf) >= nl + 1 + int(m.group(1)) + 1
            return True
        if kind == "line":
            return True
        return buf.startswith(b".\n") or buf.endswith(b"\n.\n") or buf.endswith(b"\n.\r\n")


def _lines(reply: bytes) -> list[bytes]:
    out = []
    for line in reply.split(b"\n"):
        line = line.rstrip(b"\r")
        if line == b".":
            break
        out.append(line)
    return out


def _num(b: bytes) -> int | None:
    try:
        return int(b)
    except ValueError:
        return None


def status(conn: AdminConnection) -> list[dict[str, Any]]:
    rows = []
    for line in _lines(conn.ask("status", "listing")):
        f = line.split(b"\t")
        if len(f) != 4:
            raise Error(f"{conn.addr}: cannot parse the status line {line!r}")
        rows.append({"function": f[0].decode(errors="surrogateescape"), "total": int(f[1]),
                     "running": int(f[2]), "workers": int(f[3])})
    return rows


def workers(conn: AdminConnection) -> list[dict[str, Any]]:
    rows = []
    for line in _lines(conn.ask("workers", "listing")):
        text = line.decode(errors="surrogateescape")
        fd, ip, rest = text.split(" ", 2)
        m = re.match(r"(.*?) ?:(?: (.*))?$", rest) if not rest.startswith(":") else \
            re.match(r"()(?::)(?: (.*))?$", rest)
        if m is None:
            raise Error(f"{conn.addr}: cannot parse the workers line {line!r}")
        rows.append({"fd": int(fd), "ip": ip, "id": m.group(1),
                     "functions": (m.group(2) or "").split()})
    return rows


def jobs(conn: AdminConnection) -> list[dict[str, Any]]:
    try:
        reply = conn.ask("show jobs detail", "listing")
    except Refused as e:
        if e.code != "UNKNOWN_SHOW_ARGUMENTS":
            raise
        rows = []
        for line in _lines(conn.ask("show jobs", "listing")):
            f = line.split(b"\t")
            rows.append({"handle": f[0].decode(errors="surrogateescape"),
                         "function": None, "priority": None, "state": None,
                         "attempts": _num(f[1]) if len(f) > 1 else None,
                         "run_at": None,
                         "background": bool(_num(f[3])) if len(f) > 3 else None,
                         "unique": None})
        return rows
    rows = []
    for line in _lines(reply):
        f = line.split(b"\t")
        if len(f) != 8:
            raise Error(f"{conn.addr}: cannot parse the show jobs detail line {line!r}")
        rows.append({"handle": f[0].decode(errors="surrogateescape"),
                     "function": f[1].decode(errors="surrogateescape"),
                     "priority": f[2].decode(), "state": f[3].decode(),
                     "attempts": int(f[4]), "run_at": _num(f[5]),
                     "background": f[6] == b"1",
                     "unique": unescape(f[7]).decode(errors="surrogateescape")})
    return rows


def dead(conn: AdminConnection, function: str | None = None) -> list[dict[str, Any]]:
    line = "show dead" + (f" {function}" if function else "")
    rows = []
    for ln in _lines(conn.ask(line, "listing")):
        f = ln.split(b"\t")
        if len(f) != 10:
            raise Error(f"{conn.addr}: cannot parse the show dead line {ln!r}")
        rows.append({"handle": f[0].decode(errors="surrogateescape"),
                     "function": f[1].decode(errors="surrogateescape"),
                     "priority": f[2].decode(), "attempts": int(f[3]),
                     "first_failure": _num(f[4]), "last_failure": _num(f[5]),
                     "size": int(f[6]),
                     "unique": unescape(f[7]).decode(errors="surrogateescape"),
                     "error": unescape(f[8]).decode(errors="replace"),
                     "dropped": int(f[9])})
    return rows


def result(conn: AdminConnection, handle: str) -> dict[str, Any]:
    reply = conn.ask(f"show result {handle}", "result")
    nl = reply.index(b"\n")
    f = reply[:nl].rstrip(b"\r").split(b" ")
    if len(f) != 6 or f[0] != b"OK":
        raise Error(f"{conn.addr}: unexpected reply to show result: {reply[:nl]!r}")
    n = int(f[2])
    return {"outcome": f[1].decode(), "result": reply[nl + 1:nl + 1 + n],
            "numerator": int(f[3]), "denominator": int(f[4]), "size": int(f[5])}


def job_outcome(row: dict[str, Any], handle: str) -> bytes:
    """The bytes of a kept result, or the JobFailed it stands for."""
    if row["outcome"] == "complete":
        if len(row["result"]) < row["size"]:
            raise Error(f"job {handle}: the server kept only {len(row['result'])} of its "
                        f"{row['size']} result bytes (--max-result-size)")
        return row["result"]
    if row["outcome"] == "exception":
        text = row["result"].decode(errors="replace")
        raise JobFailed(text, text, handle)
    raise JobFailed(f"job {handle} failed", None, handle)


def change(conn: AdminConnection, line: str) -> None:
    """A line that changes the server ("limit F ...", "schedule add ..."):
    its OK, or Refused with the server's code and words."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in line):
        raise ValueError(f"an admin line holds no control characters: {line!r}")
    conn.ask(line, "line")


def _word(name: str, what: str) -> str:
    if not name or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        raise ValueError(f"{what} must be one word without blanks or control characters: {name!r}")
    return name


def sched_quote(text: str, what: str) -> str:
    """A word of a schedule line in the quotes it does not hold."""
    q = "'" if "'" not in text else '"'
    if q in text or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        raise ValueError(f"{what} holds both quote characters or a control character: {text!r}")
    return q + text + q


def limits(conn: AdminConnection, function: str | None = None) -> list[dict[str, Any]]:
    """dsjobd's "limit" listing: each function's flow control."""
    line = "limit" + (f" {_word(function, 'function')}" if function else "")
    rows = []
    for ln in _lines(conn.ask(line, "listing")):
        f = ln.decode(errors="surrogateescape").split("\t")
        if len(f) != 8:
            raise Error(f"{conn.addr}: cannot parse the limit line {ln!r}")
        rows.append({"function": f[0], "settings": f[1], "running": int(f[2]),
                     "queued": int(f[3]), "tokens": f[4], "keys": int(f[5]),
                     "held": f[6], "started": int(f[7])})
    return rows


def schedules(conn: AdminConnection) -> list[dict[str, Any]]:
    """dsjobd's "schedule list": each periodic schedule."""
    rows = []
    for ln in _lines(conn.ask("schedule list", "listing")):
        f = ln.decode(errors="surrogateescape").split("\t")
        if len(f) != 11:
            raise Error(f"{conn.addr}: cannot parse the schedule list line {ln!r}")
        rows.append({"name": f[0], "cron": f[1], "tz": f[2], "function": f[3],
                     "priority": f[4], "missed": f[5], "paused": f[6] == "paused",
                     "next_run": None if f[7] == "-" else f[7],
                     "last_run": None if f[8] == "-" else f[8],
                     "last_outcome": None if f[9] == "-" else f[9], "fires": int(f[10])})
    return rows
