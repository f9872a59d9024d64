"""The secret store (cronwheel/secret_store.py): the key ring's text, sealing bound to a place,
rotation by key id, and refusals that name the flag and never the key or the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronwheel.errors import InvalidArgument, NotFound, SecretUnavailable
from cronwheel.secret_store import (
    KEY_ENV,
    SecretStore,
    is_sealed,
    key_id_of,
    load_keys,
    new_key_line,
    parse_keys,
)

SECRET = "whsec_known-secret-0123456789"
K1, K2 = new_key_line("k1"), new_key_line("k2")


def ring(*lines: str) -> SecretStore:
    return SecretStore(parse_keys("\n".join(lines), "--secret-key-file"))


def test_a_sealed_secret_is_ciphertext_that_opens_at_its_own_place_only() -> None:
    store = ring(K1)
    sealed = store.seal(SECRET, "webhooks.secret:a")
    assert is_sealed(sealed) and key_id_of(sealed) == "k1" and SECRET not in sealed
    assert store.seal(SECRET, "webhooks.secret:a") != sealed  # a fresh nonce each time
    assert store.open(sealed, "webhooks.secret:a") == SECRET
    with pytest.raises(SecretUnavailable, match="does not open") as ei:
        store.open(sealed, "webhooks.secret:b")  # copied to another row
    assert SECRET not in str(ei.value)


def test_without_a_key_secrets_stay_plaintext_and_a_sealed_one_names_its_key_not_its_value() -> None:
    none = SecretStore()
    assert none.seal(SECRET, "p") == SECRET and none.open(SECRET, "p") == SECRET
    sealed = ring(K1).seal(SECRET, "p")
    with pytest.raises(SecretUnavailable, match="key 'k1'") as ei:
        none.open(sealed, "p")
    assert SECRET not in str(ei.value) and K1.split()[1] not in str(ei.value)


def test_rotation_the_first_key_seals_every_key_opens_and_older_values_need_resealing() -> None:
    old = ring(K1).seal(SECRET, "p")
    rotated = ring(K2, K1)
    assert rotated.open(old, "p") == SECRET
    assert rotated.needs_reseal(old) and rotated.needs_reseal(SECRET)  # an older key's, and plaintext
    new = rotated.seal(rotated.open(old, "p"), "p")
    assert key_id_of(new) == "k2" and not rotated.needs_reseal(new)
    assert ring(K2).open(new, "p") == SECRET  # the old key can go
    assert ring(K2).missing(["k1", "k2"]) == ["k1"] and rotated.missing(["k1", "k2"]) == []
    assert not SecretStore().needs_reseal(SECRET)  # no key: nothing to seal with


def test_key_ring_text_comments_commas_and_the_repr_shows_ids_only() -> None:
    keys = parse_keys(f"# rotated 2026-12\n{K2}   # new\n\n{K1}\n", "--secret-key-file")
    assert keys.ids == ("k2", "k1") and keys.primary == "k2"
    assert parse_keys(f"{K2},{K1}", f"${KEY_ENV}").ids == ("k2", "k1")
    assert K1.split()[1] not in repr(keys) and "k1" in repr(keys)
    assert K1.split()[1] not in repr(SecretStore(keys))


@pytest.mark.parametrize(("text", "says"), [
    ("", "holds no key"),
    ("k1", "expected 'KEY_ID BASE64'"),
    ("k/1 AAAA", "expected 'KEY_ID BASE64'"),
    ("k1 not-base64!", "key 1 (k1): must be 32 bytes in base64"),
    ("k1 AAAA", "key 1 (k1): must be 32 bytes in base64"),
    (f"{K1}\n{K1}", "key 2: key id 'k1' appears twice"),
])
def test_a_bad_key_ring_is_refused_naming_the_flag_and_the_key(text: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as ei:
        parse_keys(text, "--secret-key-file")
    assert ei.value.field == "--secret-key-file" and says in ei.value.message


def test_load_keys_from_the_file_or_the_variable_never_both(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text(K1 + "\n")
    file_ring = load_keys(str(path), env={})
    assert file_ring is not None and file_ring.ids == ("k1",)
    env_ring = load_keys("", env={KEY_ENV: K2})
    assert env_ring is not None and env_ring.ids == ("k2",)
    assert load_keys("", env={}) is None
    with pytest.raises(InvalidArgument, match="not both"):
        load_keys(str(path), env={KEY_ENV: K2})
    with pytest.raises(InvalidArgument, match=r"--secret-key-file: cannot read .*missing"):
        load_keys(str(tmp_path / "missing"), env={})


async def test_resolve_picks_the_provider_by_scheme() -> None:
    class Named:
        def __init__(self) -> None:
            self.values: dict[tuple[str | None, str], str] = {}

        async def get(self, tenant: str | None, name: str) -> str:
            try:
                return self.values[(tenant, name)]
            except KeyError:
                raise NotFound("secret", name) from None

        async def put(self, tenant: str | None, name: str, value: str) -> None:
            self.values[(tenant, name)] = value

    db, vault = Named(), Named()
    await db.put("acme", "api-key", "from-db")
    await vault.put("acme", "api-key", "from-vault")
    store = SecretStore(providers={"db": db, "vault": vault})
    assert await store.resolve("acme", "api-key") == "from-db"
    assert await store.resolve("acme", "vault:api-key") == "from-vault"
    with pytest.raises(NotFound):
        await store.resolve("other", "api-key")
    with pytest.raises(NotFound, match="secret provider aws"):
        await store.resolve("acme", "aws:api-key")


def test_the_cli_makes_a_key_line_and_rotate_without_a_key_names_the_flag(capsys: pytest.CaptureFixture[str],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from cronwheel import cli

    assert cli.main(["secrets", "new-key", "--key-id", "k9"]) == 0
    line = capsys.readouterr().out.strip()
    assert parse_keys(line, "--secret-key-file").ids == ("k9",)
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert cli.main(["secrets", "rotate", "--dsn", "postgresql://nobody@127.0.0.1:1/x"]) == 2
    assert "--secret-key-file: a key ring is required" in capsys.readouterr().err
