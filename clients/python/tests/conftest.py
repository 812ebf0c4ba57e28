"""A real `solus serve` for the tests: the cargo-built binary named by SOLUS_BIN."""
import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import pytest


# What `solus serve` logs once bound (INFO): the ports it got when told to bind port 0.
_LISTENING = re.compile(r"solus listening addr=127\.0\.0\.1:(\d+)")
_METRICS = re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")


class SolusServer:
    """``env``: extra SOLUS__* settings, e.g. {"SOLUS__LIMITS__MAX_CONCURRENT_REQUESTS": "1"}.

    The server binds port 0 (gRPC and metrics) and the ports it got are read from its log: no
    port is picked by binding and releasing a socket (another process could take it between).
    A restart (stop, then start) binds the same ports again, so clients keep their address."""

    def __init__(self, env=None):
        binary = os.environ.get("SOLUS_BIN")
        if not binary or not os.access(binary, os.X_OK):
            raise RuntimeError("SOLUS_BIN must name the cargo-built solus binary (run `cargo build`, then "
                               "SOLUS_BIN=target/debug/solus); got " + repr(binary))
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="solus-py-test")
        self.port = 0
        self.metrics_port = 0
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
        path = os.path.join(self.dir, "server.log")
        start_at = os.path.getsize(path) if os.path.exists(path) else 0  # this start's lines only
        log = open(path, "ab")
        self.proc = subprocess.Popen([self.binary, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        until = time.monotonic() + 60
        while time.monotonic() < until:
            if self.proc.poll() is not None:
                raise RuntimeError(f"solus serve exited with {self.proc.returncode}:\n{self.log()}")
            with open(path, "rb") as f:
                f.seek(start_at)
                text = f.read().decode(errors="replace")
            listening, metrics = _LISTENING.search(text), _METRICS.search(text)
            if listening and metrics:
                self.port, self.metrics_port = int(listening.group(1)), int(metrics.group(1))
                return self
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
