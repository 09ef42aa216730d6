"""Where trace files live: local paths, or fsspec URLs (`s3://`, `gs://`, `az://`, `abfs://`,
`hdfs://`, `http(s)://`, ... whatever fsspec implementation is installed).

One small set of functions for reading, listing and writing, so the reader, the cache, the logdir
scanner and the trace writers need not care where a file is. A path without a `scheme://` prefix is
a local path and goes straight to `os`/`open` (no fsspec import, no overhead); a URL goes through
`fsspec.core.url_to_fs`, whose filesystems take their credentials from each library's standard
environment (AWS_* variables or profiles for s3fs, GOOGLE_APPLICATION_CREDENTIALS for gcsfs,
AZURE_STORAGE_* for adlfs; fsspec's own `FSSPEC_<PROTOCOL>_<OPTION>` variables set other options,
e.g. FSSPEC_S3_ENDPOINT_URL). Credentials never appear in what this module returns or raises:
`redact` removes them from URLs and messages, and every error is a `StorageError` with a short,
clear message.

Writes are atomic: `atomic_writer` buffers the file and publishes it whole (one put on object
stores, where an object appears only once complete; a temporary hidden name then a rename
elsewhere), so a reader never sees a partial file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import re
import stat as _stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from profiler_core.identity import file_identity

_URL_RE = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]+)://")
#: object stores: an object becomes visible only once completely written (one put or a completed
#: multipart upload), so a file listed there is never half-written
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2"})
#: package (and gpuscope extra) that brings each protocol
_PACKAGES = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
    "hdfs": ("pyarrow", None),
    "http": ("aiohttp", None),
    "https": ("aiohttp", None),
}
#: where each library looks for credentials (named in "no credentials" messages)
_CREDENTIAL_HINTS = {
    "s3": "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an instance role",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS or gcloud's default credentials",
    "az": "AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT_NAME with a key or a login",
}
#: environment variables whose values are secrets: scrubbed from every message
SECRET_ENV = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
)


class StorageError(OSError):
    """A storage operation failed; `str()` is a short message without credentials."""

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = errno_

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class FileInfo:
    """A file as listed or stat'ed: `version` is the ETag / generation of a remote object ("" for
    a local file), `ident` a local file's `identity.file_identity`; `fingerprint` ints that change
    when the file is rewritten or replaced."""

    path: str
    size: int
    mtime_ns: int
    version: str = ""
    ident: tuple = ()

    @property
    def fingerprint(self) -> tuple[int, ...]:
        """A local file's identity (size, mtime_ns, inode, device, ctime_ns); (size, a number
        made from the ETag, else the mtime) for a remote one."""
        if not self.version:
            return self.ident or (self.size, self.mtime_ns)
        digest = hashlib.sha256(self.version.encode()).digest()
        return self.size, int.from_bytes(digest[:7], "big")


# --------------------------------------------------------------------------- names
def protocol(path: str | os.PathLike) -> str:
    """The URL scheme of `path` ("s3", "gs", ...), "" for a local path."""
    m = _URL_RE.match(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else None
    return m.group(1).lower() if m else ""


def is_remote(path: Any) -> bool:
    """Whether `path` is an fsspec URL (anything `scheme://...`) rather than a local path."""
    return isinstance(path, str) and "://" in path[:40] and _URL_RE.match(path) is not None


def is_object_store(path: str) -> bool:
    """Whether `path` is on an object store (files appear only once whole)."""
    return protocol(path) in OBJECT_STORES


def join(base: str, *parts: str) -> str:
    """`base` / parts: "/" for URLs, os.path.join for local paths."""
    if not is_remote(base):
        return os.path.join(base, *parts)
    out = base.rstrip("/")
    for p in parts:
        out += "/" + p.strip("/")
    return out


def split(path: str) -> tuple[str, str]:
    """(parent, name) of a path or URL."""
    if not is_remote(path):
        return os.path.split(path)
    head, _, name = path.rstrip("/").rpartition("/")
    return head, name


def normalize_root(path: str) -> str:
    """A logdir as the scanner keeps it: absolute local path, or the URL without a trailing "/"."""
    if is_remote(path):
        _remember_secrets(path)
        scheme = protocol(path)
        rest = path[len(scheme) + 3 :].rstrip("/")
        return f"{scheme}://{rest}"
    return os.path.abspath(path)


# Redaction is linear in the text's length whatever it holds (error messages may quote request
# parameters): each pattern starts only where a run of its leading characters starts (negative
# lookbehind) and a URL is consumed whole, so no character is scanned by more than a few attempts.
_SCHEME_CHARS = r"a-zA-Z0-9+.\-"
#: a URL: scheme, then the rest up to whitespace, a quote, "?" or "#", then its query if any
_URL_PART_RE = re.compile(
    rf"(?<![{_SCHEME_CHARS}])([{_SCHEME_CHARS}]+://)"
    r"([^\s\"'?#]*)(\?[^\s\"'#]*)?"
)
#: a `name=` / `name:` pair (the value is matched separately, only for secret-like names)
_KEY_RE = re.compile(r"(?<![\w\-])([\w\-]+)\s*[=:]\s*")
_VALUE_RE = re.compile(r"\"[^\"]*\"|'[^']*'|[^\s,;&'\")]+")
_SECRET_WORDS = (
    "secret",
    "password",
    "passwd",
    "token",
    "signature",
    "sig",
    "credential",
    "accountkey",
    "account_key",
    "sas",
    "key",
)


def _redact_url(m: re.Match) -> str:
    scheme, rest, query = m.group(1), m.group(2), m.group(3)
    authority = rest.split("/", 1)[0]
    if "@" in authority:
        rest = "***@" + rest[len(authority.rpartition("@")[0]) + 1 :]
    return scheme + rest + ("?***" if query else "")


def _is_secret_name(name: str) -> bool:
    """True when a part of `name` (split at "-" and "_") starts with a secret word."""
    return any(part.lower().startswith(_SECRET_WORDS) for part in re.split(r"[-_]", name))


def _redact_pairs(text: str) -> str:
    out: list[str] = []
    done = 0
    for m in _KEY_RE.finditer(text):
        if m.start() < done or not _is_secret_name(m.group(1)):
            continue
        v = _VALUE_RE.match(text, m.end())
        if v is None:
            continue
        out += [text[done : m.end()], "***"]
        done = v.end()
    out.append(text[done:])
    return "".join(out)


#: credentials seen inside URLs given to this module (user:password, query values): a library's
#: message may quote them outside a URL (e.g. as part of a bucket name), so redact scrubs them too
_URL_SECRETS: set[str] = set()


def _remember_secrets(url: str) -> None:
    """Note the userinfo and query values of `url`, for `redact`."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    found = {userinfo, *userinfo.split(":")} if userinfo else set()
    found.update(v for _, v in parse_qsl(parts.query))
    _URL_SECRETS.update(x for x in found if len(x) >= 4)


def redact(text: str) -> str:
    """`text` with credentials removed: `user:password@` of URLs, URL query strings (SAS tokens,
    signatures), `secret=...`-like pairs, the values of the SECRET_ENV variables and any credential
    seen inside a URL given to this module."""
    if not text:
        return text
    for secret in sorted(_URL_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _URL_PART_RE.sub(_redact_url, text)
    text = _redact_pairs(text)
    for name in SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


# --------------------------------------------------------------------------- filesystems
def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) of a URL; StorageError when no implementation is
    installed for its protocol."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise StorageError(f"{redact(url)}: reading URLs needs fsspec (pip install fsspec)") from None
    if "@" in url or "?" in url:
        _remember_secrets(url)
        scheme = protocol(url)
        if scheme in OBJECT_STORES and "@" in url.split("/", 3)[2]:
            family = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}.get(scheme, scheme)
            where = _CREDENTIAL_HINTS.get(family, "the storage library's standard environment")
            raise StorageError(f"{redact(url)}: credentials in a {scheme}:// URL are not used (set {where})")
    try:
        return url_to_fs(url)
    except Exception as e:  # noqa: BLE001 - an unknown protocol or a missing package
        raise _error(e, url) from None


def _error(e: BaseException, url: str) -> StorageError:
    if isinstance(e, StorageError):
        return e
    return StorageError(f"{redact(url)}: {describe_error(e, url)}", getattr(e, "errno", None))


def describe_error(e: BaseException, url: str = "") -> str:
    """A short message for what went wrong with a storage call (no traceback, no credentials)."""
    scheme = protocol(url) if url else ""
    name = type(e).__name__
    names = {c.__name__ for c in type(e).__mro__}
    text = redact(str(e).strip()) or name
    family = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}.get(scheme, scheme)
    if isinstance(e, ImportError) or (isinstance(e, ValueError) and "rotocol" in text):
        package, extra = _PACKAGES.get(scheme, (None, None))
        if package is None:
            return f"no fsspec implementation is installed for {scheme}:// URLs ({text})"
        hint = f"pip install 'gpuscope[{extra}]'" if extra else f"pip install {package}"
        return f"reading {scheme}:// URLs needs {package} ({hint})"
    if (
        "NoCredentialsError" in names
        or "DefaultCredentialsError" in names
        or "credential" in text.lower()
        and ("unable to locate" in text.lower() or "no credentials" in text.lower())
    ):
        where = _CREDENTIAL_HINTS.get(family, "the storage library's standard environment")
        return f"no credentials found for {scheme}:// (set {where})"
    if "bucket does not exist" in text.lower() or "NoSuchBucket" in text:
        return "bucket does not exist"
    if "container" in text.lower() and "not" in text.lower() and "exist" in text.lower():
        return "container does not exist"
    if isinstance(e, FileNotFoundError):
        return "not found"
    if (
        isinstance(e, PermissionError)
        or "AccessDenied" in text
        or "Forbidden" in text
        or "InvalidAccessKeyId" in text
        or "SignatureDoesNotMatch" in text
    ):
        return f"access denied: check the credentials ({text})"
    if names & {
        "EndpointConnectionError",
        "ConnectionError",
        "ClientConnectorError",
        "ConnectTimeoutError",
        "ServerTimeoutError",
        "ConnectionRefusedError",
        "ClientOSError",
        "TimeoutError",
        "ReadTimeoutError",
    }:
        return f"cannot connect to the storage service ({text})"
    if isinstance(e, IsADirectoryError):
        return "is a directory"
    return f"{name}: {text}" if text != name else name


def _info_mtime_ns(info: dict) -> int:
    """The modification time in a filesystem's info dict (keys differ per implementation)."""
    for key in (
        "mtime",
        "LastModified",
        "last_modified",
        "updated",
        "modified",
        "mtime_ns",
        "creation_time",
        "created",
    ):
        v = info.get(key)
        if v is None:
            continue
        if hasattr(v, "timestamp"):
            return int(v.timestamp() * 1e9)
        if isinstance(v, (int, float)):
            return int(v) if key == "mtime_ns" else int(v * 1e9) if v < 1e11 else int(v * 1e6)
        if isinstance(v, str):
            try:
                from datetime import datetime

                return int(datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp() * 1e9)
            except ValueError:
                continue
    return 0


def _info_version(info: dict) -> str:
    """The object's version token: ETag, generation or content hash ("" when none is listed)."""
    for key in ("ETag", "etag", "generation", "md5Hash", "VersionId", "version_id", "crc32c"):
        v = info.get(key)
        if v:
            return str(v).strip('"')
    return ""


def _remote_info(fs: Any, url: str, info: dict) -> FileInfo:
    size = info.get("size")
    mtime = _info_mtime_ns(info)
    version = _info_version(info) or f"{size}:{mtime}"
    return FileInfo(url, int(size or 0), mtime, version)


def _url_of(fs: Any, path: str, like: str) -> str:
    """The URL of a path an fsspec listing returned, spelled with `like`'s scheme."""
    scheme = protocol(like)
    if scheme in ("http", "https") or path.startswith(scheme + "://"):
        return path
    return f"{scheme}://{path.lstrip('/')}" if scheme != "file" else f"file://{path}"


# --------------------------------------------------------------------------- reading
def stat(path: str) -> FileInfo:
    """Size, mtime and version of a file. FileNotFoundError / IsADirectoryError when it is not a
    file; StorageError for any other failure of a remote call. A fused file's rank part (`PATH@rankR`,
    `trace/read/fused.py`) is its file's."""
    if "@rank" in path:
        path = split_part(path)[0]
    if not is_remote(path):
        st = os.stat(path)
        if _stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"{path}: is a directory")
        return FileInfo(path, st.st_size, st.st_mtime_ns, ident=file_identity(st))
    fs, p = filesystem(path)
    try:
        info = fs.info(p)
    except FileNotFoundError:
        raise FileNotFoundError(f"{redact(path)}: not found") from None
    except Exception as e:  # noqa: BLE001
        raise _error(e, path) from None
    if info.get("type") == "directory":
        raise IsADirectoryError(f"{redact(path)}: is a directory")
    return _remote_info(fs, path, info)


def fingerprint(path: str) -> tuple[int, ...]:
    """`stat(path).fingerprint`: `identity.file_identity` of a local file (size, mtime, inode,
    device, ctime), (size, version number) of a remote one."""
    if not is_remote(path):
        return file_identity(os.stat(path))
    return stat(path).fingerprint


def open_read(path: str, block_size: int | None = None) -> IO[bytes]:
    """A seekable binary file object: a local regular file (opened without blocking: a FIFO or
    device swapped in raises `safe_open.UnsafeFile`, an OSError), else fsspec's file, which reads
    with HTTP range requests (`block_size` bytes at a time)."""
    if not is_remote(path):
        from profiler_core.safe_open import open_regular

        f, _ = open_regular(path)
        return io.BufferedReader(f, buffer_size=block_size or io.DEFAULT_BUFFER_SIZE)
    fs, p = filesystem(path)
    try:
        kwargs = {"block_size": block_size} if block_size else {}
        return fs.open(p, "rb", **kwargs)
    except FileNotFoundError:
        raise FileNotFoundError(f"{redact(path)}: not found") from None
    except IsADirectoryError:
        raise
    except Exception as e:  # noqa: BLE001
        raise _error(e, path) from None


def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of the file (one range request for a remote file)."""
    if end <= start:
        return b""
    if not is_remote(path):
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(end - start)
    fs, p = filesystem(path)
    try:
        return fs.cat_file(p, start=start, end=end)
    except FileNotFoundError:
        raise FileNotFoundError(f"{redact(path)}: not found") from None
    except Exception as e:  # noqa: BLE001
        raise _error(e, path) from None


def isdir(path: str) -> bool:
    """Whether `path` is a directory (a prefix holding objects, on object stores)."""
    if not is_remote(path):
        return os.path.isdir(path)
    fs, p = filesystem(path)
    try:
        return bool(fs.isdir(p))
    except Exception as e:  # noqa: BLE001
        raise _error(e, path) from None


def walk_files(root: str, accept: Callable[[str], bool] | None = None) -> Iterator[FileInfo]:
    """Every regular file under `root` (recursively, sorted, hidden directories skipped) whose
    name `accept` takes. A remote root is listed fresh (fsspec's listing cache is dropped first,
    so new files show) in one recursive listing; a failed listing raises StorageError."""
    if not is_remote(root):
        yield from _walk_local(root, accept)
        return
    fs, p = filesystem(root)
    try:
        fs.invalidate_cache(p)
        listing = fs.find(p, detail=True, withdirs=False)
    except FileNotFoundError as e:
        if "bucket" in str(e).lower() or "container" in str(e).lower():
            raise _error(e, root) from None
        return  # an empty prefix: no files yet
    except Exception as e:  # noqa: BLE001
        raise _error(e, root) from None
    base = p.rstrip("/")
    for name in sorted(listing):
        info = listing[name]
        if info.get("type", "file") != "file":
            continue
        rel = name[len(base) :].lstrip("/") if name.startswith(base) else name
        parts = rel.split("/")
        if not rel or any(part.startswith(".") for part in parts[:-1]):
            continue
        if accept is not None and not accept(parts[-1]):
            continue
        url = _url_of(fs, name, root)
        yield _remote_info(fs, url, info)


def _walk_local(root: str, accept: Callable[[str], bool] | None) -> Iterator[FileInfo]:
    if not os.path.isdir(root):
        return
    # symlinked run folders are followed (as torch-tb-profiler does); a folder reached twice
    # (a link cycle, or two links to one place) is walked once
    visited: set[tuple[int, int]] = set()
    for d, dirs, names in os.walk(root, followlinks=True):
        try:
            dst = os.stat(d)
        except OSError:
            dirs[:] = []
            continue
        if (dst.st_dev, dst.st_ino) in visited:
            dirs[:] = []
            continue
        visited.add((dst.st_dev, dst.st_ino))
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for name in sorted(names):
            if accept is not None and not accept(name):
                continue
            path = os.path.join(d, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if _stat.S_ISREG(st.st_mode):
                yield FileInfo(path, st.st_size, st.st_mtime_ns, ident=file_identity(st))


def relpath(path: str, root: str) -> str:
    """`path` relative to `root`, "/"-separated ("." for the root itself)."""
    if not is_remote(path):
        return os.path.relpath(path, root).replace(os.sep, "/")
    base = root.rstrip("/")
    if path == base:
        return "."
    if path.startswith(base + "/"):
        return path[len(base) + 1 :]
    return path


# --------------------------------------------------------------------------- writing
def makedirs(path: str) -> None:
    """Create a directory and its parents (nothing to do on object stores: prefixes need none)."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)
        return
    if is_object_store(path):
        return
    fs, p = filesystem(path)
    try:
        fs.makedirs(p, exist_ok=True)
    except Exception as e:  # noqa: BLE001
        raise _error(e, path) from None


def _tmp_name(path: str) -> str:
    parent, name = split(path)
    return join(parent, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


_KINDS = (
    (_stat.S_ISLNK, "a symbolic link"),
    (_stat.S_ISFIFO, "a FIFO"),
    (_stat.S_ISCHR, "a character device"),
    (_stat.S_ISBLK, "a block device"),
    (_stat.S_ISSOCK, "a socket"),
    (_stat.S_ISDIR, "a directory"),
)


class NotAFile(OSError):
    """The path to write exists and is not a regular file (a symlink, FIFO, device ...)."""


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


@contextlib.contextmanager
def write_beside(path: str, mode: int = 0o644) -> Iterator[IO[bytes]]:
    """A new file beside the local `path`, renamed over it when the block ends without an
    exception (removed otherwise): a reader sees the old file or the new one, never a part.
    Only a missing path or a regular file is replaced; anything else (a symlink, dangling or not,
    a FIFO, a device, a socket, a directory) raises NotAFile naming it, and nothing at `path` is
    ever opened (no wait on a FIFO). A replaced file keeps its permission bits; a new one gets
    `mode` less the umask."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not _stat.S_ISREG(st.st_mode):
        raise NotAFile(errno.EEXIST, f"it is {_kind(st.st_mode)}; only a regular file is replaced", path)
    tmp = _tmp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        if st is not None:
            os.fchmod(fd, _stat.S_IMODE(st.st_mode))
        with os.fdopen(fd, "wb", buffering=1 << 20) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_writer(url: str) -> Iterator[IO[bytes]]:
    """A binary file to write `url`'s whole content into; published only when the block ends
    without an exception: one put on object stores, else a hidden temporary name renamed over
    `url`. Nothing appears under `url` on failure. Raises StorageError (credentials redacted)."""
    buf = io.BytesIO()
    yield buf
    data = buf.getvalue()
    buf.close()
    fs, p = filesystem(url)
    try:
        if is_object_store(url):
            fs.pipe_file(p, data)
            return
        tmp = fs._strip_protocol(_tmp_name(url))  # noqa: SLF001 - fsspec's own URL -> path
        parent = split(p)[0]
        if parent:
            with contextlib.suppress(Exception):
                fs.makedirs(parent, exist_ok=True)
        fs.pipe_file(tmp, data)
        try:
            fs.mv(tmp, p)
        except BaseException:
            with contextlib.suppress(Exception):
                fs.rm_file(tmp)
            raise
    except Exception as e:  # noqa: BLE001
        raise _error(e, url) from None


# --------------------------------------------------------------------------- parts of a file
#: a part of a file named by a path of its own: rank R of a fused trace (trace/read/fused.py) is `FILE@rankR`
PART_RE = re.compile(r"^(?P<base>.+\.json(?:\.gz)?)@rank(?P<rank>\d{1,9})$", re.IGNORECASE)


def part_path(path: str, rank: int) -> str:
    """The path that names rank `rank`'s part of the fused file at `path`."""
    return f"{path}@rank{int(rank)}"


def split_part(path: str) -> tuple[str, int | None]:
    """(the file's path, the rank) of a part's path; (path, None) for any other path. A local file that exists
    under the whole name is itself, whatever its name."""
    m = PART_RE.match(path)
    if m is None:
        return path, None
    if not is_remote(path) and os.path.lexists(path):
        return path, None
    return m.group("base"), int(m.group("rank"))
