"""A TCP front of a real Solus server whose first ``goaways`` connections end the way hyper ends
a connection it takes for a rapid-reset attack (issue 46, class 4): once the client's request
HEADERS arrive it answers HTTP/2 GOAWAY, last stream = that request (``last_stream=False``: 0,
the request not taken), ENHANCE_YOUR_CALM, "too_many_resets", and closes - no response headers,
no trailers. Later connections are piped
to the server byte for byte. Listens on a port the OS picks (bound once, held until close)."""
import socket
import struct
import threading

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, HEADERS, GOAWAY = 0x4, 0x1, 0x7
ENHANCE_YOUR_CALM = 0xB


def _frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _read(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


class GoawayProxy:
    def __init__(self, upstream_port, goaways=1, last_stream=True):
        self.upstream_port = upstream_port
        self.last_stream = last_stream  # GOAWAY's last stream id: the request's (as hyper), else 0
        self.goaways_left = goaways
        self.goaways_sent = 0
        self.piped = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def close(self):
        self._closed = True
        self._listener.close()

    def _accept(self):
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                goaway = self.goaways_left > 0
                self.goaways_left -= goaway
            target = self._goaway if goaway else self._pipe
            threading.Thread(target=target, args=(conn,), daemon=True).start()

    def _goaway(self, conn):
        try:
            conn.sendall(_frame(SETTINGS, 0, 0))
            assert _read(conn, len(PREFACE)) == PREFACE
            while True:
                header = _read(conn, 9)
                length = int.from_bytes(header[:3], "big")
                kind, flags = header[3], header[4]
                stream = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
                _read(conn, length)
                if kind == SETTINGS and not flags & 0x1:
                    conn.sendall(_frame(SETTINGS, 0x1, 0))
                elif kind == HEADERS and stream:
                    last = stream if self.last_stream else 0
                    payload = struct.pack(">II", last, ENHANCE_YOUR_CALM) + b"too_many_resets"
                    conn.sendall(_frame(GOAWAY, 0, 0, payload))
                    with self._lock:
                        self.goaways_sent += 1
                    # Closed the way hyper does: the GOAWAY flushed, then the connection shut (a
                    # close with unread input would reset it, and the GOAWAY could be lost).
                    conn.shutdown(socket.SHUT_WR)
                    conn.settimeout(2)
                    try:
                        while conn.recv(65536):
                            pass
                    except OSError:
                        pass
                    return
        except (EOFError, OSError):
            pass
        finally:
            conn.close()

    def _pipe(self, conn):
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            conn.close()
            return
        with self._lock:
            self.piped += 1

        def copy(src, dst):
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
        threading.Thread(target=copy, args=(up, conn), daemon=True).start()
        copy(conn, up)
