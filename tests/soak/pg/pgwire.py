"""A bare PostgreSQL client for the chaos soak (protocol 3, trust
authentication only, 127.0.0.1 only): enough to hold sessions open (the
connection-exhaustion and idle-in-transaction cells), scan the table (the
readers), call dsjob.submit() in a transaction (with its values sent as
parameters, never in the SQL text) and read the database for the checker.
No psycopg on the machine, and a psql process per session would cost a
process per held connection.
"""
import socket
import struct


class PGError(Exception):
    def __init__(self, fields):
        self.code = fields.get("C", "")
        self.msg = fields.get("M", "")
        super().__init__("%s %s" % (self.code, self.msg))


class PG:
    """One session. query() and execute() return a list of rows (tuples of str
    or None); an ErrorResponse raises PGError once the server is ready again;
    a lost connection raises OSError or EOFError."""

    def __init__(self, port, user="postgres", db="postgres", app="soak-pg", timeout=10.0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.settimeout(timeout)
        self.buf = b""
        body = b""
        for k, v in (("user", user), ("database", db), ("application_name", app)):
            body += k.encode() + b"\0" + v.encode() + b"\0"
        body += b"\0"
        self.s.sendall(struct.pack("!ii", 8 + len(body), 196608) + body)
        self.pid = None
        while True:
            t, m = self._msg()
            if t == b"R":
                if struct.unpack("!i", m[:4])[0] != 0:
                    raise PGError({"M": "only trust authentication is supported"})
            elif t == b"K":
                self.pid = struct.unpack("!i", m[:4])[0]
            elif t == b"E":
                raise PGError(self._fields(m))
            elif t == b"Z":
                return

    def close(self):
        try:
            self.s.sendall(b"X\0\0\0\4")
        except OSError:
            pass
        self.s.close()

    def settimeout(self, t):
        self.s.settimeout(t)

    @staticmethod
    def _fields(m):
        out = {}
        for part in m.split(b"\0"):
            if part:
                out[chr(part[0])] = part[1:].decode(errors="replace")
        return out

    def _need(self, n):
        while len(self.buf) < n:
            d = self.s.recv(1 << 16)
            if not d:
                raise EOFError("PostgreSQL closed the connection")
            self.buf += d

    def _msg(self):
        self._need(5)
        t = self.buf[:1]
        n = struct.unpack("!i", self.buf[1:5])[0]
        self._need(1 + n)
        m = self.buf[5 : 1 + n]
        self.buf = self.buf[1 + n :]
        return t, m

    def _rows_until_ready(self):
        rows, err = [], None
        while True:
            t, m = self._msg()
            if t == b"D":
                n = struct.unpack("!h", m[:2])[0]
                off, row = 2, []
                for _ in range(n):
                    ln = struct.unpack("!i", m[off : off + 4])[0]
                    off += 4
                    if ln < 0:
                        row.append(None)
                    else:
                        row.append(m[off : off + ln].decode(errors="replace"))
                        off += ln
                rows.append(tuple(row))
            elif t == b"E":
                err = PGError(self._fields(m))
            elif t == b"Z":
                if err is not None:
                    raise err
                return rows

    def query(self, sql):
        b = sql.encode() + b"\0"
        self.s.sendall(b"Q" + struct.pack("!i", 4 + len(b)) + b)
        return self._rows_until_ready()

    def send_query(self, sql):
        """Sends a simple query without reading its answer (read_ready reads it)."""
        b = sql.encode() + b"\0"
        self.s.sendall(b"Q" + struct.pack("!i", 4 + len(b)) + b)

    def read_ready(self):
        return self._rows_until_ready()

    def execute(self, sql, params):
        """The extended protocol: params (str or None) go as text values."""
        q = b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0)
        parse = b"P" + struct.pack("!i", 4 + len(q)) + q
        bind = b"\0\0" + struct.pack("!h", 0) + struct.pack("!h", len(params))
        for p in params:
            if p is None:
                bind += struct.pack("!i", -1)
            else:
                e = p.encode()
                bind += struct.pack("!i", len(e)) + e
        bind += struct.pack("!h", 0)
        bind = b"B" + struct.pack("!i", 4 + len(bind)) + bind
        execute = b"E" + struct.pack("!i", 9) + b"\0" + struct.pack("!i", 0)
        sync = b"S" + struct.pack("!i", 4)
        self.s.sendall(parse + bind + execute + sync)
        return self._rows_until_ready()
