"""A real S3-protocol endpoint on 127.0.0.1 for the object-store tests: moto's standalone server
(`python -m moto.server`, from the `dev` extra) in a subprocess, behind a small HTTP proxy in
this process that can answer chosen requests itself (403 AccessDenied for a bucket, 503 SlowDown
for the next N requests; a HEAD gets the status without the body, as S3 answers one) to stand in
for a denied bucket or a throttling store, hold them without answering (a stalled store), or drop
them and every request after (a store that dies mid-run).

Child scorecli processes find it through AWS_ENDPOINT_URL (`Endpoint.env`), as any S3 client does.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
)
SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)

TOO_LARGE = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidRequest</Code><Message>The specified copy '
    b"source is larger than the maximum allowable size for a copy source: 5368709120</Message></Error>"
)


@dataclass
class Rule:
    """Answer requests whose "METHOD /path?query" matches `pattern` with `status` and `body`,
    `times` times (None: always)."""

    pattern: str
    status: int
    body: bytes
    times: int | None = None
    hits: int = 0
    action: str = "answer"  # "stall": answer nothing until cleared; "die": drop it and all after


@dataclass
class Endpoint:
    url: str  # what clients talk to (the proxy)
    moto: str  # moto itself
    rules: list[Rule] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)  # requests answered by a rule
    track: bool = False  # record which process sent each request (`senders`)
    senders: list[tuple[str, int | None]] = field(default_factory=list)
    down: bool = False  # a "die" rule was hit: every request is dropped until `clear`
    stalled: threading.Event = field(default_factory=threading.Event)  # set: stalled requests end

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def deny(self, bucket: str) -> Rule:
        return self._add(Rule(rf"^[A-Z]+ /{re.escape(bucket)}([/?].*)?$", 403, DENIED))

    def throttle(self, pattern: str, times: int) -> Rule:
        return self._add(Rule(pattern, 503, SLOW_DOWN, times))

    def fail(self, pattern: str, status: int, body: bytes) -> Rule:
        return self._add(Rule(pattern, status, body))

    def stall(self, pattern: str) -> Rule:
        """Requests matching `pattern` get no answer (the connection stays open) until `clear`."""
        self.stalled.clear()
        return self._add(Rule(pattern, 0, b"", action="stall"))

    def die(self, pattern: str) -> Rule:
        """From the first request matching `pattern` on, every request's connection is closed
        without an answer, as a store that went away mid-run, until `clear`."""
        return self._add(Rule(pattern, 0, b"", action="die"))

    def _add(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()
        self.down = False
        self.stalled.set()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(timeout: float = 60) -> tuple[Endpoint, subprocess.Popen, ThreadingHTTPServer]:
    """moto on a free port, the proxy on another; returns (endpoint, moto's process, proxy)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto's server did not start") from None
            time.sleep(0.1)
    endpoint = Endpoint("", f"127.0.0.1:{port}")
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _handler(endpoint))
    proxy.daemon_threads = True
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    endpoint.url = f"http://127.0.0.1:{proxy.server_address[1]}"
    return endpoint, proc, proxy


def _handler(endpoint: Endpoint):
    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = self._chunked()
            line = f"{self.command} {self.path}"
            if endpoint.track:
                endpoint.senders.append((line, _pid_of(self.client_address[1])))
            if endpoint.down:
                endpoint.seen.append(line)
                return self._drop()
            for rule in endpoint.rules:
                if (rule.times is None or rule.hits < rule.times) and re.search(rule.pattern, line):
                    rule.hits += 1
                    endpoint.seen.append(line)
                    if rule.action == "stall":
                        endpoint.stalled.wait(300)
                        return self._drop()
                    if rule.action == "die":
                        endpoint.down = True
                        return self._drop()
                    # an answer to a HEAD is its status alone, as S3's (a throttled HEAD: 503, no SlowDown)
                    body = b"" if self.command == "HEAD" else rule.body
                    return self._answer(rule.status, {"Content-Type": "application/xml"}, body)
            conn = http.client.HTTPConnection(endpoint.moto, timeout=60)
            headers = {
                k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "content-length")
            }
            headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self._answer(
                resp.status,
                {
                    k: v
                    for k, v in resp.getheaders()
                    if k.lower() not in ("transfer-encoding", "content-length", "connection")
                },
                data,
                head=self.command == "HEAD",
                length=resp.getheader("Content-Length"),
            )
            conn.close()

        def _drop(self) -> None:
            """Close the connection without an answer."""
            self.close_connection = True

        def _chunked(self) -> bytes:
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()

        def _answer(self, status: int, headers: dict, body: bytes, head: bool = False, length=None) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(length if head and length is not None else len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    return Proxy


def _pid_of(port: int) -> int | None:
    """The process whose TCP socket on 127.0.0.1 has local port `port`."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.pid is not None:
            return conn.pid
    return None


def stop(proc: subprocess.Popen, proxy: ThreadingHTTPServer) -> None:
    proxy.shutdown()
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def client(endpoint: Endpoint):
    """A boto3 client straight to moto (test set-up and inspection, never through the rules)."""
    import boto3

    env = endpoint.env()
    return boto3.client(
        "s3",
        endpoint_url=f"http://{endpoint.moto}",
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )


def apply_env(endpoint: Endpoint) -> None:
    """Point this process's S3 clients (pyarrow, polars) at the endpoint too."""
    os.environ.update(endpoint.env())
