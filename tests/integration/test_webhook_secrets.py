"""Webhook secrets at rest (issue 48, item 4) against a real PostgreSQL: sealed on create, opened
only by a claimed delivery, the plaintext of older databases sealed by the first keyed store
(once, also with several starting at once), re-sealed under a rotated key, and refused by a
store that lacks a key in use."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import psycopg
import pytest

from cronwheel.errors import SecretUnavailable
from cronwheel.secret_store import SecretStore, key_id_of, new_key_line, parse_keys
from cronwheel.storage import PgStore, StoreConfig
from cronwheel.storage.api import Event
from cronwheel.storage.webhooks import NewWebhook

pytestmark = pytest.mark.integration

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)
K1, K2 = new_key_line("k1"), new_key_line("k2")


def keys(*lines: str) -> SecretStore:
    return SecretStore(parse_keys("\n".join(lines), "--secret-key-file"))


@asynccontextmanager
async def opened(dsn: str, secrets: SecretStore) -> AsyncIterator[PgStore]:
    async with PgStore(StoreConfig(dsn=dsn, min_connections=1, max_connections=2, secrets=secrets)) as s:
        yield s


async def create(store: PgStore, secret: str) -> uuid.UUID:
    row = await store.webhooks.create(NewWebhook(
        id=uuid.uuid4(), tenant="acme", url="http://127.0.0.1:9/", secret=secret, kinds=("dead_letter",),
        schedule_id=None, description="", actor="test", now=NOW, cap=100))
    return row["id"]  # type: ignore[no-any-return]


def stored(dsn: str) -> dict[uuid.UUID, str]:
    with psycopg.connect(dsn) as c:
        return dict(c.execute("SELECT id, secret FROM webhooks").fetchall())  # type: ignore[arg-type]


async def test_a_secret_is_stored_as_ciphertext_and_a_claimed_delivery_signs_with_the_plaintext(dsn: str) -> None:
    async with opened(dsn, keys(K1)) as store:
        wid = await create(store, "whsec_known-secret-0001")
        assert key_id_of(stored(dsn)[wid]) == "k1" and "known-secret" not in stored(dsn)[wid]
        await store.events.insert(Event("dead_letter", tenant="acme", alert=True))
        await store.webhooks.fan_out(10)  # the event is the outbox: its deliveries are made apart
        (claimed,) = await store.webhooks.claim("n1", datetime.now(UTC), 60.0, 10)
        assert claimed.secret == "whsec_known-secret-0001" and "known-secret" not in repr(claimed)


async def test_the_first_keyed_start_seals_plaintext_secrets_once_even_with_several_at_once(dsn: str) -> None:
    async with opened(dsn, SecretStore()) as before:  # a database of before issue 48: plaintext
        ids = [await create(before, f"whsec_plain-secret-{i:04d}") for i in range(7)]
    assert all(v.startswith("whsec_plain-secret-") for v in stored(dsn).values())
    ring = keys(K1)
    async with opened(dsn, ring) as a, opened(dsn, ring) as b, opened(dsn, ring) as c:
        reports = await asyncio.gather(*(s.webhooks.seal_at_rest(batch=3) for s in (a, b, c)))
    assert sum(r.resealed for r in reports) == 7  # each secret sealed by exactly one of them
    after = stored(dsn)
    assert {key_id_of(v) for v in after.values()} == {"k1"}
    for i, wid in enumerate(ids):
        assert ring.open(after[wid], f"webhooks.secret:{wid}") == f"whsec_plain-secret-{i:04d}"
    async with opened(dsn, ring) as again:
        report = await again.webhooks.seal_at_rest()
    assert (report.resealed, report.by_key) == (0, {"k1": 7}) and stored(dsn) == after  # idempotent


async def test_rotation_reseals_under_the_first_key_after_which_the_old_key_can_go(dsn: str) -> None:
    async with opened(dsn, keys(K1)) as old:
        wid = await create(old, "whsec_rotated-secret-01")
    async with opened(dsn, keys(K2, K1)) as rotating:
        assert (await rotating.webhooks.seal_at_rest()).resealed == 1
    assert key_id_of(stored(dsn)[wid]) == "k2"
    async with opened(dsn, keys(K2)) as new:
        assert (await new.webhooks.seal_at_rest()).resealed == 0
        await new.events.insert(Event("dead_letter", tenant="acme", alert=True))
        await new.webhooks.fan_out(10)
        (claimed,) = await new.webhooks.claim("n1", datetime.now(UTC), 60.0, 10)
        assert claimed.secret == "whsec_rotated-secret-01"


@pytest.mark.parametrize("lacking", [SecretStore(), keys(K1)], ids=["no-key", "old-key-only"])
async def test_a_store_without_a_key_in_use_is_refused_naming_the_key_never_the_secret(
        dsn: str, lacking: SecretStore) -> None:
    async with opened(dsn, keys(K2)) as keyed:
        await create(keyed, "whsec_needs-key-k2-000")
        await create(keyed, "whsec_needs-key-k2-001")
    before = stored(dsn)
    async with opened(dsn, lacking) as store:
        with pytest.raises(SecretUnavailable) as ei:
            await store.webhooks.seal_at_rest()
    line = ei.value.message
    assert "2 webhook secret(s) are encrypted with key k2" in line and "--secret-key-file" in line
    assert "needs-key" not in line and "\n" not in line and stored(dsn) == before
