"""The secret store's database provider (storage/secrets.py) against a real PostgreSQL: named
secrets are stored sealed, open for their own tenant and name only, resolve through the
SecretStore, and rotate with the same rule as webhook secrets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest

from cronwheel.errors import NotFound, SecretUnavailable
from cronwheel.secret_store import SecretProvider, SecretStore, key_id_of, new_key_line, parse_keys
from cronwheel.storage import PgStore, StoreConfig

pytestmark = pytest.mark.integration

K1, K2 = new_key_line("k1"), new_key_line("k2")
VALUE = "Bearer sk-live-known-value-0001"


def keys(*lines: str) -> SecretStore:
    return SecretStore(parse_keys("\n".join(lines), "--secret-key-file"))


@asynccontextmanager
async def opened(dsn: str, secrets: SecretStore) -> AsyncIterator[PgStore]:
    async with PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=2, secrets=secrets)) as s:
        yield s


def stored(dsn: str) -> dict[tuple[str, str], str]:
    with psycopg.connect(dsn) as c:
        return {(t, n): v for t, n, v in c.execute("SELECT tenant, name, value FROM secrets").fetchall()}


async def test_a_named_secret_is_stored_sealed_and_read_back_by_its_tenant_only(dsn: str) -> None:
    async with opened(dsn, keys(K1)) as store:
        provider: SecretProvider = store.secrets
        await provider.put("acme", "api-key", VALUE)
        await provider.put(None, "api-key", "the cluster's own")
        at_rest = stored(dsn)
        assert key_id_of(at_rest[("acme", "api-key")]) == "k1" and VALUE not in str(at_rest)
        assert await provider.get("acme", "api-key") == VALUE
        assert await provider.get(None, "api-key") == "the cluster's own"
        with pytest.raises(NotFound):
            await provider.get("globex", "api-key")
        resolver = SecretStore(store.secrets.secrets.ring, providers={"db": store.secrets})
        assert await resolver.resolve("acme", "api-key") == VALUE
        assert await resolver.resolve("acme", "db:api-key") == VALUE
        await provider.put("acme", "api-key", "replaced")
        assert await provider.get("acme", "api-key") == "replaced"
        assert await store.secrets.delete("acme", "api-key") and not await store.secrets.delete("acme", "api-key")
    with psycopg.connect(dsn, autocommit=True) as c:  # a value copied to another tenant's row does not open there
        c.execute("INSERT INTO secrets SELECT 'globex', name, value, created_at, updated_at FROM secrets "
                  "WHERE tenant = ''")
    async with opened(dsn, keys(K1)) as store:
        with pytest.raises(SecretUnavailable, match="does not open"):
            await store.secrets.get("globex", "api-key")


async def test_named_secrets_rotate_and_a_store_without_their_key_is_refused(dsn: str) -> None:
    async with opened(dsn, SecretStore()) as plain:
        await plain.secrets.put("acme", "token", VALUE)  # a cluster without a key: plaintext
    async with opened(dsn, keys(K1)) as first:
        assert (await first.seal_at_rest())["named secrets"].resealed == 1
    async with opened(dsn, keys(K2, K1)) as rotating:
        assert (await rotating.seal_at_rest())["named secrets"].resealed == 1
    assert key_id_of(stored(dsn)[("acme", "token")]) == "k2"
    async with opened(dsn, keys(K1)) as stale:
        with pytest.raises(SecretUnavailable, match="1 named secret.s. are encrypted with key k2"):
            await stale.seal_at_rest()
    async with opened(dsn, keys(K2)) as new:
        assert await new.secrets.get("acme", "token") == VALUE
