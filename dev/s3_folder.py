"""A local S3-compatible server holding a folder of your own files, for trying ``ingest s3``
on them: ``make dev-s3 DIR=path/to/folder [BUCKET=name] [PORT=9010]``, or
``python -m dev.s3_folder DIR [--bucket NAME] [--prefix P] [--port N]``.

It starts the development S3 server (``dev.servers.s3``: moto's S3 on loopback), creates
the bucket, uploads every file under ``DIR`` (key: the prefix, then the path below
``DIR``), prints the endpoint, the bucket and the variables to export, with the
``ingest s3`` command that reads them, and serves until Ctrl-C (or SIGTERM). A port
already in use is refused in one line, before anything is uploaded. The server keeps
everything in memory: it starts empty each time.

The local server accepts any access key and secret, but boto3 and obstore refuse to send
a request without one ("no credentials"), hence the printed ``AWS_*`` values: any value
works, and they never reach AWS.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
from pathlib import Path

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "local",
    "AWS_SECRET_ACCESS_KEY": "local",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Not 9000, 9100 or 9200, the demo's servers' (make serve SERVE_ARGS=--demo): both can run.
DEFAULT_PORT = 9010
DEFAULT_BUCKET = "my-files"


def upload_folder(client: object, folder: Path, bucket: str, prefix: str = "") -> int:
    """Create ``bucket`` and put every file under ``folder`` into it; returns the count."""
    client.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    count = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = prefix + path.relative_to(folder).as_posix()
        client.upload_file(str(path), bucket, key)  # type: ignore[attr-defined]
        count += 1
    return count


def instructions(endpoint: str, bucket: str, prefix: str, count: int) -> str:
    """What to export and run, as the script prints it."""
    exports = " ".join(f"{k}={v}" for k, v in CREDENTIALS.items())
    command = f"ingest s3 --bucket {bucket} --endpoint-url {endpoint}"
    if prefix:
        command += f" --prefix {shlex.quote(prefix)}"
    return "\n".join(
        [
            f"endpoint: {endpoint}",
            f"bucket:   {bucket} ({count} objects{f' under {prefix}' if prefix else ''})",
            "",
            "In another terminal (the local server takes any key and secret; these never",
            "reach AWS):",
            "",
            f"  export {exports}",
            f"  .venv/bin/{command}",
            "",
            "Ctrl-C stops the server (it keeps nothing: it starts empty each time).",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="the files to serve (an empty folder works)")
    p.add_argument("--bucket", default=DEFAULT_BUCKET)
    p.add_argument("--prefix", default="", help="put the keys under this prefix")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    a = p.parse_args(argv)
    if not a.folder.is_dir():
        print(f"error: {a.folder} is not a folder", file=sys.stderr)
        return 2

    import boto3

    from dev.servers.child import PortTakenError
    from dev.servers.s3 import DevServer

    os.environ.update(CREDENTIALS)  # this process's own uploads
    try:
        server = DevServer(port=a.port).__enter__()
    except PortTakenError:
        print(
            f"error: port {a.port} is already in use by another process; choose a free one: "
            f"make dev-s3 DIR=... PORT=<port> (or --port <port>)",
            file=sys.stderr,
        )
        return 2
    except RuntimeError as exc:
        print(f"error: the S3 server did not start on port {a.port}: {exc}", file=sys.stderr)
        return 2
    try:
        client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
        try:
            count = upload_folder(client, a.folder, a.bucket, a.prefix)
        except Exception as exc:  # a bad bucket name, an unreadable file: one line, then stop
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(instructions(server.url, a.bucket, a.prefix, count), flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill stops it as Ctrl-C
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()  # until Ctrl-C
        print("stopped", flush=True)
        return 0
    finally:
        server.__exit__()


if __name__ == "__main__":
    sys.exit(main())
