"""The commands on the Prefect side: ``alerts``, ``serve`` and ``server``
(start/stop/status of the local server the commands keep). ``cli.main`` registers them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.output import fail
from cli.running import prefect_env
from ingest.settings import Settings

# The demo needs the development tools of a checkout (dev/: the local servers and the sample
# documents), which the package leaves out. The command stays, hidden, to say where it went.
FROM_A_CHECKOUT = "runs from a checkout of the project"


def alerts_command(
    output: Annotated[
        Path | None,
        typer.Option(help="Write the automations here (for prefect automation create -f)."),
    ] = None,
    apply: Annotated[
        bool, typer.Option(help="Create them on the configured server (as ingest serve does).")
    ] = False,
) -> None:
    """The alerts of automations.yaml for the configured Prefect server, with the id of the
    INGEST_ALERT_BLOCK notification block and the INGEST_ALERT_* windows filled in."""
    prefect_env()
    from deployments import alerts

    settings = Settings()
    if not settings.alert.block:
        fail("set INGEST_ALERT_BLOCK to <block type slug>/<name>")
    try:
        if apply:
            typer.echo(f"created: {', '.join(alerts.apply(settings))}")
            return
        text = alerts.as_json(alerts.render(alerts.block_id(settings.alert.block), settings))
    except alerts.AlertConfigError as exc:
        fail(exc)
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n", encoding="utf-8")
        typer.echo(f"wrote {output}; now: prefect automation create --from-file {output}")


def serve_command(
    demo: Annotated[bool, typer.Option(hidden=True)] = False,
    port: Annotated[
        int, typer.Option(min=1, max=65535, help="Port of the local Prefect server and UI.")
    ] = 4200,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="Database of the local Prefect server: "
            "postgresql+asyncpg://user:password@host:5432/database (the password is never "
            "shown; on the command line `ps` shows it: prefer the variable, or a file named "
            "by INGEST_SERVE_DATABASE_URL_FILE) [env INGEST_SERVE_DATABASE_URL, default "
            "SQLite under PREFECT_HOME].",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Address the local Prefect server listens on; beyond loopback (0.0.0.0, "
            "a LAN address) it needs API auth, and TLS in front (docs/security.md)."
        ),
    ] = "127.0.0.1",
    api_auth: Annotated[
        bool,
        typer.Option(
            "--auth/--no-auth",
            help="Check an auth string on every API request of the local server (the "
            "operator's PREFECT_SERVER_API_AUTH_STRING, else one generated and kept in "
            "PREFECT_HOME/ingest-api-auth, mode 0600); --no-auth only on loopback.",
        ),
    ] = True,
) -> None:
    """Serve the deployments of prefect.yaml on this machine: the configured Prefect API
    (else a local server), the work pools, the deployments, a worker per pool. Ctrl-C
    stops all."""
    if demo:  # its local servers are dev tools of a checkout, which the package leaves out
        fail(f"the demo {FROM_A_CHECKOUT}: make serve SERVE_ARGS=--demo (python -m dev.serve_demo)")
    prefect_env()
    from deployments import auth, database, local_api, serve
    from ingest.redact import redact

    # Its server takes over from the one the commands kept: not two servers on one database.
    if (kept := local_api.stop_kept()) is not None:
        typer.echo(f"stopped the local Prefect server the commands kept (pid {kept})")

    try:
        code = serve.run(
            port=port, database_url=database_url, echo=typer.echo, host=host, api_auth=api_auth
        )
    except (database.DatabaseUrlError, auth.ServeAuthError) as exc:
        fail(redact(str(exc)))
    except RuntimeError as exc:
        fail(redact(str(exc)), 1)
    raise typer.Exit(code)


server_app = typer.Typer(
    help="The local Prefect server the commands keep when no Prefect API is configured "
    "(PREFECT_API_URL, a profile's, or a running ingest serve): the first command that needs "
    "it starts it, and it stops once unused for INGEST_SERVE_LOCAL_SERVER_IDLE seconds.",
    no_args_is_help=True,
)


@server_app.command("start")
def server_start_command() -> None:
    """Start the local server now (or find it running) and say where it is."""
    from deployments import local_api

    local_api.prefect_defaults()
    idle = local_api.local_server_idle()
    if idle <= 0:
        fail(
            "INGEST_SERVE_LOCAL_SERVER_IDLE is 0: each command starts and stops a "
            "server of its own; set it to the seconds a kept server may stay unused"
        )
    try:
        api_url, _auth = local_api.kept_api(lambda line: typer.echo(line, err=True), idle)
    except local_api.ServerStartError as exc:
        fail(exc)
    pid = local_api.read_json(local_api.kept_path()).get("pid")
    typer.echo(f"local Prefect server at {api_url} (pid {pid}), kept until unused for {idle:g} s")


@server_app.command("stop")
def server_stop_command() -> None:
    """Stop the local server (the next command that needs one starts it again)."""
    from deployments import local_api

    pid = local_api.stop_kept()
    if pid is None:
        typer.echo("no local Prefect server runs")
    else:
        typer.echo(f"stopped the local Prefect server (pid {pid})")


@server_app.command("status")
def server_status_command() -> None:
    """Whether the local server runs, where, and since when a command last used it."""
    import time

    from deployments import local_api

    advert = local_api.find_kept()
    if advert is None:
        typer.echo("no local Prefect server runs")
        raise typer.Exit(1)
    unused = time.time() - local_api.kept_path().stat().st_mtime
    typer.echo(
        f"local Prefect server at {advert['api_url']} (pid {advert['pid']}), last used "
        f"{unused:.0f} s ago, stops once unused for {advert.get('idle', 0):g} s"
    )
