"""dlt's ``rest_api`` forms beside dlt itself: the rows each stores, on one stand-in API.

    .venv/bin/python -m benchmarks.dlt_forms                # writes the table to stdout

Not a timing: the rows that dlt 1.31 and ``ingest`` store for every form of
``dev.dlt_forms`` (the forms ``tests/ingest/rest/test_dlt_forms.py`` runs), against one
``dev.servers.shapes`` server, whose own count of each listing's records is the third
column. Also two nights of one file with a resource without a ``primary_key`` and one with
a key and no ``write_disposition``. dlt runs in the virtual environment
``benchmarks.bench_dlt`` makes (``--dlt-python`` names another interpreter with dlt),
``pipeline.run(rest_api_source(config, name=...))`` into DuckDB, one process per form;
ingest runs the library (``load_source``, ``fetch_source``, ``commit_run``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_dlt import DLT_VERSION, ROOT, dlt_python
from dev.dlt_forms import DEFAULTS, DEPARTURES, FORMS, NIGHTS, Form

ALL = (*FORMS, *DEPARTURES, NIGHTS)


def nights(form: Form) -> int:
    return 2 if form is NIGHTS else 1


def dlt_worker(url: str, index: int) -> None:
    """In dlt's environment: run one form, print the rows of each table."""
    import dlt
    import yaml
    from dlt.sources.rest_api import rest_api_source

    form = ALL[index]
    config = yaml.safe_load(form.text.replace("BASE", url + "/"))
    name = Path(form.file).stem
    if "sources" in config:  # dlt.yml: its one source, named by its key
        ((name, config),) = config["sources"].items()
        config = {k: v for k, v in config.items() if k != "type"}
    config.pop("name", None)
    folder = tempfile.mkdtemp()
    pipeline = dlt.pipeline(
        pipeline_name="forms",
        destination=dlt.destinations.duckdb(os.path.join(folder, "forms.duckdb")),
        dataset_name="rows",  # not the file's stem: DuckDB would read it as the catalog
        pipelines_dir=folder,
    )
    out: dict[str, Any] = {}
    try:
        for _ in range(nights(form)):
            pipeline.run(rest_api_source(config, name=name))
    except Exception as exc:  # what dlt said, as the table's cell
        out["error"] = str(exc).splitlines()[0][:120]
    with pipeline.sql_client() as sql:
        for listing in form.listings:
            try:
                out[listing] = sql.execute_sql(f"SELECT count(*) FROM rows.{listing}")[0][0]
            except Exception:
                out.setdefault(listing, 0)
    print("RESULT " + json.dumps(out))


def configure(url: str, form: Form) -> None:
    import urllib.request

    body = json.dumps({**DEFAULTS, **form.behaviour}).encode()
    req = urllib.request.Request(
        f"{url}/_dev/config", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(req, timeout=10).read()


def run_dlt(python: str, url: str, index: int) -> dict[str, Any]:
    done = subprocess.run(
        [python, "-m", "benchmarks.dlt_forms", "--worker", url, str(index)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"dlt worker failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def run_ingest(url: str, form: Form) -> tuple[dict[str, int], bool, str]:
    from ingest import storage
    from ingest.rest.config import RestConfig
    from ingest.rest.errors import SourceError
    from ingest.rest.run import fetch_source
    from ingest.rest.source import load_source
    from ingest.settings import Settings

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / form.file
        path.write_text(form.text.replace("BASE", url + "/"), encoding="utf-8")
        try:
            source = load_source(path)
        except SourceError as exc:
            return {}, False, f"refused: {exc}"
        data = Path(folder) / "data"
        complete, why = True, ""
        for night in range(nights(form)):
            config = RestConfig.of(Settings(data_dir=data))
            summary = fetch_source(config, source, run_id=f"n{night}")
            storage.commit_run(data, f"n{night}")
            complete, why = summary.complete, summary.stopped or ""
        counts = {}
        for listing in form.listings:
            _, found = storage.query(data, f"SELECT count(*) FROM {source.name}__{listing}")
            counts[listing] = int(found[0][0])
    return counts, complete, why


def main(argv: list[str] | None = None) -> None:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--dlt-python", help="An interpreter with dlt installed.")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        dlt_worker(args.worker[0], int(args.worker[1]))
        return
    from dev.servers.shapes import DevShapes

    python = dlt_python(args.dlt_python)
    print(f"| form | listing | the server's records | dlt {DLT_VERSION} | ingest | ingest says |")
    print("|---|---|---|---|---|---|")
    with DevShapes() as server:
        for index, form in enumerate(ALL):
            configure(server.url, form)
            totals = server.totals()
            theirs = run_dlt(python, server.url, index)
            configure(server.url, form)
            ours, complete, why = run_ingest(server.url, form)
            said = "complete" if complete else f"incomplete: {why[:90]}"
            for listing in form.listings:
                dlt_cell = str(theirs.get(listing, "")) + (
                    f" ({theirs['error']})" if "error" in theirs else ""
                )
                print(
                    f"| {form.name} | {listing} | {totals[listing]} | {dlt_cell} | "
                    f"{ours.get(listing, '')} | {said} |"
                )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
