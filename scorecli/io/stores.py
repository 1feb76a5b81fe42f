"""Object stores behind URLs (`s3://`, `gs://`, `abfs://`, `hf://`): one registration per scheme.

`SCHEMES` holds one `Scheme` record per URL scheme: a function that returns the store's
`pyarrow.fs.FileSystem` and the object's path in it (pyarrow's own filesystems for S3, GCS and
Azure, and fsspec's where pyarrow has none: huggingface_hub's `HfFileSystem`, wrapped in
`pyarrow.fs.FSSpecHandler`), where its credentials come from, whether outputs may go there, how
help lists it, which other scheme names the same stores. Adding a scheme is one entry there
(docs/ARCHITECTURE.md: Add an input format or source); inputs (`io.sources`), outputs
(`io.folders`, `io.writers`) and the help (`scorecli.options`) then take its URLs.

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
from dataclasses import dataclass
from typing import Any, BinaryIO

from scorecli.errors import ScorecliError, UsageError, first_line
from scorecli.io.urls import parse, scheme_of, shown

RETRIES = 6  # attempts of one operation (the SDKs retry each request a few times underneath)
BACKOFF = 0.25  # seconds before the second attempt, doubling each time (with jitter)
# deadlines: a request that moves no byte for STALL_SECONDS fails (S3: the SDK's request timeout;
# GCS and the hub have their own), and no operation starts another attempt DEADLINE seconds after
# its first, so a store that stalls or stays down ends the run (exit 1, the rows kept) in minutes
STALL_SECONDS = 30.0
CONNECT_SECONDS = 10.0
DEADLINE = 60.0
_CHUNK = 8 << 20  # bytes per ranged read and per upload write

# what each kind of failure looks like in the SDKs' messages (pyarrow passes them on as OSError)
_DENIED = (
    "ACCESS_DENIED",
    "AccessDenied",
    "Forbidden",
    "[code 403]",
    "PERMISSION_DENIED",
    "INVALID_ACCESS_KEY_ID",
    "SIGNATURE_DOES_NOT_MATCH",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AuthorizationFailure",
    "401",
    "403 ",
)
_NO_BUCKET = ("NO_SUCH_BUCKET", "NoSuchBucket", "bucket does not exist", "ContainerNotFound", "not found. To create")
# a host that does not resolve (AWS_ENDPOINT_URL=garbage) stays so: no use retrying it for a minute
_NO_HOST = re.compile(r"Could not resolve host(?:name)?")
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
    "[code 500]",
    "[code 502]",
    "[code 503]",
    "[code 504]",
    "UNAVAILABLE",
    "RESOURCE_EXHAUSTED",
    "Connection reset",
    "timed out",
    "Temporary",
)


# ---- the schemes ------------------------------------------------------------------------


def _arrow(url: str) -> tuple[Any, str]:
    """pyarrow's own filesystem for S3, GCS and Azure URLs (options in the URL's query, e.g.
    `?region=eu-west-1`; the endpoint from AWS_ENDPOINT_URL and credentials as the SDK finds them),
    with the deadlines above."""
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri(url)
    if isinstance(filesystem, fs.S3FileSystem):
        # from_uri resolves the endpoint (AWS_ENDPOINT_URL) and the bucket's region but takes no
        # timeouts: the same options again (as pickling gives them back), with the timeouts
        options = filesystem.__reduce__()[1][0]
        options.update(connect_timeout=CONNECT_SECONDS, request_timeout=STALL_SECONDS)
        filesystem = fs.S3FileSystem(**options)
    return filesystem, path


def _gcs(url: str) -> tuple[Any, str]:
    """pyarrow's GCS filesystem, retrying within the deadline above (unless the URL says otherwise)."""
    if "retry_limit_seconds=" not in url:
        url += ("&" if "?" in url else "?") + f"retry_limit_seconds={DEADLINE:g}"
    return _arrow(url)


def _huggingface(url: str) -> tuple[Any, str]:
    """huggingface_hub's fsspec filesystem (`hf://datasets/ORG/NAME/...`; the token as the hub finds it)."""
    try:
        from huggingface_hub import HfFileSystem
    except ImportError as exc:
        raise UsageError(f"{shown(url)}: hf:// URLs need huggingface_hub: pip install huggingface_hub") from exc
    return _fsspec(HfFileSystem(), url)


def _fsspec(filesystem: Any, url: str) -> tuple[Any, str]:
    """An fsspec filesystem as a pyarrow one, and the path of `url` in it."""
    from pyarrow import fs

    if "?" in url:
        raise ValueError(f"{url.split('://')[0]}:// URLs take no options")
    return fs.PyFileSystem(fs.FSSpecHandler(filesystem)), filesystem._strip_protocol(url)


@dataclass(frozen=True)
class Scheme:
    """What a URL scheme declares (one `SCHEMES` entry each; docs/ARCHITECTURE.md).

    Attributes:
        filesystem: the store's root URL (`scheme://authority?options`) -> (its `pyarrow.fs`
            FileSystem, the store's own path in it).
        credentials: where its credentials come from (said when access is denied).
        writable: outputs may go there (a hub commit per object would make every part a commit).
        shown: how `--help` and messages list it (None: another spelling of `same`, unlisted).
        same: the scheme that names the same stores (`gcs://` is `gs://`): two URLs whose schemes
            differ only so name one object (`place`).
        endpoint: where the store's host is set (said when it does not resolve).
        buckets: its authority is a bucket or container, which may be missing (a hub's is not).
    """

    filesystem: Callable[[str], tuple[Any, str]]
    credentials: str
    writable: bool = True
    shown: str | None = None
    same: str | None = None
    endpoint: str = "the URL and the store's endpoint settings"
    buckets: bool = True


_S3_CREDENTIALS = "check AWS_ACCESS_KEY_ID / AWS_PROFILE / the instance role, and the bucket's policy"
_GCS_CREDENTIALS = "check GOOGLE_APPLICATION_CREDENTIALS and the bucket's permissions"
_AZURE_CREDENTIALS = "check the storage account's credentials (AZURE_STORAGE_ACCOUNT_KEY, a managed identity)"
# every scheme scorecli reads (and writes) URLs of: adding one is one entry (docs/ARCHITECTURE.md)
SCHEMES: dict[str, Scheme] = {
    "s3": Scheme(_arrow, _S3_CREDENTIALS, shown="s3://", endpoint="AWS_ENDPOINT_URL or the URL"),
    "gs": Scheme(_gcs, _GCS_CREDENTIALS, shown="gs://"),
    "gcs": Scheme(_gcs, _GCS_CREDENTIALS, same="gs"),
    "abfs": Scheme(_arrow, _AZURE_CREDENTIALS, shown="abfs://"),
    "abfss": Scheme(_arrow, _AZURE_CREDENTIALS, same="abfs"),
    "hf": Scheme(
        _huggingface,
        "check HF_TOKEN or huggingface-cli login, and that the dataset is yours to read",
        writable=False,
        shown="hf://datasets/...",
        buckets=False,
    ),
}


def listed(writable: bool = False) -> list[str]:
    """The schemes as help and messages list them (`s3://`, ...), only those outputs may go to if
    `writable`."""
    return [s.shown for s in SCHEMES.values() if s.shown and (s.writable or not writable)]


SUPPORTED = f"supported: {', '.join(listed())}, file://, or a local path"


def place(url: str) -> str:
    """`url` with the scheme that names its store the same way (`gcs://` is `gs://`, `abfss://`
    is `abfs://` over TLS): two URLs name one object when their places are equal."""
    scheme = scheme_of(url)
    same = SCHEMES[scheme].same if scheme in SCHEMES else None
    return f"{same}{url[len(scheme) :]}" if same else url


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
                raise UsageError(f"{what} {self.url(path)}: access denied ({self.scheme_info.credentials})") from exc
            except OSError as exc:
                _refused(exc, what, self.url(path), self.scheme_info)
                delay = BACKOFF * 2**attempt * (1 + 0.25 * (time.monotonic() % 1))
                transient = any(k in str(exc) for k in _TRANSIENT)
                if attempt + 1 == RETRIES or not transient or time.monotonic() - first + delay > DEADLINE:
                    tries = f" (after {attempt + 1} attempts)" if attempt else ""
                    reason = _reason(exc)
                    if transient:
                        self.down = (f"the store stopped answering ({reason})", time.monotonic() + DEADLINE)
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


def _missing(exc: OSError) -> str:
    return "no such object" if "bucket" not in str(exc).lower() else "the bucket does not exist"


def _refused(exc: OSError, what: str, url: str, scheme: Scheme) -> None:
    """Raise what no retry changes as a UsageError (exit 2): a missing bucket, denied access, a
    store host that does not resolve."""
    text = str(exc)
    if any(k in text for k in _NO_BUCKET):
        raise UsageError(f"{what} {url}: the bucket or container does not exist") from exc
    if any(k in text for k in _DENIED):
        raise UsageError(f"{what} {url}: access denied ({scheme.credentials})") from exc
    if _NO_HOST.search(text):
        host = _HOST.search(text)
        named = f" {host.group(1)}" if host else ""
        raise UsageError(f"{what} {url}: the store's host{named} does not resolve (check {scheme.endpoint})") from exc


def _reason(exc: OSError) -> str:
    """An SDK's failure in a few words: a stalled request as such, others as the SDK says them."""
    if any(k in str(exc) for k in _STALLED):
        return f"the store did not answer for {STALL_SECONDS:g} s"
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
            raise UsageError(f"{shown(url)}: not a URL scorecli can open: {first_line(exc, 200)}") from exc
        prefix = f"{scheme}://{named.authority}"
        store = _STORES[(scheme, named.authority)] = Store(scheme, filesystem, prefix, base.strip("/"), named.options)
    return store, "/".join(p for p in (store.base, named.key) if p)


def plain(url: str) -> str:
    """`url` as listings, messages and fingerprints name it: without its options, once the store
    they configure is made (`locate`), so that an object has one name whichever way it was reached."""
    locate(url)
    return parse(url).plain
