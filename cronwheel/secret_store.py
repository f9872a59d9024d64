"""The one secret store: secrets sealed at rest with the operator's key, behind pluggable providers.

Every secret cronwheel keeps (webhook signing secrets now; the named secrets HTTP targets put in
their headers next) is stored sealed, and opened only where it is used, at the moment of use.

Keys. The operator gives a key ring: `--secret-key-file PATH` or `$CRONWHEEL_SECRET_KEY` (the same
text inline), one key per line (or per comma), `KEY_ID BASE64` (32 random bytes; `#` starts a
comment). The first key seals; every key opens. `cronwheel secrets new-key` prints a line.

    k2 8Ts1...=          # seals new secrets (and re-seals old ones, see below)
    k1 Qm9v...=          # still opens what k1 sealed

Sealed form: `cwsec1:KEY_ID:BASE64(nonce || AES-256-GCM(secret))`, with the secret's place (for
a webhook, `webhooks.secret:<id>`) as associated data, so a sealed value copied to another row
does not open there. The key id says which key opens it, which is what makes rotation possible:

    1. add the new key after the old one on every node, restart them (all can open both);
    2. put the new key first, restart them: each start re-seals what the first key did not seal
       (`reseal`; `cronwheel secrets rotate` does the same without a node);
    3. once nothing is sealed with the old key (`cronwheel secrets rotate` reports it), remove it.

A process without a key stores new secrets in plaintext (as before issue 48) and opens only
plaintext; a sealed value it cannot open raises `SecretUnavailable`, naming the key id, never the
value. A node refuses to start while the database holds values sealed with a key it lacks.

Providers. `SecretProvider` is where named secrets live (a tenant's `name` -> its value):
`storage/secrets.py` keeps them sealed in PostgreSQL (the first provider); a Vault or cloud secret
manager is another implementation of the same two-method protocol. `SecretStore.resolve` picks
the provider by the reference's scheme (`db:NAME`, or a bare NAME).

Nothing here logs, and no repr shows a key or a secret. Pure (no I/O besides reading the key
file); task-safe: a `KeyRing` is immutable.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from cronwheel.errors import InvalidArgument, NotFound, SecretUnavailable

SEALED_PREFIX = "cwsec1:"
KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ENV = "CRONWHEEL_SECRET_KEY"
KEY_FILE_FLAG = "--secret-key-file"
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The operator's keys, first one sealing. Immutable; its repr names the key ids only."""

    keys: tuple[tuple[str, bytes], ...] = field(repr=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("a key ring holds at least one key")

    def __repr__(self) -> str:
        return f"KeyRing(ids={self.ids!r})"

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.keys)

    @property
    def primary(self) -> str:
        return self.keys[0][0]

    def key(self, key_id: str) -> bytes | None:
        return next((k for i, k in self.keys if i == key_id), None)


def parse_keys(text: str, source: str) -> KeyRing:
    """A key ring from its text; bad text is InvalidArgument naming `source` (the flag or the
    variable) and the line, never the key material."""
    keys: list[tuple[str, bytes]] = []
    entries = [e.split("#", 1)[0].strip() for line in text.splitlines() for e in line.split(",")]
    for n, entry in enumerate((e for e in entries if e), start=1):
        parts = entry.split()
        if len(parts) != 2 or not _KEY_ID.match(parts[0]):
            raise InvalidArgument(source, f"key {n}: expected 'KEY_ID BASE64' (a key id of letters, digits, "
                                          "'_', '.', '-'), as `cronwheel secrets new-key` prints")
        try:
            raw = base64.b64decode(parts[1], validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != KEY_BYTES:
            raise InvalidArgument(source, f"key {n} ({parts[0]}): must be {KEY_BYTES} bytes in base64")
        if any(i == parts[0] for i, _ in keys):
            raise InvalidArgument(source, f"key {n}: key id {parts[0]!r} appears twice")
        keys.append((parts[0], raw))
    if not keys:
        raise InvalidArgument(source, "holds no key")
    return KeyRing(tuple(keys))


def load_keys(key_file: str, env: Mapping[str, str] | None = None) -> KeyRing | None:
    """The key ring of `--secret-key-file` or `$CRONWHEEL_SECRET_KEY` (not both), or None."""
    inline = (os.environ if env is None else env).get(KEY_ENV, "")
    if key_file and inline:
        raise InvalidArgument(KEY_FILE_FLAG, f"give the key in {KEY_FILE_FLAG} or in ${KEY_ENV}, not both")
    if inline:
        return parse_keys(inline, f"${KEY_ENV}")
    if not key_file:
        return None
    try:
        with open(key_file, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise InvalidArgument(KEY_FILE_FLAG, f"cannot read {key_file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidArgument(KEY_FILE_FLAG, f"{key_file} is not text") from None
    return parse_keys(text, KEY_FILE_FLAG)


def new_key_line(key_id: str | None = None) -> str:
    """A fresh key as a key-file line (`KEY_ID BASE64`)."""
    kid = key_id or "k" + secrets.token_hex(4)
    if not _KEY_ID.match(kid):
        raise InvalidArgument("--key-id", "letters, digits, '_', '.', '-' only (1..64)")
    return f"{kid} {base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()}"


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


def key_id_of(value: str) -> str | None:
    """The id of the key that sealed `value` (None: plaintext)."""
    if not is_sealed(value):
        return None
    return value[len(SEALED_PREFIX):].split(":", 1)[0]


@dataclass(frozen=True, slots=True)
class SecretStore:
    """Seals and opens secrets with the operator's key ring (None: no key, plaintext) and resolves
    named secrets through its providers. Immutable, task-safe."""

    ring: KeyRing | None = None
    providers: Mapping[str, SecretProvider] = field(default_factory=dict, repr=False)

    def seal(self, value: str, place: str) -> str:
        """`value` as stored at `place` (sealed; plaintext without a key ring)."""
        if self.ring is None:
            return value
        kid, key = self.ring.keys[0]
        nonce = secrets.token_bytes(NONCE_BYTES)
        box = AESGCM(key).encrypt(nonce, value.encode(), place.encode())
        return f"{SEALED_PREFIX}{kid}:{base64.b64encode(nonce + box).decode()}"

    def open(self, stored: str, place: str) -> str:
        """The secret a stored value holds (plaintext passes through)."""
        kid = key_id_of(stored)
        if kid is None:
            return stored
        key = self.ring.key(kid) if self.ring is not None else None
        if key is None:
            raise SecretUnavailable(f"{place} is sealed with key {kid!r}, which this process does not hold "
                                    f"(give it in {KEY_FILE_FLAG} or ${KEY_ENV})")
        try:
            blob = base64.b64decode(stored[len(SEALED_PREFIX) + len(kid) + 1:], validate=True)
            return AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], place.encode()).decode()
        except (binascii.Error, ValueError, InvalidTag):
            raise SecretUnavailable(f"{place}: the value sealed with key {kid!r} does not open "
                                    "(corrupt, or sealed for another place)") from None

    def needs_reseal(self, stored: str) -> bool:
        """True for a value the first key did not seal (plaintext, or an older key's)."""
        return self.ring is not None and key_id_of(stored) != self.ring.primary

    def missing(self, key_ids: Iterable[str]) -> list[str]:
        """The key ids among `key_ids` this store cannot open, sorted."""
        held = set(self.ring.ids) if self.ring is not None else set()
        return sorted(set(key_ids) - held)

    async def resolve(self, tenant: str | None, ref: str) -> str:
        """A named secret's value: `SCHEME:NAME` through that provider, a bare NAME through `db`."""
        scheme, _, name = ref.partition(":") if ":" in ref else ("db", "", ref)
        provider = self.providers.get(scheme)
        if provider is None:
            raise NotFound("secret provider", scheme)
        return await provider.get(tenant, name)


class SecretProvider(Protocol):
    """Where named secrets live. `get` raises NotFound for an unknown name (a tenant sees its
    own names only; tenant None: the cluster's). Implementations: storage/secrets.py (PostgreSQL,
    sealed by a SecretStore); a Vault or cloud secret manager later."""

    async def get(self, tenant: str | None, name: str) -> str: ...

    async def put(self, tenant: str | None, name: str, value: str) -> None: ...
