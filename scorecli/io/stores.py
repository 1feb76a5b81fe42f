"""Object stores behind URLs (`s3://`, `gs://`, `abfs://`, `hf://`): one registration per scheme.

`SCHEMES` maps a URL scheme to a function that returns the store's `pyarrow.fs.FileSystem` and
the object's path in it: pyarrow's own filesystems for S3, GCS and Azure, and fsspec's where
pyarrow has none (huggingface_hub's `HfFileSystem`, wrapped in `pyarrow.fs.FSSpecHandler`).
Adding a scheme is one entry there (docs/ARCHITECTURE.md: Add an input format or source); inputs
(`io.sources`) and outputs (`io.folders`, `io.writers`) then take its URLs.

`Store` is what the rest of scorecli calls: every operation is retried with backoff on what is
transient (throttling, 5xx, a dropped connection) and mapped to scorecli's errors on the rest,
naming the URL (docs/object-stores.md): a bad URL, a missing bucket or object, or
denied access is a `UsageError` (exit 2); anything else, once retries are spent, a
`ScorecliError` (exit 1). Credentials come from where each SDK looks (environment, profiles,
instance roles, the HF token); a URL's own `user:secret@` part is never shown (`shown`).
Knows nothing about rows, tables or jobs.
"""

from __future__ import annotations

import io
import re
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, BinaryIO

from scorecli.errors import ScorecliError, UsageError, first_line

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.S)
_SECRET = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*:[^/@]*@")
RETRIES = 6  # attempts of one operation (the SDKs retry each request a few times underneath)
BACKOFF = 0.25  # seconds before the second attempt, doubling each time (with jitter)
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


def is_url(spec: str) -> bool:
    """Whether `spec` names a URL (`scheme://...`) rather than a local path."""
    return bool(_URL.match(spec))


def scheme_of(spec: str) -> str:
    """The URL's scheme, lower case ("" for a local path)."""
    m = _URL.match(spec)
    return m.group(1).lower() if m else ""


def shown(url: str) -> str:
    """`url` as messages, metadata and fingerprints show it: without a `user:secret@` part."""
    return _SECRET.sub(r"\1***@", url)


def local_path(url: str) -> str:
    """The local path a `file://` URL names."""
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise UsageError(f"{url}: a file:// URL names a path on this machine (file:///path), not on {parsed.netloc}")
    return urllib.parse.unquote(parsed.path) or "/"


# ---- the schemes ------------------------------------------------------------------------


def _arrow(url: str) -> tuple[Any, str]:
    """pyarrow's own filesystem for S3, GCS and Azure URLs (options in the URL's query, e.g.
    `?region=eu-west-1`; the endpoint from AWS_ENDPOINT_URL and credentials as the SDK finds them)."""
    from pyarrow import fs

    return fs.FileSystem.from_uri(url)


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

    return fs.PyFileSystem(fs.FSSpecHandler(filesystem)), filesystem._strip_protocol(url)


# scheme -> (URL -> (pyarrow FileSystem, path in it)); one entry per scheme (docs/ARCHITECTURE.md)
SCHEMES: dict[str, Callable[[str], tuple[Any, str]]] = {
    "s3": _arrow,
    "gs": _arrow,
    "gcs": _arrow,
    "abfs": _arrow,
    "abfss": _arrow,
    "hf": _huggingface,
}
# schemes whose stores scorecli may write to (a hub commit per object would make a part a commit)
WRITABLE = {"s3", "gs", "gcs", "abfs", "abfss"}
SUPPORTED = "supported: s3://, gs://, abfs://, hf://datasets/..., file://, or a local path"


# ---- a store ----------------------------------------------------------------------------


class Store:
    """One store (a bucket, container or hub) reached through a pyarrow FileSystem.

    Paths are the FileSystem's (`bucket/key`); `url(path)` is how messages name them.
    """

    def __init__(self, scheme: str, filesystem: Any, prefix: str):
        self.scheme = scheme
        self.fs = filesystem
        self._prefix = prefix  # what goes before a path to make its URL ("s3://", "hf://")
        self.writable = scheme in WRITABLE

    def url(self, path: str) -> str:
        return shown(self._prefix + path.lstrip("/"))

    def call(self, what: str, path: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, retried on transient failures; other failures as scorecli's errors naming
        `path`'s URL (`what`: what was being done, e.g. "cannot read")."""
        for attempt in range(RETRIES):
            try:
                return fn(*args)
            except FileNotFoundError as exc:
                raise UsageError(f"{what} {self.url(path)}: {_missing(exc)}") from exc
            except PermissionError as exc:
                raise UsageError(f"{what} {self.url(path)}: access denied ({_creds(self.scheme)})") from exc
            except OSError as exc:
                text = str(exc)
                if any(k in text for k in _NO_BUCKET):
                    raise UsageError(f"{what} {self.url(path)}: the bucket or container does not exist") from exc
                if any(k in text for k in _DENIED):
                    raise UsageError(f"{what} {self.url(path)}: access denied ({_creds(self.scheme)})") from exc
                if attempt + 1 == RETRIES or not any(k in text for k in _TRANSIENT):
                    tries = f" (after {RETRIES} attempts)" if attempt else ""
                    raise ScorecliError(f"{what} {self.url(path)}{tries}: {first_line(exc, 300)}") from exc
                time.sleep(BACKOFF * 2**attempt * (1 + 0.25 * (time.monotonic() % 1)))
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
        if not self.writable:
            raise UsageError(
                f"cannot write {self.url(path)}: {self.scheme}:// is read-only for scorecli "
                "(write to s3://, gs://, abfs:// or a local path, then upload)"
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


def _creds(scheme: str) -> str:
    if scheme == "s3":
        return "check AWS_ACCESS_KEY_ID / AWS_PROFILE / the instance role, and the bucket's policy"
    if scheme in ("gs", "gcs"):
        return "check GOOGLE_APPLICATION_CREDENTIALS and the bucket's permissions"
    if scheme == "hf":
        return "check HF_TOKEN or huggingface-cli login, and that the dataset is yours to read"
    return "check the storage account's credentials (AZURE_STORAGE_ACCOUNT_KEY, a managed identity)"


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
    """The store a URL names and the object's path in it (stores are made once per bucket).

    Raises:
        UsageError: an unsupported scheme, or a URL the scheme's filesystem refuses.
    """
    scheme = scheme_of(url)
    if shown(url) != url:  # it would show in messages, logs and `ps`: never taken from there
        raise UsageError(
            f"{shown(url)}: credentials in a URL are not used (they would show in messages and "
            "process lists): give them as the store's SDK expects (AWS_ACCESS_KEY_ID, a profile, ...)"
        )
    make = SCHEMES.get(scheme)
    if make is None:
        raise UsageError(f"unsupported URL scheme {scheme}:// in {shown(url)} ({SUPPORTED})")
    rest = _URL.match(url).group(2)  # type: ignore[union-attr]
    authority = rest.split("/", 1)[0]
    key = (scheme, authority)
    try:
        fs_, path = make(url)
    except ScorecliError:
        raise
    except (ValueError, OSError, TypeError) as exc:
        raise UsageError(f"{shown(url)}: not a URL scorecli can open: {first_line(exc, 200)}") from exc
    if not path.strip("/") and scheme != "hf":
        raise UsageError(f"{shown(url)}: no bucket or container in the URL")
    store = _STORES.get(key)
    if store is None or type(store.fs) is not type(fs_):
        store = _STORES[key] = Store(scheme, fs_, f"{scheme}://")
    return store, path
