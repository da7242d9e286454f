"""Real object-store peers on loopback, for tests and benchmarks: an S3-protocol server (moto's
standalone server, in its own process) and an HTTP proxy that counts the requests reaching it,
can fail some of them, as a congested or flaky object store does, and can delay each one and cap
its bandwidth, as a cloud store's round trip does (loopback answers in well under a millisecond,
so without a delay a benchmark cannot show what a user on S3 waits for).

Nothing here is imported by the package itself; it needs ``moto[server]`` installed.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Faults", "Latency", "LoopbackS3", "RequestCounts", "S3Proxy"]


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(port: int, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class LoopbackS3:
    """A moto S3 server in a child process on a free loopback port, with one bucket.

    ``with LoopbackS3() as s3:`` starts it; ``s3.endpoint`` is its URL and
    :meth:`storage_options` what fsspec's ``s3fs`` needs to reach it (or a proxy in front).
    """

    def __init__(self, bucket: str = "sporadik-tests") -> None:
        self.bucket = bucket
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LoopbackS3:
        self._server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for(self.port)
        # An S3 CreateBucket is a plain PUT on the bucket's path.
        request = urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT")
        urllib.request.urlopen(request).close()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.terminate()
            self._server.wait(timeout=10)

    def storage_options(self, endpoint: str | None = None, **config: Any) -> dict[str, Any]:
        """Options for ``s3fs`` reaching ``endpoint`` (default: the server itself)."""
        options: dict[str, Any] = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {
                "endpoint_url": endpoint or self.endpoint,
                "region_name": "us-east-1",
            },
        }
        if config:
            options["config_kwargs"] = config
        return options

    def obstore(self, prefix: str, endpoint: str | None = None, **client_options: Any) -> Any:
        """A zarr ``ObjectStore`` over obstore's ``S3Store`` at ``prefix`` of the bucket."""
        from obstore.store import S3Store
        from zarr.storage import ObjectStore

        return ObjectStore(
            S3Store(
                self.bucket,
                prefix=prefix,
                endpoint=endpoint or self.endpoint,
                access_key_id="testing",
                secret_access_key="testing",
                region="us-east-1",
                client_options={"allow_http": True, **client_options},  # type: ignore[arg-type]
            )
        )


@dataclass
class Faults:
    """Which requests the proxy fails, and how.

    ``every``: fail every n-th request (counting only ``methods``), once each: a transient fault a
    retry gets past. ``paths``: fail every request whose path matches, always: an object the
    store cannot serve. ``status`` is sent with an S3 error document; 0 resets the connection.
    """

    every: int = 0
    paths: str | None = None
    methods: tuple[str, ...] = ("GET", "HEAD", "PUT", "POST", "DELETE")
    status: int = 503


@dataclass(frozen=True)
class Latency:
    """What the proxy adds to every request it forwards, as a cloud object store would.

    ``delay``: seconds each request waits before it is answered (a round trip; S3 in-region
    answers a small GET in 10-30 ms). ``bandwidth``: bytes per second each request's body moves
    at, in either direction (one S3 connection streams ~100 MB/s); None for no cap. Requests in
    flight together wait together, so a batch of concurrent requests costs one delay, not one
    each, which is what makes the number of sequential *waves* the figure that matters.

    ``gathered``: hold every request until ``delay`` has passed since the *latest* arrival, and
    answer the ones in flight together. A batch then stays one wave however slowly a busy
    client sends it, so long as no gap between two of its requests reaches the delay, while a
    request that needs an earlier answer still starts a wave of its own. For counting waves,
    not for timing: a request's wait grows with the batch's spread.
    """

    delay: float = 0.0
    bandwidth: float | None = None
    gathered: bool = False

    def seconds(self, sent: int, received: int) -> float:
        """How long one request moving ``sent`` and ``received`` body bytes is held."""
        moving = (sent + received) / self.bandwidth if self.bandwidth else 0.0
        return self.delay + moving


@dataclass
class RequestCounts:
    """Requests that reached the upstream store, by method, and the bytes they moved."""

    requests: Counter[str] = field(default_factory=Counter)
    bytes_in: int = 0  # response bodies
    bytes_out: int = 0  # request bodies
    failed: int = 0  # requests the proxy failed on purpose
    #: Method and path of every request that reached the upstream store, in order.
    log: list[tuple[str, str]] = field(default_factory=list)
    #: When each request arrived and was answered (``time.monotonic``), in arrival order.
    spans: list[tuple[float, float]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    @property
    def waves(self) -> int:
        """Sequential rounds of requests: stretches during which some request was in flight.

        A batch of concurrent requests is one wave however many requests it holds; a request
        that starts only after every earlier one was answered starts a new one. Under a delay
        per request, waves times the delay is the least a user waits.
        """
        found, busy_until = 0, float("-inf")
        for start, stop in sorted(self.spans):
            if start > busy_until:
                found += 1
            busy_until = max(busy_until, stop)
        return found


_S3_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
    "<Message>injected by the test proxy</Message></Error>"
)
_CODES = {403: "AccessDenied", 500: "InternalError", 503: "SlowDown"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def setup(self) -> None:
        """Send each write at once: headers and body go out as two writes, and with Nagle's
        algorithm the body then waits for the client's delayed ACK (~40 ms on Linux), a wait no
        object store adds."""
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the counts are the record."""

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def _forward(self) -> None:
        body = self._body()
        fault = self.server.fault(self.command, self.path)
        if fault is not None:
            if fault == 0:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            payload = _S3_ERROR.format(code=_CODES.get(fault, "InternalError")).encode()
            self.send_response(fault)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        arrived = self.server.arrive()
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        upstream.request(self.command, self.path, body=body or None, headers=headers)
        response = upstream.getresponse()
        payload = response.read()
        upstream.close()
        latency = self.server.latency
        held = latency.seconds(len(body), len(payload))
        while held > 0:  # the wait counts from arrival: the upstream's own time is part of it
            since = self.server.latest if latency.gathered else arrived
            left = since + held - time.monotonic()
            if left <= 0:
                break
            time.sleep(left)
        self.server.record(self.command, self.path, len(body), len(payload), arrived)
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        length = response.getheader("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _serve(self) -> None:
        try:
            self._forward()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up on this request
            self.close_connection = True

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    #: Connections the kernel queues before they are accepted. socketserver's default of 5 let a
    #: batch of ten new connections overflow it: the kernel dropped a SYN, and the client sent it
    #: again a second later, which the counts then showed as a wave of its own.
    request_queue_size = 128

    def __init__(self, upstream_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream_port = upstream_port
        self.faults = Faults()
        self.latency = Latency()
        self.counts = RequestCounts()
        self._lock = threading.Lock()
        self._seen = 0
        #: When the latest request arrived (``time.monotonic``): a gathered latency counts from it.
        self.latest = float("-inf")

    def arrive(self) -> float:
        """Note a request's arrival, and return its time."""
        with self._lock:
            now = time.monotonic()
            self.latest = max(self.latest, now)
            return now

    def fault(self, method: str, path: str) -> int | None:
        with self._lock:
            faults = self.faults
            if method not in faults.methods:
                return None
            if faults.paths is not None and re.search(faults.paths, path):
                self.counts.failed += 1
                return faults.status
            self._seen += 1
            if faults.every and self._seen % faults.every == 0:
                self.counts.failed += 1
                return faults.status
            return None

    def record(self, method: str, path: str, sent: int, received: int, arrived: float) -> None:
        with self._lock:
            self.counts.log.append((method, path))
            self.counts.spans.append((arrived, time.monotonic()))
            self.counts.requests[method] += 1
            self.counts.bytes_out += sent
            self.counts.bytes_in += received


class S3Proxy:
    """An HTTP proxy on loopback in front of an S3 endpoint, counting, failing and delaying
    requests.

    ``with S3Proxy(s3) as proxy:`` serves at ``proxy.endpoint``; ``proxy.faults`` says what to
    fail; ``proxy.latency`` (or ``with proxy.slowed(Latency(0.02, 100e6)):``) what to add to
    each request; ``with proxy.counting() as counts:`` gathers the requests of one operation.
    """

    def __init__(self, s3: LoopbackS3) -> None:
        self._server = _ProxyServer(s3.port)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> S3Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def faults(self) -> Faults:
        return self._server.faults

    @faults.setter
    def faults(self, faults: Faults) -> None:
        with self._server._lock:
            self._server.faults = faults
            self._server._seen = 0

    @contextlib.contextmanager
    def failing(self, faults: Faults) -> Iterator[None]:
        """``faults`` in force inside the block, and lifted after it however it ends."""
        self.faults = faults
        try:
            yield
        finally:
            self.faults = Faults()

    @property
    def latency(self) -> Latency:
        return self._server.latency

    @latency.setter
    def latency(self, latency: Latency) -> None:
        with self._server._lock:
            self._server.latency = latency

    @contextlib.contextmanager
    def slowed(self, latency: Latency) -> Iterator[None]:
        """``latency`` added to every request inside the block, and lifted after it."""
        self.latency = latency
        try:
            yield
        finally:
            self.latency = Latency()

    @property
    def counts(self) -> RequestCounts:
        return self._server.counts

    def counting(self) -> _Counting:
        return _Counting(self._server)


class _Counting:
    def __init__(self, server: _ProxyServer) -> None:
        self._server = server

    def __enter__(self) -> RequestCounts:
        with self._server._lock:
            self._server.counts = RequestCounts()
            return self._server.counts

    def __exit__(self, *exc: object) -> None:
        pass
