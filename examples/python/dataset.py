"""The example dataset in Python, byte for byte that of examples/dataset.c:
row g is "g<TAB>value<TAB>label\n" from the seed and g alone (MINSTD steps),
shard i of n holds the rows with g % n == i, a shard's summary is its count
and the Adler-32 of its rows. The spec and summary are the same JSON lines,
so a Python producer serves the C consumer and the other way round."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass

M = 2147483647
A = 48271
ROW_STRIDE = 2654435
MIX_MUL = 7919
LABELS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
NAME = re.compile(r"[A-Za-z0-9._-]{1,32}\Z")


@dataclass(frozen=True)
class Spec:
    """One shard of one dataset: a dataset.shard job's payload."""

    dataset: str
    shard: int
    shards: int
    seed: int
    rows: int = 1000

    @classmethod
    def parse(cls, payload: bytes) -> Spec:
        """Reads a spec; ValueError says what is wrong (it becomes the
        job's WORK_EXCEPTION text)."""
        try:
            d = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"the spec is not JSON: {e}") from None
        if not isinstance(d, dict):
            raise ValueError("the spec is not a JSON object")
        extra = set(d) - {"dataset", "shard", "shards", "seed", "rows"}
        if extra:
            raise ValueError(f"unknown key '{sorted(extra)[0]}' in the spec")
        spec = cls(d.get("dataset"), d.get("shard"), d.get("shards"), d.get("seed"),
                   d.get("rows", 1000))
        if not isinstance(spec.dataset, str) or not NAME.match(spec.dataset):
            raise ValueError("'dataset' must be a name of [A-Za-z0-9._-], 1 to 32 bytes")
        for key, lo, hi in (("shards", 1, 65536), ("seed", 0, 2147483646),
                            ("rows", 0, 100000000)):
            v = getattr(spec, key)
            if type(v) is not int or not lo <= v <= hi:
                raise ValueError(f"'{key}' must be a number from {lo} to {hi}")
        if type(spec.shard) is not int or not 0 <= spec.shard < spec.shards:
            raise ValueError("'shard' must be a number below 'shards'")
        return spec

    def json(self) -> str:
        return json.dumps({"dataset": self.dataset, "shard": self.shard, "shards": self.shards,
                           "seed": self.seed, "rows": self.rows}, separators=(",", ":"))

    def count(self) -> int:
        """How many rows the shard holds."""
        if self.shard >= self.rows:
            return 0
        return (self.rows - self.shard + self.shards - 1) // self.shards

    def row(self, k: int) -> bytes:
        """The k-th row of the shard, newline included."""
        g = k * self.shards + self.shard
        x = (self.seed + (g + 1) * ROW_STRIDE) % M
        x = x * A % M
        x = (x + (x >> 16) * (x & 0xFFFF) * MIX_MUL) % M
        x = x * A % M
        x = x * A % M
        return f"{g}\t{x % 1000000}\t{LABELS[(x // 1000000) % 8]}\n".encode()


def summary(spec: Spec, count: int, adler: int) -> bytes:
    """The WORK_COMPLETE line of a shard, as the C producer writes it."""
    return (f'{{"dataset":"{spec.dataset}","shard":{spec.shard},"shards":{spec.shards},'
            f'"count":{count},"adler32":"{adler:08x}"}}\n').encode()


def parse_summary(data: bytes) -> dict:
    d = json.loads(data)
    d["adler32"] = int(d["adler32"], 16)
    return d


def adler32(data: bytes, value: int = 1) -> int:
    return zlib.adler32(data, value)
