"""A real `solus serve` for the tests: the cargo-built binary named by SOLUS_BIN."""
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SolusServer:
    """``env``: extra SOLUS__* settings, e.g. {"SOLUS__LIMITS__MAX_CONCURRENT_REQUESTS": "1"}."""

    def __init__(self, env=None):
        binary = os.environ.get("SOLUS_BIN")
        if not binary or not os.access(binary, os.X_OK):
            raise RuntimeError("SOLUS_BIN must name the cargo-built solus binary (run `cargo build`, then "
                               "SOLUS_BIN=target/debug/solus); got " + repr(binary))
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="solus-py-test")
        self.port = _free_port()
        self.metrics_port = _free_port()
        self.proc = None
        self.env = dict(env or {})

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        env = {k: v for k, v in os.environ.items() if k not in ("RUST_LOG", "SOLUS_BIN")}
        env.update(SOLUS__SERVER__LISTEN=self.address, SOLUS__METRICS__LISTEN=f"127.0.0.1:{self.metrics_port}",
                   SOLUS__STORAGE__EMBEDDED__PATH=os.path.join(self.dir, "data"),
                   SOLUS__SERVER__DRAIN_TIMEOUT_MS="5000", NO_COLOR="1")
        env.update(self.env)
        log = open(os.path.join(self.dir, "server.log"), "ab")
        self.proc = subprocess.Popen([self.binary, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        until = time.monotonic() + 60
        while time.monotonic() < until:
            if self.proc.poll() is not None:
                raise RuntimeError(f"solus serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"solus serve did not listen on {self.address} within 60 s:\n{self.log()}")

    def stop(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self):
        with open(os.path.join(self.dir, "server.log"), errors="replace") as f:
            return f.read()

    @contextlib.contextmanager
    def paused(self):
        """The server process stopped (SIGSTOP) inside the block: connections stay open, nothing
        is answered. Resumed (SIGCONT) on the way out, whatever happens."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            yield self
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)

    def requests(self, rpc, code="OK"):
        """solus_requests_total{rpc, code} from /metrics (0 when absent)."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        m = re.search(r'^solus_requests_total\{rpc="%s",code="%s"\} (\d+)$' % (re.escape(rpc), re.escape(code)),
                      text, re.M)
        return int(m.group(1)) if m else 0


@pytest.fixture(scope="session")
def server():
    s = SolusServer().start()
    yield s
    s.close()


@pytest.fixture()
def own_server():
    s = SolusServer().start()
    yield s
    s.close()


@pytest.fixture()
def server_with():
    """A factory of servers started with extra settings: ``server_with({"SOLUS__...": "1"})``."""
    started = []

    def start(env):
        s = SolusServer(env).start()
        started.append(s)
        return s
    yield start
    for s in started:
        s.close()


_names = iter(range(1, 1_000_000))


@pytest.fixture()
def deduper_name():
    return f"py{next(_names)}"
