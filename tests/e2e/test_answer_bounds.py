"""Issue 48 item 7, answers by bytes, against a real node process (PostgreSQL, etcd, auth file):
ListExecutions over runs with 1 MiB checkpoints returns pages of a few MiB with a token (not
1,000 rows of them), so 10 concurrent listings keep the node's memory bounded, and every row is
still reached by following the tokens."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cronwheel.client import Client
from cronwheel.devtools.harness import ProcessCluster
from cronwheel.limits import ANSWER_ROWS_BYTES

from .api_cluster import TOKENS, api_cluster

pytestmark = [pytest.mark.e2e]

ROWS = 300
CHECKPOINT_CHARS = 1024 * 1024  # each run's checkpoint: {"blob": "xxx..."} of 1 MiB


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ProcessCluster, str]]:
    with api_cluster() as (c, address):
        # 300 runs of tenant acme with 1 MiB checkpoints, inserted in one statement (setup only)
        c.sql("""
            INSERT INTO executions (id, tenant, type, partition, scheduled_for, run_at, state, trigger, checkpoint)
            SELECT cronwheel_uuid7(), 'acme', 'big', g %% 8, now() - g * interval '1 second', now(), 'queued',
                   'submit', jsonb_build_object('blob', repeat('x', %s))
              FROM generate_series(1, %s) g RETURNING 1""", CHECKPOINT_CHARS, ROWS)
        yield c, address


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def _first_pages(address: str, rounds: int, out: list[int], errors: list[BaseException]) -> None:
    """ListExecutions over every run (page_size 1000: all 300 would be 300 MiB), `rounds` times."""
    try:
        with Client(address, token=TOKENS["acme"][0]) as client:
            for _ in range(rounds):
                page = client.executions_page(type="big", page_size=1000)
                assert page.next_page_token
                out.append(len(page.items))
    except BaseException as exc:  # reported by the test's thread
        errors.append(exc)


def test_ten_concurrent_listings_of_1_mib_checkpoints_keep_the_nodes_rss_growth_under_200_mb(
        cluster: tuple[ProcessCluster, str]) -> None:
    """Before the cut by bytes, each call read its 300 rows (300 MiB) into the node and built a
    300 MiB answer (then refused by the client's 4 MiB receive limit)."""
    c, address = cluster
    pid = c.nodes["n1"].pid
    before = _status_kb(pid, "VmRSS")
    sizes: list[int] = []
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_first_pages, args=(address, 5, sizes, errors)) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[0]
    assert len(sizes) == 50 and all(1 <= n <= 3 for n in sizes), sizes
    peak = _status_kb(pid, "VmHWM")
    growth_mb = (peak - before) / 1024
    print(f"node RSS {before} kB before, peak {peak} kB: growth {growth_mb:.0f} MB")
    assert growth_mb < 200, f"node RSS grew {growth_mb:.0f} MB ({before} kB -> peak {peak} kB)"


def test_following_the_tokens_reaches_every_run_once_in_order(cluster: tuple[ProcessCluster, str]) -> None:
    c, address = cluster
    ids: list[str] = []
    token = ""
    with Client(address, token=TOKENS["acme"][0]) as client:
        while True:
            page = client.executions_page(type="big", page_size=1000, page_token=token)
            assert page.items
            ids += [e.id for e in page.items]
            token = page.next_page_token
            if not token:
                break
    expected = [r[0] for r in c.sql("SELECT id::text FROM executions WHERE type = 'big' "
                                     "ORDER BY scheduled_for DESC, id DESC")]
    assert len(expected) == ROWS and ids == expected


def test_a_page_of_1_mib_checkpoints_holds_the_rows_that_fit_in_the_byte_cap_and_a_token(
        cluster: tuple[ProcessCluster, str]) -> None:
    """3 MiB of rows a page: two 1 MiB checkpoints (a third would pass it), whatever page_size."""
    _, address = cluster
    with Client(address, token=TOKENS["acme"][0]) as client:
        page = client.executions_page(type="big", page_size=1000)
    assert len(page.items) == ANSWER_ROWS_BYTES // (CHECKPOINT_CHARS + 64) and page.next_page_token
    assert all(len(e.checkpoint["blob"]) == CHECKPOINT_CHARS for e in page.items)
