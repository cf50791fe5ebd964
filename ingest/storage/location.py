"""Where the lake lives: a local folder or ``s3://bucket/prefix`` on any S3-compatible store.

``LakeLocation`` is the one place that knows the difference. It yields the
tables' URIs and the ``storage_options`` delta-rs needs, and the small file
operations the staging area uses (``LakeFiles``: put, create-if-absent, get,
list, delete), so the storage modules never branch on "is it S3".

Commit safety on object storage (read from delta-rs 1.6 and object_store 0.13, the
versions ``deltalake`` 1.6.6 is built on): a Delta commit writes a temporary
commit file, then ``rename_if_not_exists`` to ``_delta_log/<version>.json``. On
S3, object_store does that as a *copy-if-not-exists*; delta-rs sets its mode to
``multipart`` unless told otherwise: a multipart upload whose one part is a copy
of the temporary file, completed with ``If-None-Match: *``. Of two writers that
race for the same version, exactly one completes; the other gets
``AlreadyExists``, delta-rs reports a commit conflict, and ``lake.with_commit_retries``
rebases and tries the next version. No rename of a local file, no lock file, no
DynamoDB: the store's conditional write is the lock. (AWS S3 has honoured
conditional writes since 2024; MinIO, R2 and Ceph too; the local moto server
honours ``If-None-Match: *`` on PUT and on CompleteMultipartUpload.) We set the
mode explicitly and refuse ``AWS_S3_ALLOW_UNSAFE_RENAME`` from the environment.

The same conditional PUT (``LakeFiles.create``) makes the staging area's
claims: the manifest of a commit in progress and the mark of a run being
recovered are created only if absent, so two machines agree on one of each.

Credentials for an ``s3://`` lake: a Prefect ``AwsCredentials`` block named by
``INGEST_LAKE_CREDENTIALS_BLOCK``, or the AWS default chain (environment,
shared files, profile, instance or container role) as boto3 resolves it, apart
from the source bucket's settings. Keys never appear in a repr, log or error.

They are resolved by a ``LakeSession``: what one run holds open to reach and query
its lake (the credentials, region and boto3 client of an ``s3://`` lake, whether the
bucket was checked, a DuckDB database for small queries, the Arrow relations its
scans register), opened by the run's context (``ingest.context``) and closed at the
run's end, so a run resolves a rotated key or a changed block again instead of a
process keeping the first it saw. A location bound to a session
(``LakeLocation.bound``: a run's ``ingest.context.RunContext.lake``, or a
command's) uses it; an unbound one resolves what
it needs on each use (the options ~10 ms, a boto3 client for a file operation far
more), so a caller that makes many calls binds one. A query over a lake on object storage
needs a session (its relations): a public entry point reached from outside a run
opens one for the call (``bound_for_call``). A session never leaves its process: a
pickled location arrives unbound.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from ingest import duck
from ingest.aws import block_session
from ingest.errors import AccessDeniedError, BucketNotFoundError, CredentialsError, EndpointError
from ingest.storage import durable

log = logging.getLogger(__name__)

SCHEME = "s3://"
# Credentials botocore refreshes from a role (instance, container, web identity): object_store
# finds and refreshes these itself, so they are not frozen into the storage options.
_ROLE_METHODS = frozenset({"iam-role", "container-role", "assume-role-with-web-identity"})


@dataclass(frozen=True, slots=True)
class LakeLocation:
    """The lake's root and how to reach it (no secrets: credentials are resolved by the
    session it is bound to, else on each use; see the module docstring).

    Attributes:
        root: ``s3://bucket/prefix`` (no trailing slash) or an absolute local folder.
        local_dir: Local folder for what is not the lake's record: warehouse.duckdb, the
            search index, downloaded objects, a run's listing files. For a local lake,
            the lake's own folder.
        endpoint_url: S3-compatible endpoint of the lake; None for AWS.
        region: Region of the lake's bucket; None uses the chain's (or us-east-1).
        credentials_block: Prefect AwsCredentials block with the lake's credentials.
        session: The run's ``LakeSession`` for this lake, or None (not compared, not
            pickled: a location sent to another process arrives unbound).
    """

    root: str
    local_dir: Path
    endpoint_url: str | None = None
    region: str | None = None
    credentials_block: str | None = None
    session: LakeSession | None = field(default=None, compare=False, hash=False, repr=False)

    def bound(self, session: LakeSession | None) -> LakeLocation:
        """This location reached through ``session`` (None: unbound)."""
        return replace(self, session=session)

    def __reduce__(self) -> tuple[Any, ...]:
        # A session holds clients and a database of this process: never pickled.
        return (
            LakeLocation,
            (self.root, self.local_dir, self.endpoint_url, self.region, self.credentials_block),
        )

    @property
    def queries(self) -> Any:
        """The session's database for small queries (``ingest.duck.SmallQueries``), or None
        when unbound (``ingest.duck.cursor`` then opens a database for the query)."""
        return self.session.queries if self.session is not None else None

    @property
    def relations(self) -> Any:
        """The session's Arrow relations (``ingest.duck.Relations``): where a scan of a lake
        on object storage registers what it reads, and what the connections that run the
        scan see. None for a local lake (its scans read files by name). An unbound remote
        location has none to give: a clear error, not a scan no connection could run."""
        if not self.remote:
            return None
        if self.session is None:
            raise RuntimeError(
                f"{self.root}: a lake on object storage is queried through a lake session "
                "(LakeLocation.bound, ingest.context.RunContext.lake)"
            )
        return self.session.relations

    def connect(self, database: str = ":memory:", **settings: Any) -> Any:
        """A DuckDB connection (``ingest.duck.connect``) that sees this lake's relations:
        for a query over a ``storage.scan`` expression."""
        return duck.connect(database, relations=self.relations, **settings)

    @property
    def remote(self) -> bool:
        return self.root.startswith(SCHEME)

    @property
    def bucket(self) -> str:
        return self.root[len(SCHEME) :].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        """The key prefix of the lake inside its bucket ('' or ending with '/')."""
        rest = self.root[len(SCHEME) :].partition("/")[2].strip("/")
        return f"{rest}/" if rest else ""

    def uri(self, *parts: str) -> str:
        """The URI (or local path) of a file or folder under the lake's root."""
        tail = "/".join(p.strip("/") for p in parts if p)
        if self.remote:
            return f"{self.root}/{tail}" if tail else self.root
        return str(Path(self.root, *parts)) if parts else self.root

    def storage_options(self) -> dict[str, str]:
        """delta-rs ``storage_options`` for this lake ({} for a local one)."""
        return _resolve(self).storage_options() if self.remote else {}

    def __str__(self) -> str:
        return self.root


DataDir = Path | LakeLocation


def locate(data_dir: DataDir | str) -> LakeLocation:
    """The lake location of ``data_dir`` (a local folder given as a path is its own lake)."""
    if isinstance(data_dir, LakeLocation):
        return data_dir
    if isinstance(data_dir, str) and data_dir.startswith(SCHEME):
        raise ValueError(f"{data_dir}: build the LakeLocation from the settings (Settings.lake)")
    path = Path(data_dir)
    return LakeLocation(root=str(path), local_dir=path)


@contextmanager
def bound_for_call(data_dir: DataDir | str) -> Iterator[LakeLocation]:
    """The location of ``data_dir``, bound for the call: its own session when it has one,
    else (a lake on object storage reached from outside a run, as a library user's
    ``storage.query`` is) a session opened here and closed after it. What a connection
    made inside holds (its relations, delta-rs's datasets) outlives the session."""
    loc = locate(data_dir)
    if not loc.remote or loc.session is not None:
        yield loc
        return
    with closing(LakeSession(loc)) as session:
        yield loc.bound(session)


def parse_root(value: str) -> str:
    """``s3://bucket/prefix`` normalised (no trailing slash), or a clear error."""
    rest = value[len(SCHEME) :].strip("/")
    bucket = rest.split("/", 1)[0]
    if not bucket or not (3 <= len(bucket) <= 63):
        raise ValueError(f"{value!r} is not s3://bucket/prefix (INGEST_DATA_DIR / --data-dir)")
    return SCHEME + rest


# ------------------------------------------------------------------------ credentials


@dataclass(slots=True)
class _Resolved:
    options: dict[str, str] = field(repr=False)
    make_client: Callable[[], Any] = field(repr=False)  # a boto3 client costs ~50-250 ms
    credentials: Any = field(repr=False)  # botocore's, refreshed by botocore; None: a role
    checked: bool = False
    made: Any = field(default=None, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def client(self) -> Any:
        """The boto3 client, made on first use (delta-rs needs only the options)."""
        with self.lock:
            if self.made is None:
                self.made = self.make_client()
            return self.made

    def close(self) -> None:
        with self.lock:
            client, self.made = self.made, None
        if client is not None:
            client.close()

    def storage_options(self) -> dict[str, str]:
        """The options with the credentials as they are now (botocore refreshes temporary
        ones, from an assumed role or SSO, before they expire)."""
        options = dict(self.options)
        if self.credentials is not None:
            frozen = self.credentials.get_frozen_credentials()
            options["AWS_ACCESS_KEY_ID"] = str(frozen.access_key)
            options["AWS_SECRET_ACCESS_KEY"] = str(frozen.secret_key)
            if frozen.token:
                options["AWS_SESSION_TOKEN"] = str(frozen.token)
        return options


class LakeSession:
    """What one run holds open to reach and query its lake (see the module docstring):
    the resolved credentials, region and boto3 client of an ``s3://`` lake (on first use;
    none for a local lake), whether its bucket was checked, and a DuckDB database for
    small queries (``ingest.duck.SmallQueries``, on first use) and the Arrow relations its
    scans register (``ingest.duck.Relations``). ``close`` closes the client and the
    database and drops the relations; a closed session refuses to be used. Thread-safe."""

    def __init__(self, location: LakeLocation) -> None:
        self.location = location.bound(None)
        self._resolved: _Resolved | None = None
        self._queries: Any = None
        self._relations: Any = None
        self._closed = False
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    def resolved(self) -> _Resolved:
        """The lake's credentials, region and client, resolved on the first call."""
        with self._lock:
            self._check_open()
            if self._resolved is None:
                self._resolved = _resolve_now(self.location)
            return self._resolved

    def storage_options(self) -> dict[str, str]:
        """delta-rs ``storage_options`` for the lake ({} for a local one)."""
        return self.resolved().storage_options() if self.location.remote else {}

    @property
    def queries(self) -> Any:
        """The session's database for small queries (``ingest.duck.SmallQueries``)."""
        with self._lock:
            self._check_open()
            if self._queries is None:
                self._queries = duck.SmallQueries(self._relations_now())
            return self._queries

    @property
    def relations(self) -> Any:
        """The run's Arrow relations (``ingest.duck.Relations``): what scans of the lake
        register, for the connections made with them (see ``ingest.duck``)."""
        with self._lock:
            self._check_open()
            return self._relations_now()

    def _relations_now(self) -> Any:
        if self._relations is None:
            self._relations = duck.Relations()
        return self._relations

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the lake session of {self.location.root} is closed")

    def close(self) -> None:
        """Close the client's connections and the database (idempotent)."""
        with self._lock:
            self._closed = True
            resolved, self._resolved = self._resolved, None
            queries, self._queries = self._queries, None
            relations, self._relations = self._relations, None
        if relations is not None:
            relations.clear()
        if resolved is not None:
            resolved.close()
        if queries is not None:
            queries.close()

    def __copy__(self) -> LakeSession:
        return self  # one per run: copies of the settings share it

    def __deepcopy__(self, memo: dict[int, Any]) -> LakeSession:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("a LakeSession stays in its process (its location pickles unbound)")


def _resolve(loc: LakeLocation) -> _Resolved:
    """Credentials, region and a boto3 client for ``loc``: its session's, else resolved
    now for this use."""
    return loc.session.resolved() if loc.session is not None else _resolve_now(loc)


def _resolve_now(loc: LakeLocation) -> _Resolved:
    import boto3
    from botocore.config import Config

    session = (
        block_session(loc.credentials_block, used_for="INGEST_LAKE_CREDENTIALS_BLOCK")
        if loc.credentials_block
        else boto3.session.Session()
    )
    credentials = session.get_credentials()
    if credentials is None:
        raise CredentialsError(
            f"no credentials for the lake {loc.root}: name a Prefect AwsCredentials block in "
            "INGEST_LAKE_CREDENTIALS_BLOCK, or give the AWS chain some (AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance or container role)"
        )
    region = loc.region or session.region_name or "us-east-1"
    options = {
        "AWS_REGION": region,
        # Commits are made with the store's conditional writes (see the module's docstring).
        "aws_copy_if_not_exists": "multipart",
        "aws_conditional_put": "etag",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "false",
        "timeout": "120s",
        "connect_timeout": "10s",
    }
    if loc.endpoint_url:
        options["AWS_ENDPOINT_URL"] = loc.endpoint_url
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        if urlsplit(loc.endpoint_url).scheme == "http":
            options["AWS_ALLOW_HTTP"] = "true"
    config = Config(
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=32,
        s3={"addressing_style": "path"} if loc.endpoint_url else None,
    )
    return _Resolved(
        options=options,
        make_client=lambda: session.client(
            "s3", endpoint_url=loc.endpoint_url, region_name=region, config=config
        ),
        credentials=None if getattr(credentials, "method", "") in _ROLE_METHODS else credentials,
    )


def check(loc: LakeLocation) -> None:
    """Fail at once, with the setting to fix, when an ``s3://`` lake cannot be reached:
    endpoint down, no or rejected credentials, bucket missing. Once per session (an
    unbound location: on each call)."""
    if not loc.remote:
        return
    found = _resolve(loc)
    if found.checked:
        return
    where = loc.endpoint_url or "AWS"
    try:
        found.client.head_bucket(Bucket=loc.bucket)
    except EndpointConnectionError:
        raise EndpointError(
            f"the lake's endpoint {where} cannot be reached (INGEST_LAKE_ENDPOINT_URL, "
            f"lake {loc.root})"
        ) from None
    except NoCredentialsError:
        raise CredentialsError(
            f"no credentials for the lake {loc.root} (INGEST_LAKE_CREDENTIALS_BLOCK or the "
            "AWS chain)"
        ) from None
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise BucketNotFoundError(
                f"the lake's bucket {loc.bucket!r} does not exist at {where} (create it; "
                "INGEST_DATA_DIR names it)"
            ) from None
        if status in (401, 403) or code in ("403", "AccessDenied", "InvalidAccessKeyId"):
            raise AccessDeniedError(
                f"the lake's bucket {loc.bucket!r} at {where} refused these credentials "
                f"({code}; INGEST_LAKE_CREDENTIALS_BLOCK or the AWS chain)"
            ) from None
        raise
    found.checked = True


# ------------------------------------------------------------------------ files


@dataclass(frozen=True, slots=True)
class Entry:
    """A file under the lake: its key relative to the root, size and modification time."""

    key: str
    size: int
    mtime: float


class LakeFiles(Protocol):
    """Small file operations on keys relative to the lake's root ('/' separated)."""

    def put(self, key: str, data: bytes, *, sync: bool = True) -> None:
        """Write ``data`` whole: a reader sees the old file, or the new one complete.
        ``sync`` (a local folder): its bytes reach the disk before its name does; False
        for a file whose loss in a power cut costs nothing stored (a run's timings, its
        heartbeat), which then skips the two syncs (~10 ms on a cloud disk)."""

    def create(self, key: str, data: bytes) -> bool:
        """Write ``data`` only if ``key`` does not exist; False when it did (atomic)."""

    def get(self, key: str) -> bytes | None:
        """The file's bytes, or None when it does not exist."""

    def entries(self, prefix: str) -> list[Entry]:
        """Every file under ``prefix`` (recursively)."""

    def children(self, prefix: str) -> list[str]:
        """Names of the folders directly under ``prefix``."""

    def delete(self, keys: list[str]) -> None:
        """Delete files (missing ones are fine)."""

    def move(self, key: str, new_key: str) -> None:
        """Move a file (kept for a person to look at)."""

    def mtime(self, key: str) -> float | None:
        """When the file (or a local folder) was last written; None when missing."""


class LocalFiles:
    """A local folder: temporary name, synced, renamed (``ingest.storage.durable``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def _tmp(self, final: Path) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True)
        return final.parent / f".{final.name}.{uuid.uuid4().hex}.tmp"

    def put(self, key: str, data: bytes, *, sync: bool = True) -> None:
        final = self.path(key)
        tmp = self._tmp(final)
        try:
            tmp.write_bytes(data)
            if sync:
                durable.replace(tmp, final)
            else:
                os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)

    def create(self, key: str, data: bytes) -> bool:
        final = self.path(key)
        tmp = self._tmp(final)
        try:
            tmp.write_bytes(data)
            durable.fsync_file(tmp)
            try:
                os.link(tmp, final)  # fails if the name exists: create-if-absent, whole
            except FileExistsError:
                return False
            durable.fsync_dir(final.parent)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def get(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def entries(self, prefix: str) -> list[Entry]:
        base = self.path(prefix)
        if not base.is_dir():
            return []
        out = []
        for path in base.rglob("*"):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if path.is_file():
                out.append(Entry(path.relative_to(self.root).as_posix(), st.st_size, st.st_mtime))
        return sorted(out, key=lambda e: e.key)

    def children(self, prefix: str) -> list[str]:
        base = self.path(prefix)
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir())

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self.path(key).unlink(missing_ok=True)

    def mtime(self, key: str) -> float | None:
        try:
            return self.path(key).stat().st_mtime
        except OSError:
            return None

    def move(self, key: str, new_key: str) -> None:
        target = self.path(new_key)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(self.path(key), target)
        except OSError:
            self.path(key).unlink(missing_ok=True)


class S3Files:
    """The lake's prefix in a bucket, through boto3. A PUT is atomic (an object is seen
    whole or not at all); create-if-absent is a PUT with ``If-None-Match: *``."""

    def __init__(self, loc: LakeLocation) -> None:
        self.loc = loc
        self.bucket = loc.bucket
        self.prefix = loc.prefix
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The session's client (an unbound location's: resolved once for this object)."""
        if self._client is None:
            self._client = _resolve(self.loc).client
        return self._client

    def put(self, key: str, data: bytes, *, sync: bool = True) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def create(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self.prefix + key, Body=data, IfNoneMatch="*"
            )
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (409, 412):  # exists (412) or a concurrent create in flight (409)
                return False
            raise
        return True

    def get(self, key: str) -> bytes | None:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]
            return bytes(body.read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise

    def _pages(self, full: str, **options: str) -> Iterator[dict[str, Any]]:
        """The listing pages of the keys under ``full`` (the prefix in the bucket)."""
        paginator = self.client.get_paginator("list_objects_v2")
        yield from paginator.paginate(Bucket=self.bucket, Prefix=full, **options)

    def entries(self, prefix: str) -> list[Entry]:
        full = self.prefix + prefix.strip("/") + "/"
        return [
            Entry(obj["Key"][len(self.prefix) :], int(obj["Size"]), obj["LastModified"].timestamp())
            for page in self._pages(full)
            for obj in page.get("Contents", ())
        ]

    def children(self, prefix: str) -> list[str]:
        full = self.prefix + prefix.strip("/") + "/"
        return sorted(
            common["Prefix"][len(full) :].rstrip("/")
            for page in self._pages(full, Delimiter="/")
            for common in page.get("CommonPrefixes", ())
        )

    def delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            chunk = keys[i : i + 1000]
            if chunk:
                self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": self.prefix + k} for k in chunk], "Quiet": True},
                )

    def mtime(self, key: str) -> float | None:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        return float(head["LastModified"].timestamp())

    def move(self, key: str, new_key: str) -> None:
        self.client.copy_object(
            Bucket=self.bucket,
            Key=self.prefix + new_key,
            CopySource={"Bucket": self.bucket, "Key": self.prefix + key},
        )
        self.delete([key])


def files(data_dir: DataDir) -> LakeFiles:
    """The file operations of the lake at ``data_dir``."""
    loc = locate(data_dir)
    return S3Files(loc) if loc.remote else LocalFiles(Path(loc.root))
