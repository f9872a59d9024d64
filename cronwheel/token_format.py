"""The bearer token's format, written once: a secret is "cw_" and 32 random bytes as URL-safe
base64; what is kept of it (an auth file's entry, the tokens table) is its SHA-256 in hex. The
node makes API tokens (TenantService.CreateToken) and checks every token by it (cluster/api/auth.py);
the CLI makes the bootstrap token of an auth file with it (`cronwheel token new --offline`), without
a node. A shared leaf."""

from __future__ import annotations

import hashlib
import secrets

PREFIX = "cw_"


def new_secret() -> str:
    """A new token's secret: shown once, never stored."""
    return PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What is stored of a token, and what a presented one is looked up by."""
    return hashlib.sha256(token.encode()).hexdigest()
