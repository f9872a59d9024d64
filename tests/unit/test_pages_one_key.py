"""One-key pages (tenants, tokens, webhooks): the next token carries the last id of the page and
decodes back to it; a bad cursor names page_token."""

from __future__ import annotations

import uuid

import pytest

from cronwheel.cluster.api import pages
from cronwheel.errors import InvalidArgument


def test_a_full_page_hands_back_the_last_id_and_a_short_page_no_token() -> None:
    ids = [uuid.uuid4() for _ in range(3)]
    rows = [{"id": i} for i in ids]
    page, token = pages.one_key_page(rows, 2, "tokens", {"tenant": None})
    assert page == rows[:2] and token
    assert pages.one_cursor(pages.decode(token, "tokens", {"tenant": None}), uuid.UUID) == ids[1]
    assert pages.one_key_page(rows, 3, "tokens", {}) == (rows, "")
    assert pages.one_cursor(None, str) is None


@pytest.mark.parametrize("cursor", [[], [1], ["a", "b"], ["not-a-uuid"]])
def test_a_malformed_cursor_names_page_token(cursor: list[object]) -> None:
    with pytest.raises(InvalidArgument) as err:
        pages.one_cursor(cursor, uuid.UUID)
    assert err.value.field == "page_token"
