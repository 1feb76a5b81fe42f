"""What a URL names, read the same way everywhere a URL is taken (docs/object-stores.md).

A store URL is `scheme://authority/key?options`:
- the key is taken literally, as the AWS CLI and fsspec take it, never percent-decoded: a listing's
  `pct%41.jsonl` is that key, not `pctA.jsonl`; a space, an accent or `#` is part of the key;
- `.` and `..` segments and empty ones (`//`) are refused: the store (its SDK or its server)
  would open another key than the one typed, and scorecli compares outputs with inputs by key;
- the options are a trailing `?name=value&...` (`?region=eu-west-1`); a `?` that does not start
  one is a glob's wildcard. Options say how to reach the store (`io.stores`), never which object;
- credentials (`user:secret@`, `?secret_key=...`) are refused, and `shown` hides them.
Knows nothing about stores beyond their URLs' shape.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from scorecli.errors import UsageError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.S)
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@?]*:[^/@?]*@")
_OPTIONS = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[^&]*(&[A-Za-z_][A-Za-z0-9_]*=[^&]*)*$")
# option names that carry a credential (S3 keys and tokens, an Azure SAS signature, passwords)
_CREDENTIAL = re.compile(r"key|secret|token|passw|sig|credential|sas", re.I)
_CREDENTIAL_VALUE = re.compile(
    r"([?&][A-Za-z0-9_]*(?:key|secret|token|passw|sig|credential|sas)[A-Za-z0-9_]*=)[^&]*", re.I
)


@dataclass(frozen=True)
class StoreURL:
    """A store URL's parts: `scheme://authority/key?options` (`key` literal, "" for the root)."""

    scheme: str
    authority: str
    key: str  # without the trailing `/` of a folder
    options: str
    folder: bool  # the URL ends in `/` (before its options): a prefix read or written as a folder

    @property
    def root(self) -> str:
        """The store itself with its options, without a key (what a store is made from)."""
        return f"{self.scheme}://{self.authority}" + (f"?{self.options}" if self.options else "")

    @property
    def plain(self) -> str:
        """The URL without its options: the object's name in messages, listings and fingerprints."""
        return f"{self.scheme}://{self.authority}" + (f"/{self.key}" if self.key else "") + ("/" if self.folder else "")


def is_url(spec: str) -> bool:
    """Whether `spec` names a URL (`scheme://...`) rather than a local path."""
    return bool(_URL.match(spec))


def scheme_of(spec: str) -> str:
    """The URL's scheme, lower case ("" for a local path)."""
    m = _URL.match(spec)
    return m.group(1).lower() if m else ""


def shown(url: str) -> str:
    """`url` as messages, metadata and fingerprints show it: a `user:secret@` part and the values
    of credential options (`?secret_key=`, `&sig=`) as `***`."""
    return _CREDENTIAL_VALUE.sub(r"\1***", _USERINFO.sub(r"\1***@", url))


def local_path(url: str) -> str:
    """The local path a `file://` URL names."""
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise UsageError(f"{url}: a file:// URL names a path on this machine (file:///path), not on {parsed.netloc}")
    return urllib.parse.unquote(parsed.path) or "/"


def split_options(rest: str) -> tuple[str, str]:
    """`rest` (after `scheme://`) as (authority/key, options): the options start at the first `?`
    after which only `name=value` pairs follow; any other `?` is a glob's wildcard."""
    for at in (i for i, c in enumerate(rest) if c == "?"):
        if _OPTIONS.match(rest[at + 1 :]):
            return rest[:at], rest[at + 1 :]
    return rest, ""


def parse(url: str) -> StoreURL:
    """`url`'s parts, refusing what would open another object than the one named.

    Raises:
        UsageError: credentials in the URL, or `.`, `..` or empty segments in its key.
    """
    m = _URL.match(url)
    if m is None:
        raise UsageError(f"{shown(url)}: not a URL")
    named, options = split_options(m.group(2))
    authority, _, key = named.partition("/")
    if _USERINFO.match(url) or any(_CREDENTIAL.search(o.partition("=")[0]) for o in options.split("&") if o):
        raise UsageError(
            f"{shown(url)}: credentials in a URL are not used (they would show in messages and "
            "process lists): give them as the store's SDK expects (AWS_ACCESS_KEY_ID, a profile, ...)"
        )
    folder = named.endswith("/")
    key = key[:-1] if folder else key
    segments = key.split("/")
    if key and ("" in segments or "." in segments or ".." in segments):
        raise UsageError(
            f"{shown(url)}: a store URL's key may not hold '.', '..' or empty ('//') segments "
            "(a store opens such a key as another one, or not at all): write the key itself"
        )
    return StoreURL(m.group(1).lower(), authority, key, options, folder)
