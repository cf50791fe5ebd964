"""Credentials from a Prefect ``AwsCredentials`` block, the one way the project turns a
block into AWS credentials: prefect-aws's own ``get_boto3_session`` (keys, session
token, profile, region, and an assumed role when the block names one), so whatever the
block can express reaches boto3 and obstore alike."""

from __future__ import annotations

from typing import Any

from ingest.errors import CredentialsError


def block_session(name: str, *, used_for: str) -> Any:
    """The boto3 session of the AwsCredentials block ``name``; ``used_for`` says where the
    name came from (the setting), for the error when the block cannot be loaded."""
    from prefect_aws import AwsCredentials

    try:
        block = AwsCredentials.load(name)
    except ValueError as exc:
        raise CredentialsError(
            f"the credentials block {name!r} ({used_for}) cannot be loaded: {exc}"
        ) from None
    # load() is typed "block or coroutine" (Prefect dispatches on the calling context);
    # called from synchronous code, it is the block.
    if not isinstance(block, AwsCredentials):
        raise TypeError(f"AwsCredentials.load returned {type(block).__name__}")
    return block.get_boto3_session()
