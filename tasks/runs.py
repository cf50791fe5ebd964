"""What a flow run does around its tasks: its settings (the worker's, with the run's
parameters, refused where the deployment forbids them: ``ingest.security``), what it
holds open for its block (``opened_run``), and its body run so that SIGTERM stops it.

The flows compose these with the tasks; the library stays below this package.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, ParamSpec, TypeVar, cast

from prefect.futures import PrefectFuture, as_completed

from ingest import context, security
from ingest.extract import provenance
from ingest.records import BatchSummary, ExtractSummary, ObjectBatch
from ingest.report.summary import RunSummary
from ingest.s3.scan import ListSpec
from ingest.s3.schedule import Future, Steps, schedule
from ingest.settings import Settings
from ingest.storage.location import LakeSession
from tasks.extraction import extract_batch, extract_stored
from tasks.progress import track_batch
from tasks.runners import batch_runner, submit
from tasks.s3 import download_batch, fetch_batch, find_changes, list_objects, plan_listing
from tasks.storage import hold_target, run_staging

if TYPE_CHECKING:  # the REST modules are imported by the runs that use them
    from ingest.rest.source import Source

P = ParamSpec("P")
R = TypeVar("R")


def deployment_defaults() -> dict[str, Any] | None:
    """None for a flow called in a process of its own (an ``ingest`` command, a test); for a
    run of a deployment, the default parameters this worker's own checkout declares
    (``ingest.security.project_defaults`` of its ``prefect.yaml``), never the copy the
    Prefect server holds: whoever reaches the API can change that copy, and what
    ``ingest.security`` allows must not move with it."""
    from prefect.context import FlowRunContext
    from prefect.runtime import deployment

    ctx = FlowRunContext.get()
    run = ctx.flow_run if ctx is not None else None
    if run is not None and run.parent_task_run_id is None:
        # A run of its own (no parent's deployment to inherit): its record is at hand;
        # prefect.runtime's deployment.id asks the API for it again (~50 ms a run).
        deployment_id = run.deployment_id
    else:
        deployment_id = deployment.id
    if not deployment_id:
        return None
    from ingest.rest.source import PROJECT_ROOT

    return security.project_defaults(PROJECT_ROOT / "prefect.yaml")


def stops_on_sigterm(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run inside ``ingest.interrupt.on_terminate``: a SIGTERM (Prefect cancelling
    the run from the UI, systemd or Kubernetes stopping the worker) stops the run's threads
    at once, as Ctrl-C does, before Prefect's own handler ends the run. The process is
    made non-dumpable first (``ingest.security.keep_memory_private``)."""
    # Names of this closure: the wrapper below runs with the globals of ``fn``'s module.
    from ingest import interrupt, security

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        # The run's process holds its credentials while its parsers read documents that
        # may be hostile: its memory and environment are kept from them (non-dumpable).
        security.keep_memory_private()
        with interrupt.on_terminate():
            return fn(*args, **kwargs)

    # With the globals of ``fn``'s module (it uses only its closure): Prefect resolves the
    # parameters' annotations in the namespace of the function it is given.
    wrapped = types.FunctionType(
        run.__code__, fn.__globals__, fn.__name__, run.__defaults__, run.__closure__
    )
    return cast(Callable[P, R], functools.update_wrapper(wrapped, fn))


def run_settings(
    data_dir: str | None,
    *,
    endpoint_url: str | None,
    concurrency: int | None,
    list_shards: int | None,
    download_dir: str | None,
    keep_files: bool | None,
    task_runner: str | None,
) -> Settings:
    """The run's settings: the worker's, with the run's parameters that were given (None:
    the worker's own; the S3 ones are the ``s3`` group's fields of the same names) and its
    data folder, refused when the deployment's data folders forbid them
    (``ingest.security``)."""
    worker = Settings()
    s3 = dict(
        endpoint_url=endpoint_url,
        concurrency=concurrency,
        list_shards=list_shards,
        download_dir=download_dir,
    )
    run = dict(keep_files=keep_files, task_runner=task_runner)
    settings = worker.updated(
        s3={k: v for k, v in s3.items() if v is not None},
        **{k: v for k, v in run.items() if v is not None},
    )
    settings = settings.with_data_dir(data_dir)
    security.check_data_dirs(worker, settings, deployment_defaults())
    return settings


class OpenRun(NamedTuple):
    ctx: context.RunContext
    runner: Any  # the batches' task runner (None when not asked for)
    skipped: str | None  # why the run ends at once: another live run holds its target


@contextmanager
def opened_run(
    settings: Settings,
    run_id: str,
    *,
    target: str | None = None,
    threads: int | None = None,
    runner: bool = True,
    lake: LakeSession | None = None,
) -> Iterator[OpenRun]:
    """What the run holds open for its block, closed at its end: its context (lake
    session, S3 connection, listing database: ``ingest.context``, where its tasks find
    it by the run's id; ``lake``: a session handed in, used and left open), with a
    ``target`` its lease on it (one run at a time per bucket and prefix in this lake,
    ``INGEST_S3_SAME_TARGET``), its staging and, with ``runner``, the batches' runner
    (``threads`` of its own on the thread runner)."""
    with ExitStack() as stack:
        ctx = stack.enter_context(context.opened(settings, run_id, lake=lake))
        if target is not None:
            skipped = stack.enter_context(hold_target(ctx.settings, target, run_id))
            if skipped is not None:
                yield OpenRun(ctx, None, skipped)
                return
        stack.enter_context(run_staging(ctx.settings, run_id))
        started = None
        if runner:
            started = stack.enter_context(batch_runner(ctx.settings, threads, run_id=run_id))
        yield OpenRun(ctx, started, None)


def github_run(
    data_dir: str | None, task_runner: str, repos: list[str], **knobs: Any
) -> tuple[Settings, Source]:
    """The settings and declared source of a ``github-pulls`` run: the worker's settings
    with the run's data folder and task runner, its API root and folders refused where
    the deployment forbids them, and the source built from its parameters (``knobs``:
    state, per_page, concurrency, base_url, token_block, rate_limit_reserve, max_wait)."""
    from ingest.rest.github import github_source

    worker = Settings()
    settings = worker.with_data_dir(data_dir)
    settings = settings.model_copy(update={"task_runner": task_runner})
    base_url = knobs.get("base_url")
    security.check_github_run(
        worker,
        settings.updated(github={"base_url": base_url or worker.github.base_url}),
        deployment_defaults(),
    )
    return settings, github_source(settings.github, repos, **knobs)


def rest_run(
    source: str,
    *,
    base_url: str | None,
    concurrency: int | None,
    data_dir: str | None,
    task_runner: str,
) -> tuple[Settings, Source]:
    """The settings and declared source of a ``rest-ingest`` run: the source file loaded
    (a clear error, with the line, before anything runs) from where the deployment allows,
    its API root and credentials' variables refused where it forbids them, and its
    concurrency the run's when given."""
    from ingest.rest.source import PROJECT_ROOT, load_source, source_path

    worker = Settings()
    settings = worker.with_data_dir(data_dir)
    settings = settings.model_copy(update={"task_runner": task_runner})
    path = source_path(source)
    deployed = deployment_defaults()
    security.check_source_file(worker, deployed, path, PROJECT_ROOT / "sources")
    declared = load_source(path)
    auth = declared.client.auth
    security.check_rest_run(
        worker,
        settings,
        deployed,
        file_base_url=declared.client.base_url,
        base_url=base_url,
        env_names=[auth.env if auth else None],
    )
    if concurrency:
        client = declared.client.model_copy(update={"concurrency": concurrency})
        declared = declared.model_copy(update={"client": client})
    return settings, declared


def nightly_settings(data_dir: str | None, github_base_url: str | None) -> Settings:
    """The settings of a ``nightly`` run, checked before it writes anything (its
    children check theirs again)."""
    worker = Settings()
    settings = worker.with_data_dir(data_dir)
    asked = settings.updated(github={"base_url": github_base_url or ""})
    security.check_github_run(worker, asked, deployment_defaults())
    return settings


def list_spec(
    settings: Settings,
    run_id: str,
    bucket: str,
    prefix: str,
    *,
    include: list[str] | None,
    exclude: list[str] | None,
    full_refresh: bool,
    extract: bool,
    reextract_kinds: list[str] | None,
    reextract_since: str | None,
    inventory: str | None,
    inventory_listing: bool,
) -> ListSpec:
    """What the run lists and compares; a ValueError, before anything is written, for an
    inventory listing without its report or a download folder over the lake's files."""
    if inventory_listing and not inventory:
        raise ValueError("listing='inventory' needs inventory: the s3://... of the report")
    overlap = settings.download_overlap(bucket)
    if overlap:  # keys must never land on the lake's files
        raise ValueError(overlap)
    return ListSpec(
        run_id=run_id,
        bucket=bucket,
        prefix=prefix,
        include=list(settings.s3.include if include is None else include),
        exclude=list(settings.s3.exclude if exclude is None else exclude),
        full_refresh=full_refresh,
        extract_version=provenance.versions(settings.extracting) if extract else None,
        reextract_kinds=tuple(reextract_kinds or ()),
        reextract_since=reextract_since,
        inventory=inventory,
    )


def run_batches(
    ctx: context.RunContext,
    spec: ListSpec,
    runner: Any,
    *,
    extract: bool,
    summary: RunSummary,
    ahead: int | None,
) -> RunSummary:
    """The listing planned, listed and compared chunk by chunk, and the changed objects'
    batches run as they come (``ingest.s3.schedule``: at most ``ahead`` handed out and
    not yet folded into ``summary``; None: as the runner takes them).

    The run's tasks as ``schedule`` submits them: the listing and comparison on the
    flow's threads, the batches on ``runner``. A batch is one ``fetch-batch`` (download
    and extraction together) when it may run on another machine or its files do not stay
    in a local folder a later task could read, else ``download-batch`` then
    ``extract-batch``."""
    settings = ctx.settings
    whole = settings.task_runner == "dask" or not settings.downloads.stay_local
    # The extraction tasks' parameters but their objects; a download batch's future is
    # resolved to its result by Prefect when the task starts.
    extracting = functools.partial(
        submit, runner, settings=settings, bucket=spec.bucket, run_id=spec.run_id
    )

    def fetch(batch: ObjectBatch) -> PrefectFuture[BatchSummary]:
        task = fetch_batch if whole else download_batch
        return submit(runner, task, settings=settings, spec=spec, batch=batch, extract=extract)

    def extract_fetched(downloaded: Future[BatchSummary]) -> PrefectFuture[ExtractSummary]:
        return extracting(extract_batch, downloaded=downloaded)

    def stored(batch: ObjectBatch) -> PrefectFuture[ExtractSummary]:
        return extracting(extract_stored, objects=batch, prefix=spec.prefix)

    steps = Steps(
        list_chunk=lambda shard, cursor: list_objects.submit(settings, spec, shard, cursor),
        compare=lambda listed: find_changes.submit(settings, spec, listed),
        fetch=fetch,
        first_done=lambda futures: next(as_completed(cast(list[PrefectFuture[Any]], futures))),
        extract_fetched=extract_fetched if extract and not whole else None,
        extract_stored=stored,
        on_batch=lambda part, handed_out: track_batch(ctx, part, batches=handed_out),
    )
    return schedule(plan_listing(settings, spec), steps, summary, ahead=ahead)
