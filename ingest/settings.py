"""One settings object for endpoints, paths and defaults.

Every field can come from an environment variable with the ``INGEST_`` prefix
(``INGEST_DATA_DIR``, ``INGEST_S3_CONCURRENCY`` ...) or a ``.env`` file; the
CLI options and the flow parameters override them. Settings are built at the
boundary (the CLI command or the flow run), never at import time.
"""

from __future__ import annotations

import json
import typing
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ingest.records import Downloads
from ingest.rest.settings import GitHubSettings as GitHubSettings
from ingest.rest.settings import HttpSettings as HttpSettings
from ingest.rest.settings import RestSettings as RestSettings
from ingest.rest.settings import SharedSettings as SharedSettings
from ingest.storage.location import SCHEME, LakeLocation, parse_root

MiB = 1024 * 1024


def plain_list(value: object) -> object:
    """A list setting from the environment or a ``.env`` file: a plain value
    (``INGEST_ALLOWED_ROOTS=/srv/data``), values separated by commas (``/srv/a,/srv/b``,
    spaces around them dropped), or a JSON list (``'["/srv/a", "/srv/b"]'``, for a value
    holding a comma). An empty variable is an empty list. Anything else (a list given in
    code) is left to the field's own validation."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(
                f"not a JSON list ({exc}): write the values separated by commas, "
                'or a JSON list such as ["a", "b"]'
            ) from None
    return [part.strip() for part in text.split(",") if part.strip()]


# A list of strings that a variable gives as a plain value, comma-separated values or a JSON
# list (``plain_list``); pydantic-settings would otherwise accept only JSON.
StrList = Annotated[list[str], NoDecode, BeforeValidator(plain_list)]


def _group(field: Any) -> bool:
    """Whether a field of ``Settings`` is a concern's group (a sub-model)."""
    kind = field.annotation
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _secret(field: Any) -> bool:
    return field.annotation is SecretStr or SecretStr in typing.get_args(field.annotation)


class ServeSettings(BaseModel):
    """The Prefect server that ``ingest serve`` starts (``INGEST_SERVE_*``)."""

    database_url: SecretStr | None = Field(
        None,
        description="Database of the Prefect server that `ingest serve` starts, as "
        "postgresql+asyncpg://user:password@host:5432/database (never logged); empty: "
        "SQLite under PREFECT_HOME.",
    )
    database_url_file: Path | None = Field(
        None,
        description="A file holding the database URL (a secrets mount, mode 600), read when "
        "INGEST_SERVE_DATABASE_URL is not set: the password stays off the command line.",
    )
    local_server_idle: float = Field(
        1800.0,
        ge=0,
        description="With no Prefect API configured and no `ingest serve` running, a command "
        "starts a local Prefect server that stays for the next commands (`ingest server "
        "stop` stops it) until unused for this many seconds; 0: a server of the command's "
        "own, stopped when it ends (~8 s more per command).",
    )


class AlertSettings(BaseModel):
    """The alerts of ``automations.yaml`` (``INGEST_ALERT_*``), created by ``ingest serve``."""

    block: str | None = Field(
        None,
        description="Prefect notification block the alerts go to, as <block type slug>/<name> "
        "(custom-webhook/nightly-alerts, slack-webhook/..., email/...); empty: no alerts.",
    )
    late_after: float = Field(
        1800.0,
        ge=10,
        description="Seconds a Late nightly run may wait to start before the late alert "
        "(Prefect's proactive triggers need at least 10).",
    )
    stale_after: float = Field(
        26 * 3600.0,
        ge=10,
        description="Seconds without a completed nightly run before the stale alert.",
    )


class LakeSettings(BaseModel):
    """An ``s3://`` data_dir's object store (``INGEST_LAKE_*``); see ``Settings.location``."""

    endpoint_url: str | None = Field(
        None,
        description="S3-compatible endpoint of an s3:// data_dir (MinIO, Ceph, moto), apart "
        "from the source bucket's; empty means AWS.",
    )
    region: str | None = Field(
        None, description="Region of an s3:// data_dir's bucket; None uses the AWS chain's."
    )
    credentials_block: str | None = Field(
        None,
        description="Prefect AwsCredentials block with the credentials of an s3:// data_dir; "
        "None uses the AWS chain (apart from s3_credentials_block, the source's).",
    )


class S3Settings(BaseModel):
    """The source bucket and how it is read (``INGEST_S3_*``)."""

    bucket: str | None = Field(None, description="Bucket to ingest.")
    prefix: str = Field("", description="Only keys under this prefix.")
    include: StrList = Field(
        default_factory=list,
        description="Globs on the key below the prefix; keep keys matching any (in the "
        "environment separated by commas: INGEST_S3_INCLUDE='*.pdf,*.dwg').",
    )
    exclude: StrList = Field(
        default_factory=list,
        description="Globs on the key below the prefix; drop keys matching any.",
    )
    endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint (MinIO, Ceph, moto); None means AWS."
    )
    region: str | None = Field(None, description="AWS region; None uses the standard chain.")
    download_dir: str | None = Field(
        None,
        description="Where objects land, at DIR/<key relative to prefix>: a local folder or "
        "s3://bucket/prefix (written through the source's endpoint and credentials); "
        "default DATA_DIR/objects/<bucket>.",
    )
    refuse_folded_collisions: bool = Field(
        False,
        description="Refuse a key whose local path differs from another's only by case or "
        "Unicode normal form (A.txt and a.txt, NFC and NFD): on for a download folder on a "
        "case-insensitive file system (macOS, Windows, SMB), where both would be one file.",
    )
    concurrency: int = Field(
        128,
        ge=1,
        le=512,
        description="Requests in flight. Sized for latency (in flight = rate x latency), "
        "not for CPU cores.",
    )
    same_target: Literal["wait", "skip", "run"] = Field(
        "wait",
        description="When another live run ingests the same bucket and prefix into the same "
        "lake: wait for it to end (then this run finds its work stored), skip this run with "
        "a message, or run anyway (both do all the work).",
    )
    batch_size: int = Field(
        500, ge=1, le=10_000, description="Objects per Prefect task run (one task per batch)."
    )
    list_shards: int = Field(
        4,
        ge=1,
        le=256,
        description="Key-range shards listed concurrently (boundaries among the '/' prefixes "
        "below the prefix; a prefix with fewer folders gets fewer shards, a flat one 1).",
    )
    list_chunk_pages: int = Field(
        25,
        ge=1,
        le=100,
        description="Listing pages (1,000 keys each) per list-objects task; on a first "
        "listing (nothing stored under the prefix yet) the first chunks are smaller so "
        "downloads start early.",
    )
    range_threshold: int = Field(
        16 * MiB, ge=MiB, description="Objects at least this large are fetched as byte ranges."
    )
    range_size: int = Field(8 * MiB, ge=MiB, description="Size of one byte range.")
    max_attempts: int = Field(
        5,
        ge=1,
        le=20,
        description="Retries after the first request on throttling, 5xx and connection errors.",
    )
    stream_retries: int = Field(
        3, ge=0, le=20, description="Resumptions of a body stream broken mid-transfer."
    )
    connect_timeout: float = Field(10.0, gt=0, description="Seconds to open a connection.")
    read_timeout: float = Field(60.0, gt=0, description="Seconds without a byte read.")
    request_timeout: float = Field(
        600.0,
        gt=0,
        description="Seconds one GET may take in all, a backstop behind the read timeout (one "
        "request moves at most s3_range_threshold bytes: 16 MiB in 10 minutes is 27 KB/s).",
    )
    credentials_block: str | None = Field(
        None, description="Name of a Prefect AwsCredentials block; None uses the AWS chain."
    )


class ExtractSettings(BaseModel):
    """Text extraction of the downloaded files (``INGEST_EXTRACT_*``)."""

    workers: int = Field(
        0,
        ge=0,
        le=256,
        description="Extraction worker processes (CPU-bound); 0 means one per core.",
    )
    time_limit: float = Field(
        120.0, gt=0, le=3600, description="Seconds one file may take before it is a timeout."
    )
    run_budget: float | None = Field(
        4 * 3600.0,
        gt=0,
        description="Seconds a run may spend extracting (from its first file, per process); "
        "files not started by then are timeout rows that the next run extracts. None: no "
        "budget.",
    )
    max_chars: int = Field(
        10_000_000,
        ge=1000,
        description="Characters of text kept per document, and of its pages' texts and "
        "its markdown each; a longer one is cut in the worker and its metadata says so "
        "(text_cut, pages_cut, markdown_cut: kept and whole length).",
    )
    memory_limit_mb: int = Field(
        2048,
        ge=0,
        description="Address space of each worker process in MiB (0: no limit); a parser "
        "going over gets a failed or crashed row, never the machine.",
    )
    max_pages: int = Field(
        5000, ge=1, description="Pages of one PDF that are read (the page count is exact)."
    )
    in_memory_bytes: int = Field(
        32 * MiB,
        ge=0,
        description="Files up to this size are read whole; larger PDFs stream from disk.",
    )


class ChunkSettings(BaseModel):
    """The chunks of ``document_chunks`` (``INGEST_CHUNK_*``)."""

    chars: int = Field(
        2000,
        ge=100,
        description="Size of a document_chunks chunk in characters (cut at headings and "
        "paragraphs, so most are shorter).",
    )
    overlap: int = Field(
        200,
        ge=0,
        description="Characters a chunk repeats of the one before it (at most half a chunk).",
    )


class OcrSettings(BaseModel):
    """OCR of image-only PDF pages (``INGEST_OCR_*``)."""

    enabled: bool = Field(
        False,
        description="OCR image-only PDF pages with tesseract (needs the ocr extra and the "
        "tesseract-ocr, tesseract-ocr-kor Debian packages); 10-30 s a page on 2 cores.",
    )
    languages: str = Field("kor+eng", description="tesseract languages, joined by '+'.")
    dpi: int = Field(300, ge=72, le=600, description="Render resolution of OCR'd pages.")
    max_pages: int = Field(
        10, ge=1, le=1000, description="OCR'd pages per document at most (the page cap)."
    )
    workers: int = Field(1, ge=1, le=64, description="Processes that run OCR jobs.")
    queue_size: int = Field(
        8,
        ge=1,
        le=10_000,
        description="OCR jobs queued or running at most; documents beyond it keep needs_ocr "
        "and are OCR'd by no one this run.",
    )
    time_limit: float = Field(900.0, gt=0, description="Seconds one document's OCR may take.")


@dataclass(frozen=True, slots=True)
class Extracting:
    """What a run's extraction reads of its settings (``Settings.extracting``): the
    extract, chunk and OCR groups, and its downloads (the parsers' fence grants their
    folder)."""

    extract: ExtractSettings
    chunk: ChunkSettings
    ocr: OcrSettings
    downloads: Downloads


class Settings(BaseSettings):
    """Defaults for every run; see the field descriptions.

    A concern's settings are grouped in a sub-model (``s3``: ``S3Settings``) whose
    variables keep the flat names: ``INGEST_S3_CONCURRENCY`` is ``s3.concurrency``
    (the first ``_`` after the prefix splits the group from its field). Code reads the
    group's field (``settings.s3.concurrency``) and sets it through the group
    (``Settings(s3={"bucket": "b"})``, ``settings.updated(s3={"bucket": "b"})``).
    """

    model_config = SettingsConfigDict(
        env_prefix="INGEST_",
        env_file=".env",
        extra="ignore",
        validate_default=True,
        env_nested_delimiter="_",
        env_nested_max_split=1,
    )
    data_dir: Path | str = Field(
        Path("data"),
        description="Where the lake lives: a local folder (the tables, warehouse.duckdb and "
        "downloaded objects under it) or s3://bucket/prefix on any S3-compatible store "
        "(then see lake_endpoint_url, lake_credentials_block and local_dir).",
    )
    local_dir: Path = Field(
        Path("data"),
        description="With an s3:// data_dir: the local folder for what is not the lake's "
        "record (warehouse.duckdb, the search index, downloaded objects, reports).",
    )
    lake: LakeSettings = Field(default_factory=LakeSettings)

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir(cls, value: object) -> Path | str:
        """``s3://bucket/prefix`` stays a URI (a Path would turn it into a folder 's3:')."""
        if isinstance(value, str) and value.startswith(SCHEME):
            return parse_root(value)
        return Path(value)  # type: ignore[arg-type]

    # --- lake -----------------------------------------------------------------
    retention_days: int = Field(
        90,
        ge=0,
        description="Days of history (object log, task timings, API requests) kept; 0 keeps all.",
    )
    compact_min_files: int = Field(
        64, ge=2, description="A table with more files than this is compacted by the next run."
    )
    vacuum_retention_hours: int = Field(
        168,
        ge=0,
        description="Hours a file stays after it left its table (readers of older versions).",
    )
    flow_timeout: float = Field(
        6 * 3600.0,
        gt=0,
        description="Seconds a flow run (s3-ingest, github-pulls, nightly) may take before "
        "Prefect ends it as TimedOut; its staged rows are committed. Read from the "
        "environment of the process running the flow, as each run starts.",
    )
    staging_stale_after: float = Field(
        300.0,
        gt=0,
        description="Seconds without a heartbeat after which a run's staged rows are committed "
        "by the next run (the run died).",
    )

    # --- alerts (automations.yaml, created by `ingest serve`) -------------------
    alert: AlertSettings = Field(default_factory=AlertSettings)

    # --- the Prefect server of `ingest serve` ----------------------------------
    serve: ServeSettings = Field(default_factory=ServeSettings)

    # --- What a deployment's run may point at (ingest.security) -------------------
    allowed_hosts: StrList = Field(
        default_factory=list,
        description="API hosts (host, host:port or a URL) a deployment's run may send "
        "credentials to, and a redirect or next-page link may lead to, besides the defaults of "
        "this worker's own prefect.yaml, github_base_url and the source file's "
        "client.base_url (INGEST_ALLOWED_HOSTS=ghe.corp,api.corp).",
    )
    allowed_roots: StrList = Field(
        default_factory=list,
        description="Folders or s3://bucket/prefix a deployment's run may write its data_dir "
        "and download_dir under, besides this worker's data_dir, s3_download_dir and the "
        "defaults of its own prefect.yaml.",
    )
    source_roots: StrList = Field(
        default_factory=list,
        description="Folders a deployment's run may read its source file from, besides the "
        "project's sources/.",
    )
    source_env_prefixes: StrList = Field(
        default_factory=lambda: ["INGEST_SOURCE_"],
        description="Prefixes of the variables a source file's env: may name in a "
        "deployment's run (AWS_*, PREFECT_* and INGEST_* settings are refused always).",
    )
    source_env_names: StrList = Field(
        default_factory=lambda: ["GITHUB_TOKEN"],
        description="Further variables a source file's env: may name in a deployment's run "
        "(GITHUB_TOKEN, which sources/github.yaml reads, sent only to an allowed host; "
        "add TICKETS_API_KEY ...).",
    )

    source_functions: StrList = Field(
        default_factory=list,
        description="Functions a source file's processing_steps and incremental.convert may "
        "name besides the project's own (unix_seconds, unix_millis, iso_date, utc_iso): "
        "import paths module:function, or module:* for the public functions defined in a "
        "module (JSON list). Registering one deploys code: it runs with the worker's "
        "credentials.",
    )

    # --- The code a cluster worker clones (prefect.yaml's nightly-cluster) ----------
    git_repository: str | None = Field(
        None,
        description="Repository the workers of ingest-cluster clone for each run, set on "
        "each worker (not a Prefect variable: whoever reaches the API could change one).",
    )
    git_ref: str | None = Field(
        None,
        description="Branch or tag of git_repository the workers clone; empty: its default branch.",
    )

    # --- Where the batch tasks run ----------------------------------------------
    task_runner: Literal["thread", "dask"] = Field(
        "thread",
        description="Where the batch tasks run: threads of the flow's process, or a Dask "
        "cluster (each batch downloads, extracts and stages its rows on the worker that "
        "runs it).",
    )
    dask_address: str = Field(
        "",
        description="Scheduler of an existing Dask cluster (tcp://scheduler:8786); empty "
        "starts a LocalCluster on this machine for the run.",
    )

    # --- S3 -----------------------------------------------------------------
    s3: S3Settings = Field(default_factory=S3Settings)
    keep_files: bool = Field(
        True,
        description="Keep the downloaded objects at the download destination; false drops "
        "each file once its text is extracted (only the rows and the text are kept).",
    )
    max_failed_ratio: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="A run fails when more than this share of its objects failed.",
    )

    # --- Text extraction (ingest.extract) --------------------------------------
    extract: ExtractSettings = Field(default_factory=ExtractSettings)
    chunk: ChunkSettings = Field(default_factory=ChunkSettings)
    ocr: OcrSettings = Field(default_factory=OcrSettings)

    # --- GitHub ---------------------------------------------------------------
    github: GitHubSettings = Field(default_factory=GitHubSettings)

    # --- Every REST client (GitHub and declared sources) -------------------------
    http: HttpSettings = Field(default_factory=HttpSettings)

    # --- Limits shared across workers ------------------------------------------------
    shared: SharedSettings = Field(default_factory=SharedSettings)

    # --- REST requests of every source (ingest rest, ingest github) ---------------
    rest: RestSettings = Field(default_factory=RestSettings)

    @classmethod
    def field_of(cls, variable: str) -> FieldInfo | None:
        """The field the variable ``INGEST_<VARIABLE>`` sets (``S3_CONCURRENCY``, or a
        group's field: ``SERVE_DATABASE_URL`` is ``serve.database_url``), or None."""
        name = variable.lower().removeprefix("ingest_")
        field = cls.model_fields.get(name)
        if field is not None and not _group(field):
            return field
        group, _, sub = name.partition("_")
        found = cls.model_fields.get(group)
        if found is None or not _group(found):
            return None
        return found.annotation.model_fields.get(sub)  # type: ignore[union-attr]

    @model_validator(mode="before")
    @classmethod
    def _no_flat_names(cls, data: Any) -> Any:
        """A group's field is set through its group (``Settings(s3={"bucket": "b"})``); a
        keyword by the variable's flat name (``s3_bucket=``) is an error, not a value
        silently ignored."""
        if isinstance(data, dict):
            for key in data:
                group, _, sub = key.partition("_")
                found = cls.model_fields.get(group)
                if key not in cls.model_fields and found is not None and _group(found):
                    raise ValueError(f"{key}: set through its group, {group}={{{sub!r}: ...}}")
        return data

    def updated(self, **changes: Any) -> Settings:
        """A copy with the fields ``changes`` names replaced: a plain field by its name
        (``data_dir=``), a group's fields as a mapping under the group's name
        (``s3={"bucket": "b"}``), replaced in a copy of the group so that this object
        keeps its own. Like ``model_copy(update=...)``, the values are not validated; a
        name that is no setting is a KeyError."""
        fields = type(self).model_fields
        update: dict[str, Any] = {}
        for key, value in changes.items():
            if key not in fields:
                raise KeyError(f"no setting {key}")
            if _group(fields[key]) and isinstance(value, dict):
                group = getattr(self, key)
                unknown = set(value) - set(type(group).model_fields)
                if unknown:
                    raise KeyError(f"no setting {key}.{sorted(unknown)[0]}")
                value = group.model_copy(update=value)
            update[key] = value
        return self.model_copy(update=update)

    @classmethod
    def secret_fields(cls) -> list[str]:
        """The fields that hold a secret (``SecretStr``), a group's as ``group.field``
        (``serve.database_url``)."""
        found = []
        for name, field in cls.model_fields.items():
            if _group(field):
                subs = field.annotation.model_fields.items()  # type: ignore[union-attr]
                found += [f"{name}.{sub}" for sub, f in subs if _secret(f)]
            elif _secret(field):
                found.append(name)
        return found

    def without_secrets(self) -> Settings:
        """A copy with every secret field empty: what a task receives (pickled, on Dask, to
        a worker that may be another machine, through the scheduler). A task that needs a
        secret reads it where it runs (``own_secret``): its environment or a block."""
        update: dict[str, Any] = {}
        for name in self.secret_fields():
            group, _, field = name.partition(".")
            if field:
                current = update.get(group, getattr(self, group))
                update[group] = current.model_copy(update={field: None})
            else:
                update[name] = None
        return self.model_copy(update=update)

    def own_secret(self, name: str) -> SecretStr | None:
        """The secret field ``name`` (``github.token``, ``serve.database_url``): this
        object's, else the one of this process's own environment (a task's settings come
        without secrets: ``without_secrets``)."""
        value = attrgetter(name)(self)
        return value if value is not None else attrgetter(name)(Settings())

    @property
    def location(self) -> LakeLocation:
        """Where the tables are, and how to reach them (what the storage functions take):
        data_dir, with the ``lake`` group's endpoint, region and credentials when it is on
        object storage. Unbound: a run reaches it through its lake session
        (``ingest.context.RunContext.lake``)."""
        if isinstance(self.data_dir, str):
            return LakeLocation(
                root=self.data_dir,
                local_dir=self.local_dir,
                endpoint_url=self.lake.endpoint_url or None,
                region=self.lake.region or None,
                credentials_block=self.lake.credentials_block or None,
            )
        return LakeLocation(root=str(self.data_dir), local_dir=self.data_dir)

    @property
    def local_path(self) -> Path:
        """The local folder: data_dir itself, or local_dir for a lake on object storage."""
        return self.local_dir if isinstance(self.data_dir, str) else self.data_dir

    def with_data_dir(self, data_dir: str | Path | None) -> Settings:
        """A copy with another data_dir (a folder or s3://bucket/prefix), as given to a flow."""
        if not data_dir:
            return self
        return self.model_copy(update={"data_dir": Settings._data_dir(str(data_dir))})

    @property
    def warehouse_path(self) -> Path:
        """The DuckDB database file people open."""
        return self.local_path / "warehouse.duckdb"

    @property
    def downloads(self) -> Downloads:
        """Where the run's downloads go, and whether they are kept."""
        return Downloads(self.s3.download_dir, self.local_path, self.keep_files)

    @property
    def extracting(self) -> Extracting:
        """What the run's extraction reads of these settings."""
        return Extracting(self.extract, self.chunk, self.ocr, self.downloads)

    def download_overlap(self, bucket: str) -> str | None:
        """Why the local download folder may not be used, or None: it must not hold the data
        folder, nor lie inside it except under its ``objects/`` folder (a key could then
        land on the lake's own files, ``warehouse.duckdb``, or a run's staged rows)."""
        if self.downloads.url is not None:
            return None
        data = self.local_path.resolve()
        root = self.downloads.root(bucket).resolve()
        if root == data or data.is_relative_to(root):
            return (
                f"the download folder {root} holds the data folder {data}: objects could "
                "overwrite the lake; choose a folder apart from it"
            )
        if root.is_relative_to(data) and not root.is_relative_to(data / "objects"):
            return (
                f"the download folder {root} is inside the data folder {data} but not under "
                f"its objects/ folder: objects could overwrite the lake; use {data / 'objects'} "
                "or a folder apart from the data folder"
            )
        return None
