"""The URL schemes scorecli reads and writes (`s3://`, `gs://`, `abfs://`, `hf://`): one `Scheme`
record each in `SCHEMES`.

A record holds a function that returns the store's `pyarrow.fs.FileSystem` and the object's path
in it (pyarrow's own filesystems for S3, GCS and Azure, and fsspec's where pyarrow has none:
huggingface_hub's `HfFileSystem`, wrapped in `pyarrow.fs.FSSpecHandler`), where its credentials
come from, whether outputs may go there, how help lists it, which other scheme names the same
stores. Adding a scheme is one entry (docs/ARCHITECTURE.md: Add an input format or source);
`io.stores` then reaches its stores, inputs (`io.sources`) and outputs (`io.folders`, `io.writers`)
take its URLs, and the help (`scorecli.options`) lists it. Also the deadlines every store
request and operation keeps. Knows nothing about rows, tables or jobs.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scorecli.errors import UsageError
from scorecli.io.urls import scheme_of, shown

# deadlines: a request that moves no byte for STALL_SECONDS fails (S3: the SDK's request timeout;
# GCS and the hub have their own), and no operation starts another attempt DEADLINE seconds after
# its first, so a store that stalls or stays down ends the run (exit 1, the rows kept) in minutes
STALL_SECONDS = 30.0
CONNECT_SECONDS = 10.0
DEADLINE = 60.0


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
    """pyarrow's GCS filesystem, retrying within the deadline above (unless the URL says otherwise).
    Its host is resolved first: Google's client retries a host that does not resolve (an offline
    machine) to the deadline and past it, getting a token, about 100 s, where S3's and the Hub's fail
    at once; an OSError in curl's words (`io.stores` refuses it as a host that does not resolve)."""
    if "retry_limit_seconds=" not in url:
        url += ("&" if "?" in url else "?") + f"retry_limit_seconds={DEADLINE:g}"
    filesystem, path = _arrow(url)
    host = endpoint_host(filesystem) or "storage.googleapis.com"
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        raise OSError(f"Could not resolve host: {host} ({exc.strerror})") from exc
    return filesystem, path


def endpoint_host(filesystem: Any) -> str | None:
    """The host a pyarrow S3 or GCS filesystem was set to reach (`endpoint_override`: from
    AWS_ENDPOINT_URL or the URL's options, as pickling gives it back), if one was set."""
    try:
        endpoint = filesystem.__reduce__()[1][0].get("endpoint_override")
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
    return (urlsplit("//" + endpoint.split("://")[-1]).hostname or endpoint) if endpoint else None


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
        "check HF_TOKEN or hf auth login, and that the dataset is yours to read",
        writable=False,
        shown="hf://datasets/...",
        endpoint="the network, and HF_ENDPOINT if set",
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
