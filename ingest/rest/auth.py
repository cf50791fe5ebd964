"""Credentials of a declared source: resolved at run time, never written anywhere.

A source file names where a credential lives (``ingest.rest.spec.SecretRef``):
a Prefect ``Secret`` block or an environment variable. ``resolve`` reads it
(the block through a loader the caller injects, so this module needs no
Prefect), registers the value with ``ingest.redact`` so it is masked in every
log, error and table, and ``credentials`` turns it into the headers or query
parameters of the HTTP client.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from ingest.redact import register_secret
from ingest.rest.errors import AuthError
from ingest.rest.spec import (
    ApiKeyAuth,
    BasicAuth,
    BearerAuth,
    OAuth2ClientCredentials,
    SecretRef,
)

SecretLoader = Callable[[str], str]


@dataclass(slots=True)
class Credentials:
    headers: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    hint: str = "check the credentials"


def resolve(ref: SecretRef, load_block: SecretLoader | None) -> str:
    """The credential's value: from the Secret block when named, else the variable."""
    if ref.secret:
        if load_block is None:
            raise AuthError(f"the Secret block {ref.secret!r} cannot be read outside Prefect")
        value = load_block(ref.secret)
        where = f"Prefect Secret block {ref.secret!r}"
    else:
        assert ref.env is not None
        value = os.environ.get(ref.env, "")
        where = f"environment variable {ref.env}"
    if not value:
        raise AuthError(f"no credential: the {where} is empty or missing")
    register_secret(value)
    return value


def client_credentials_token(auth: OAuth2ClientCredentials, secret: str) -> str:
    """The access token an OAuth 2 token endpoint answers for the client's credentials
    (RFC 6749, 4.4). Errors name the endpoint and the status, never a credential."""
    form = {
        "grant_type": "client_credentials",
        "client_id": auth.client_id,
        "client_secret": secret,
        **auth.access_token_request_data,
    }
    try:
        response = httpx.post(auth.access_token_url, data=form, timeout=30.0)
    except httpx.HTTPError as exc:
        raise AuthError(f"{auth.access_token_url}: the token request failed: {exc}") from None
    if response.status_code != 200:
        raise AuthError(
            f"{auth.access_token_url}: the token request answered {response.status_code}: "
            "the client credentials were rejected"
        )
    try:
        token = response.json()["access_token"]
    except (ValueError, KeyError, TypeError):
        raise AuthError(f"{auth.access_token_url}: the answer holds no access_token") from None
    if not isinstance(token, str) or not token:
        raise AuthError(f"{auth.access_token_url}: the answer holds no access_token")
    register_secret(token)
    return token


def credentials(
    auth: BearerAuth | ApiKeyAuth | BasicAuth | OAuth2ClientCredentials | None,
    load_block: SecretLoader | None = None,
) -> Credentials:
    """Headers or query parameters that carry the source's credential."""
    if auth is None:
        return Credentials()
    where = f"the Secret block {auth.secret!r}" if auth.secret else f"the variable {auth.env}"
    hint = f"check {where}"
    value = resolve(auth, load_block)
    if isinstance(auth, BearerAuth):
        return Credentials(headers={"Authorization": f"Bearer {value}"}, hint=hint)
    if isinstance(auth, OAuth2ClientCredentials):
        token = client_credentials_token(auth, value)
        return Credentials(headers={"Authorization": f"Bearer {token}"}, hint=hint)
    if isinstance(auth, BasicAuth):
        pair = base64.b64encode(f"{auth.username}:{value}".encode()).decode()
        register_secret(pair)
        return Credentials(headers={"Authorization": f"Basic {pair}"}, hint=hint)
    if auth.location == "query":
        return Credentials(params={auth.name: value}, hint=hint)
    return Credentials(headers={auth.name: value}, hint=hint)
