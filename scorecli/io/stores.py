"""Object stores behind URLs (`s3://`, `gs://`, `abfs://`, `hf://`; each scheme one record in
`io.schemes.SCHEMES`).

`Store` is what the rest of scorecli calls: every operation is retried with backoff on what is
transient (throttling, 5xx, a dropped connection, a stalled request) within a deadline and
mapped to scorecli's errors on the rest, naming the URL (docs/object-stores.md): a
bad URL, a missing bucket or object, denied access or a host that does not resolve is a
`UsageError` (exit 2); anything else, once retries are spent, a `ScorecliError` (exit 1), after
which the store is known to be down and every later call fails at once. What a URL names (its
key, its options) is `io.urls`'. Credentials come from where each SDK looks (environment,
profiles, instance roles, the HF token), never from a URL (`io.urls.parse` refuses them).
Knows nothing about rows, tables or jobs.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from scorecli.errors import AccessDenied, ScorecliError, UsageError, first_line
from scorecli.io import schemes  # its deadlines read when used (tests/store_cli.py shortens them)
from scorecli.io.schemes import SCHEMES, SUPPORTED, Scheme, endpoint_host, listed
from scorecli.io.urls import parse, scheme_of, shown
from scorecli.process import uninterrupted

RETRIES = 6  # attempts of one operation (the SDKs retry each request a few times underneath)
BACKOFF = 0.25  # seconds before the second attempt, doubling each time (with jitter)
_CHUNK = 8 << 20  # bytes per ranged read and per upload write

# what each kind of failure looks like in the SDKs' messages (pyarrow passes them on as OSError),
# looked for outside what a message quotes (`_said`: a key, a bucket, a URL, which may hold any words)
_DENIED = (
    "ACCESS_DENIED",
    "AccessDenied",
    "Forbidden",
    "PERMISSION_DENIED",
    "INVALID_ACCESS_KEY_ID",
    "SIGNATURE_DOES_NOT_MATCH",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AuthorizationFailure",
    "AuthenticationException",  # Azure: no credential gave a token
)
_NO_BUCKET = ("NO_SUCH_BUCKET", "NoSuchBucket", "bucket does not exist", "ContainerNotFound", "not found. To create")
# a host that does not resolve (AWS_ENDPOINT_URL=garbage, an offline machine) stays so: no use
# retrying it for a minute (curl's words in pyarrow's SDKs; getaddrinfo's in an HTTP client's, the Hub's)
_NO_HOST = re.compile(
    r"Could not resolve host(?:name)?|Couldn't resolve host|Name or service not known|nodename nor servname provided"
    r"|Temporary failure in name resolution|getaddrinfo failed"
)
_HOST = re.compile(r"Could not resolve host: ([^\s;,]+)")
_STALLED = ("curlCode: 28", "Timeout was reached")
_TRANSIENT = (
    "SLOW_DOWN",
    "SlowDown",
    "THROTTLING",
    "Throttl",
    "SERVICE_UNAVAILABLE",
    "INTERNAL_FAILURE",
    "REQUEST_TIMEOUT",
    "NETWORK_CONNECTION",
    "curlCode",
    "UNAVAILABLE",
    "RESOURCE_EXHAUSTED",
    "Connection reset",
    "timed out",
    "Temporary",
)
# an HTTP status where a message gives it as one, never a number in a key or URL (`part-00401`):
# pyarrow's S3 "AWS Error UNKNOWN (HTTP status 503)" (a HEAD's answer has no body to name an
# error), "[code 503]", pyarrow's Azure "Azure Error: [ServerBusy] 503 Server Busy", the hub's
# "401 Client Error." or "403 Forbidden: ..." starting a line, httpx's "Server error '503 ...'"
_STATUS = re.compile(
    r"HTTP status (\d{3})\b|\[code (\d{3})\]|Azure Error: \[\w*\] (\d{3}) |^(\d{3}) [A-Z]|error '(\d{3}) ",
    re.M,
)
_DENIED_STATUS = (401, 403)
_QUOTED = re.compile(r"'[^'\n]*'|\b[A-Za-z][A-Za-z0-9+.-]*://\S*")


# ---- a store ----------------------------------------------------------------------------


class Store:
    """One store (a bucket, container or hub) reached through a pyarrow FileSystem.

    Paths are the FileSystem's (`bucket/key`); `url(path)` is how messages name them.
    """

    def __init__(self, scheme: str, filesystem: Any, prefix: str, base: str = "", options: str = ""):
        self.scheme = scheme
        self.fs = filesystem
        self._prefix = prefix  # what goes before a path below `base` to make its URL ("s3://bucket")
        self.base = base  # the store's own path in the FileSystem ("bucket"; "": paths are whole)
        self.options = options  # the URL options it was made with (`?region=...`)
        self.scheme_info = SCHEMES[scheme]
        # why the store stopped answering, and until when later calls fail at once without asking it
        self.down: tuple[str, float] | None = None

    def url(self, path: str) -> str:
        path = path.lstrip("/")
        if self.base and (path == self.base or path.startswith(self.base + "/")):
            return shown(self._prefix + path[len(self.base) :])
        return shown(f"{self.scheme}://{path}")

    def call(self, what: str, path: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, retried on transient failures until `RETRIES` attempts or `DEADLINE`
        seconds; other failures as scorecli's errors naming `path`'s URL (`what`: what was being
        done, e.g. "cannot read"). Once the store has stopped answering, calls fail at once for
        `DEADLINE` seconds: a run that is ending (keeping its rows) does not wait for it all over
        again, and a later run in the same process (a library's caller) asks it afresh."""
        if self.down is not None and time.monotonic() < self.down[1]:
            raise ScorecliError(f"{what} {self.url(path)}: {self.down[0]}")
        first = time.monotonic()
        for attempt in range(RETRIES):
            try:
                return fn(*args)
            except FileNotFoundError as exc:
                raise UsageError(f"{what} {self.url(path)}: {_missing(exc)}") from exc
            except PermissionError as exc:
                raise AccessDenied(f"{what} {self.url(path)}: access denied ({self.scheme_info.credentials})") from exc
            except Exception as exc:
                if not isinstance(exc, OSError) and not _store_error(exc):
                    raise
                _refused(exc, what, self.url(path), self.scheme_info, self.fs)
                delay = BACKOFF * 2**attempt * (1 + 0.25 * (time.monotonic() % 1))
                transient = _transient(str(exc))
                if attempt + 1 == RETRIES or not transient or time.monotonic() - first + delay > schemes.DEADLINE:
                    tries = f" (after {attempt + 1} attempts)" if attempt else ""
                    reason = _reason(exc)
                    if transient:
                        self.down = (f"the store stopped answering ({reason})", time.monotonic() + schemes.DEADLINE)
                    raise ScorecliError(f"{what} {self.url(path)}{tries}: {reason}") from exc
                time.sleep(delay)
        raise AssertionError("unreachable")

    # ---- reading --------------------------------------------------------------------

    def info(self, path: str):
        """The object's `pyarrow.fs.FileInfo` (type NotFound when there is none)."""
        return self.call("cannot read", path, self.fs.get_file_info, path)

    def listing(self, folder: str, recursive: bool = False) -> list:
        """FileInfos under `folder` (none when nothing is there)."""
        from pyarrow import fs

        selector = fs.FileSelector(folder.rstrip("/"), allow_not_found=True, recursive=recursive)
        return self.call("cannot list", folder, self.fs.get_file_info, selector)

    def open(self, path: str) -> BinaryIO:
        """The object's bytes, read in ranged requests as they are needed (seekable; bounded memory)."""
        handle = self.call("cannot read", path, self.fs.open_input_file, path)
        return io.BufferedReader(_Ranged(self, path, handle), buffer_size=_CHUNK)  # type: ignore[arg-type]

    def read_bytes(self, path: str) -> bytes:
        """A small object whole (bookkeeping files)."""
        with self.open(path) as f:
            return self.call("cannot read", path, f.read)

    def version(self, path: str) -> str | None:
        """What changes whenever the object's content does: its ETag (S3, Azure), generation
        (GCS) or blob id (the hub); None when the store says none."""
        handle = self.call("cannot read", path, self.fs.open_input_file, path)
        try:
            meta = {k.lower(): v for k, v in (self.call("cannot read", path, handle.metadata) or {}).items()}
        finally:
            handle.close()
        for key in ("etag", "generation", "x-goog-generation", "version-id", "blob_id", "sha256"):
            if key in meta:
                value = meta[key]
                return (value.decode() if isinstance(value, bytes) else str(value)).strip('"')
        return _fsspec_version(self.fs, path)

    # ---- writing --------------------------------------------------------------------

    def check_writable(self, path: str) -> None:
        if not self.scheme_info.writable:
            raise UsageError(
                f"cannot write {self.url(path)}: {self.scheme}:// is read-only for scorecli "
                f"(write to {', '.join(listed(writable=True))} or a local path, then upload)"
            )

    def put(self, path: str, data: bytes) -> None:
        """Write a whole object in one request: it appears whole or not at all."""
        self.call("cannot write", path, self._put, path, data)

    def _put(self, path: str, data: bytes) -> None:
        with uninterrupted():  # a stream closed before its write would replace the object with nothing
            stream = self.fs.open_output_stream(path)
            try:
                stream.write(data)  # one write: a stream closed early still holds all of it
            finally:
                stream.close()

    def upload(self, path: str, source: BinaryIO, temp: str) -> None:
        """Write `source` (a local file, from its start) as the object `path`, whole or not at
        all: streamed into the object `temp` (an upload that pyarrow would complete if its stream
        were dropped half-way), then copied onto `path` in one server-side copy, `temp` removed."""
        stream = self.call("cannot write", temp, self.fs.open_output_stream, temp)
        try:
            while chunk := source.read(_CHUNK):
                self.call("cannot write", temp, stream.write, chunk)
        except BaseException:
            _close_quietly(stream)
            self.delete(temp)
            raise
        self.call("cannot write", temp, stream.close)
        try:
            self.call("cannot write", path, self.fs.copy_file, temp, path)
        finally:
            self.delete(temp)

    def copy(self, source: str, path: str) -> None:
        self.call("cannot write", path, self.fs.copy_file, source, path)

    def delete(self, path: str) -> None:
        """Remove one object; one that is not there is no error."""
        self.call("cannot remove", path, self._delete, path)

    def _delete(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass


def _store_error(exc: Exception) -> bool:
    """Whether a failure that is no OSError is the store's all the same, to be retried or refused
    as an SDK's OSError is: an HTTP client's failure to reach its host (httpx's `TransportError`,
    which the Hub's filesystem passes on as it is) or an SDK's status that pyarrow maps to no
    OSError (`ArrowException`: Azure's credentials that give no token)."""
    return any(kind.__name__ in ("TransportError", "ArrowException") for kind in type(exc).__mro__)


def _missing(exc: OSError) -> str:
    return "no such object" if "bucket" not in str(exc).lower() else "the bucket does not exist"


def _refused(exc: Exception, what: str, url: str, scheme: Scheme, filesystem: Any = None) -> None:
    """Raise what no retry changes as a UsageError (exit 2): a missing bucket, denied access, a
    store host that does not resolve (named from curl's words, else from `filesystem`'s endpoint:
    pyarrow before 19's SDK says only "Couldn't resolve host name")."""
    text = str(exc)
    said = _said(text)
    if any(k in said for k in _NO_BUCKET):
        raise UsageError(f"{what} {url}: the bucket or container does not exist") from exc
    if _status(text) in _DENIED_STATUS or any(k in said for k in _DENIED):
        raise AccessDenied(f"{what} {url}: access denied ({scheme.credentials})") from exc
    if _NO_HOST.search(text):
        host = _HOST.search(text)
        name = host.group(1) if host else endpoint_host(filesystem)
        named = f" {name}" if name else ""
        raise UsageError(f"{what} {url}: the store's host{named} does not resolve (check {scheme.endpoint})") from exc


def _transient(text: str) -> bool:
    """Whether an SDK's failure may pass if tried again: throttling (HTTP status 429, `SlowDown`),
    a server error (5xx), a dropped or stalled connection."""
    status = _status(text)
    return status == 429 or (status is not None and 500 <= status < 600) or any(k in _said(text) for k in _TRANSIENT)


def _status(text: str) -> int | None:
    """The HTTP status an SDK's message gives as one (`_STATUS`), or None."""
    found = _STATUS.search(text)
    return int(next(g for g in found.groups() if g)) if found else None


def _said(text: str) -> str:
    """An SDK's message without what it quotes (`'r/2401/rows.jsonl'`, `'bucket'`) or names as a URL."""
    return _QUOTED.sub("", text)


def _reason(exc: Exception) -> str:
    """An SDK's failure in a few words: a stalled request as such, others as the SDK says them."""
    if any(k in str(exc) for k in _STALLED):
        return f"the store did not answer for {schemes.STALL_SECONDS:g} s"
    return first_line(exc, 300)


def _fsspec_version(filesystem: Any, path: str) -> str | None:
    """The version an fsspec filesystem's `info` gives (HfFileSystem: blob_id; others: etag)."""
    handler = getattr(filesystem, "handler", None)
    inner = getattr(handler, "fs", None)
    if inner is None:
        return None
    info = inner.info(path)
    for key in ("blob_id", "etag", "ETag", "generation", "sha256", "md5"):
        if info.get(key):
            return str(info[key]).strip('"')
    return None


def _close_quietly(stream: Any) -> None:
    try:
        stream.close()
    except Exception:  # noqa: BLE001 - already failing; the temporary object is removed next
        pass


class _Ranged(io.RawIOBase):
    """A store object as a seekable raw file: each read is one ranged request, retried."""

    def __init__(self, store: Store, path: str, handle: Any):
        self._store, self._path, self._handle = store, path, handle
        self._size = store.call("cannot read", path, handle.size)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        n = min(len(buffer), max(0, self._size - self._pos))
        if n == 0:
            return 0
        data = self._store.call("cannot read", self._path, self._handle.read_at, n, self._pos)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            _close_quietly(self._handle)
        super().close()


_STORES: dict[tuple[str, str], Store] = {}


def locate(url: str) -> tuple[Store, str]:
    """The store a URL names and the object's path in it (stores are made once per bucket, with
    the options of the first URL that names them, or of one that gives others).

    Raises:
        UsageError: an unsupported scheme, credentials in the URL, a key with `.`, `..` or empty
            segments (`io.urls.parse`), or a URL the scheme's filesystem refuses.
    """
    scheme = scheme_of(url)
    make = SCHEMES.get(scheme)
    if make is None:
        raise UsageError(f"unsupported URL scheme {scheme}:// in {shown(url)} ({SUPPORTED})")
    named = parse(url)
    if not named.authority:
        raise UsageError(f"{shown(url)}: no bucket or container in the URL")
    store = _STORES.get((scheme, named.authority))
    if store is None or (named.options and named.options != store.options):
        try:
            filesystem, base = make.filesystem(named.root)
        except ScorecliError:
            raise
        except (ValueError, OSError, TypeError) as exc:
            if isinstance(exc, OSError):  # the store asked already (S3: the bucket's region), and failed
                _refused(exc, "cannot open", shown(url), make)
            raise UsageError(f"{shown(url)}: not a URL scorecli can open: {first_line(exc, 200)}") from exc
        prefix = f"{scheme}://{named.authority}"
        store = _STORES[(scheme, named.authority)] = Store(scheme, filesystem, prefix, base.strip("/"), named.options)
    return store, "/".join(p for p in (store.base, named.key) if p)


def plain(url: str) -> str:
    """`url` as listings, messages and fingerprints name it: without its options, once the store
    they configure is made (`locate`), so that an object has one name whichever way it was reached."""
    locate(url)
    return parse(url).plain
