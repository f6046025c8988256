"""Helpers shared by the client, worker and admin modules."""

from __future__ import annotations

import os
from typing import Iterable

PRIORITIES = {"normal": 0, "high": 1, "low": 2}


def server_list(servers: str | Iterable[str] | None) -> list[str]:
    """The servers as a list: a "host:port,host:port" string (as
    DSJOB_SERVERS takes them), a list of addresses, or None for
    $DSJOB_SERVERS."""
    if servers is None:
        servers = os.environ.get("DSJOB_SERVERS", "")
    if isinstance(servers, str):
        servers = servers.split(",")
    out = [s.strip() for s in servers if s and s.strip()]
    return out


def priority(p: str | int) -> int:
    """The C priority of "normal", "high" or "low"."""
    if isinstance(p, int):
        if p not in (0, 1, 2):
            raise ValueError(f"priority: {p!r} is not 0, 1 or 2")
        return p
    try:
        return PRIORITIES[p]
    except KeyError:
        raise ValueError(f"priority: {p!r} is not 'normal', 'high' or 'low'") from None


def to_bytes(value: object, what: str = "payload") -> bytes:
    """bytes for bytes-like values, UTF-8 for str, b"" for None."""
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be bytes or str, not {type(value).__name__}")


def timeout_ms(seconds: float | None) -> int:
    """Milliseconds for the C calls; None or 0 is no limit."""
    if seconds is None or seconds <= 0:
        return 0
    return max(1, int(seconds * 1000))
