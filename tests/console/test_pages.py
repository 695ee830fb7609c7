"""The console's read-only pages in a real browser, against a real server with real data:
what a person reads there (counts, lag, a message body, a transaction id) must be what the
server holds."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.request

import pytest

from fmq.client import Client, Producer
from fmq.client.tx_producer import TransactionProducer
from fmq.datadir import LOG_DIR
from fmq.message import Message
from fmq.protocol import Op
from fmq.tx.state import TxState
from tests.server.harness import ServerProcess, free_port, run_cli

from .browser import chromium, watched

SENT = 5
COMMITTED = 2
#: The console samples the node's figures this often here (5 s by default).
SAMPLE = {"server": {"console_sample_ms": 500}}


def _undecided(tx) -> TxState:
    return TxState.UNKNOWN  # the transaction stays open for the page to show


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """A server with the console, a topic of SENT messages in queue 0, a group that
    committed COMMITTED of them and one open transaction."""
    root = tmp_path_factory.mktemp("console")
    port = free_port()
    srv = ServerProcess(str(root / "data"), SAMPLE, extra_args=("--console-port", str(port)))
    srv.start()
    try:
        with Producer(srv.address) as p:
            for i in range(SENT):
                body = json.dumps({"order": i, "item": "tea"}).encode()
                p.send_message(Message("orders", body, key=f"k-{i}", tags="new", queue_id=0))
            p.send_message(Message("raw", bytes([0, 1, 2, 255]), key="bin", queue_id=0))
        with Client(srv.address) as c:
            c.call(Op.COMMIT_OFFSET, {"group": "billing", "topic": "orders", "queue_id": 0,
                                      "next_offset": COMMITTED})
        with TransactionProducer(srv.address, "payments", _undecided) as tp:
            tx_id = tp.prepare([Message("orders-tx", b"pending", key="t-1")])
        yield {"server": srv, "url": f"http://127.0.0.1:{port}", "tx_id": tx_id,
               "shots": str(root / "screenshots")}
    finally:
        srv.kill()


@pytest.fixture(scope="module")
def browser(console):
    with chromium(console["shots"]) as b:
        yield b


def test_topics_page_lists_every_topic_with_its_message_count(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/topics")
    page.shot("topics")
    row = page.page.locator('tr[data-topic="orders"]')
    assert row.locator("td.messages").inner_text() == str(SENT)
    assert page.page.locator('tr[data-topic="raw"] td.messages').inner_text() == "1"


def test_topic_page_shows_queue_ranges_and_the_groups_lag(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/topics/orders")
    page.shot("topic")
    first_queue = page.page.locator("#queues tbody tr").first.locator("td")
    assert [first_queue.nth(i).inner_text() for i in range(4)] == ["0", "0", str(SENT),
                                                                    str(SENT)]
    assert page.text("#topic-groups td.lag") == str(SENT - COMMITTED)


def test_unknown_topic_is_a_404_page_saying_so(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/topics/nope", expect_status=404)
    assert "nope" in page.text("#error")


def test_groups_pages_show_committed_offsets_and_lag(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/groups")
    page.shot("groups")
    assert page.page.locator('tr[data-group="billing"] td.lag').inner_text() == \
        str(SENT - COMMITTED)
    page.page.click('a[href="/groups/billing"]')
    page.page.wait_for_url("**/groups/billing")
    page.shot("group")
    cells = page.page.locator("#offsets tbody tr").first.locator("td")
    assert cells.nth(3).inner_text() == str(COMMITTED)
    assert cells.nth(5).inner_text() == str(SENT - COMMITTED)
    assert not page.errors, page.errors


def test_message_by_key_shows_its_body_as_pretty_json(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/messages?topic=orders&key=k-3")
    page.shot("messages")
    assert page.text("#found") == "1 message"
    assert page.text("td.key") == "k-3"
    assert json.loads(page.text("pre.body")) == {"order": 3, "item": "tea"}
    assert '\n  "item"' in page.text("pre.body")  # indented, not the stored one line
    segments = sorted(os.listdir(os.path.join(console["server"].data_dir, LOG_DIR)))
    assert page.text("td.segment") in segments  # the file holding it, as on disk


def test_messages_of_a_queue_from_an_offset_and_a_binary_body_in_hex(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/messages?topic=orders&queue=0&offset=3")
    assert page.text("#found") == f"{SENT - 3} messages"
    page.open(console["url"] + "/messages?topic=raw&key=bin")
    assert page.text("pre.body") == "00 01 02 ff"


def test_message_search_form_round_trip(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/messages")
    page.page.fill('input[name="topic"]', "orders")
    page.page.fill('input[name="key"]', "k-0")
    page.page.click('button[type="submit"]')
    page.page.wait_for_url(re.compile(r".*key=k-0.*"))
    assert json.loads(page.text("pre.body"))["order"] == 0
    assert not page.errors, page.errors


def test_messages_with_a_bad_offset_say_what_is_wrong(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/messages?topic=orders&queue=0&offset=x", expect_status=400)
    assert "offset must be a whole number" in page.text("#error")


def test_transactions_page_shows_the_open_transaction_by_full_id(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/transactions")
    page.shot("transactions")
    row = page.page.locator("#transactions tbody tr").first.locator("td")
    assert row.nth(0).inner_text() == console["tx_id"]
    assert row.nth(1).inner_text() == "payments"
    assert row.nth(5).inner_text() == "1"


def test_resolving_a_transaction_asks_first_and_refuses_a_forged_post(console, browser):
    with TransactionProducer(console["server"].address, "refunds", _undecided) as tp:
        tx_id = tp.prepare([Message("refunds", f"refund {i}".encode(), queue_id=0)
                            for i in range(2)])
    page = watched(browser, console["shots"])
    forged = page.page.request.post(console["url"] + "/transactions/resolve",
                                    form={"group": "refunds", "tx": tx_id,
                                          "decision": "commit", "csrf": "forged"})
    assert forged.status == 403 and "CSRF" in forged.text()
    page.open(console["url"] + "/transactions")
    assert tx_id in page.text("#transactions")  # the forged POST changed nothing
    page.page.locator("#transactions tr", has_text=tx_id).locator("a.resolve").click()
    page.page.wait_for_url("**/transactions/resolve?*")
    assert tx_id in page.page.content()
    page.shot("resolve")
    page.page.click('button[value="commit"]')
    page.page.wait_for_url("**/transactions/resolve")
    assert page.text("#state") == "commit"
    page.open(console["url"] + "/transactions")
    assert tx_id not in page.text("#transactions")
    page.open(console["url"] + "/messages?topic=refunds&queue=0&offset=0")
    assert page.text("#found") == "2 messages"  # committed: now readable


def test_overview_shows_the_build_path_and_open_transactions(console, browser):
    from fmq import native
    page = watched(browser, console["shots"])
    deadline = time.monotonic() + 30
    while True:  # the figures are sampled: the open transaction shows from the next sample
        page.open(console["url"] + "/")
        if page.text("#open-transactions").startswith("1") or time.monotonic() > deadline:
            break
        page.page.wait_for_timeout(250)
    page.shot("overview")
    # The server is a child process of this interpreter's install: the same build path.
    assert page.text("#implementation") == native.implementation()
    assert page.text("#open-transactions").startswith("1")
    assert page.text("#sampled").startswith("As of ")


def test_without_users_the_console_listens_on_loopback_only(tmp_path):
    """A server without users told to listen everywhere (--insecure) still keeps the
    console on 127.0.0.1: anyone reaching it could do anything."""
    port = free_port()
    srv = ServerProcess(str(tmp_path / "data"), extra_args=(
        "--host", "0.0.0.0", "--insecure", "--console-port", str(port)))
    srv.address = f"127.0.0.1:{srv.port}"
    srv.start()
    try:
        assert f"console on http://127.0.0.1:{port}/" in srv.log()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/topics", timeout=10) as page:
            assert page.status == 200
    finally:
        srv.kill()


def test_the_console_is_off_unless_asked(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"))
    srv.start()
    try:
        assert "console on" not in srv.log()
    finally:
        srv.kill()


def test_a_console_port_in_use_stops_the_server_saying_so(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_cli("server", "--data-dir", str(tmp_path / "data"), "--port", "0",
                      "--console-port", str(port))
    assert out.returncode == 1
    assert f"cannot serve the console on 127.0.0.1:{port}" in out.stderr
    assert "choose another --console-port" in out.stderr


def test_a_script_fetching_pages_back_to_back_is_slowed_to_the_consoles_pace(tmp_path):
    """Whatever the console computes holds the send path's interpreter lock: a scraper took
    more than half the send rate (bench/bench_console.py). It gets a burst, then
    REQUESTS_PER_S; a person's page load (HTML, style sheet, icon) fits in the burst."""
    from fmq.console.pacing import BURST, REQUESTS_PER_S
    port = free_port()
    srv = ServerProcess(str(tmp_path / "data"), extra_args=("--console-port", str(port)))
    srv.start()
    try:
        fetches = BURST + int(2 * REQUESTS_PER_S)
        started = time.monotonic()
        for _ in range(fetches):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/topics", timeout=30) as page:
                assert page.status == 200
        took = time.monotonic() - started
        assert took >= 0.9 * (fetches - BURST) / REQUESTS_PER_S, took
    finally:
        srv.kill()


def test_users_page_without_users_says_how_to_add_the_first(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/users")
    assert "fmq user add USER DATA_DIR" in page.text("#no-users")


def test_long_lists_and_message_searches_come_a_page_at_a_time(console, browser):
    srv = console["server"]
    with Producer(srv.address) as p:
        p.send_batch([Message(f"zz-{i:03d}", b"x", queue_id=0) for i in range(105)])
        p.send_batch([Message("long", f"m{i}".encode(), key="same" if i % 2 else f"k{i}",
                              queue_id=0) for i in range(120)])
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/topics")
    assert page.page.locator('tr[data-topic="orders"]').count() == 1  # sorted: page 1
    total = page.text("#pager").split(" of ")[1].split()[0]
    assert page.page.locator("#topics tbody tr").count() == 100
    page.page.click("#next-page")
    page.page.wait_for_url("**page=2*")
    assert page.page.locator("#topics tbody tr").count() == int(total) - 100
    assert page.page.locator('tr[data-topic="zz-104"]').count() == 1
    assert page.page.locator("#next-page").count() == 0

    page.open(console["url"] + "/messages?topic=long&queue=0&offset=0")
    offsets = []
    for _ in range(4):  # 120 messages: 50, 50, 20
        offsets += [int(t.split(" / ")[1]) for t in
                    page.page.locator("section.message tr:first-child td").all_inner_texts()]
        if page.page.locator("#next-page").count() == 0:
            break
        page.page.click("#next-page")
        page.page.wait_for_load_state("load")
    assert offsets == list(range(120))

    page.open(console["url"] + "/messages?topic=long&key=same")
    assert page.text("#found") == "50 messages"
    page.page.click("#next-page")
    page.page.wait_for_url("**page=2*")
    assert page.text("#found") == "10 messages"
    assert page.page.locator("#next-page").count() == 0
    assert page.page.locator("#previous-page").count() == 1
    assert not page.errors, page.errors


def test_a_groups_queues_come_a_page_at_a_time(console, browser):
    with Client(console["server"].address) as c:
        c.create_topic("wide", queues=150)
        c.call(Op.COMMIT_OFFSET, {"group": "wide-readers", "topic": "wide", "queue_id": 0,
                                  "next_offset": 0})
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/groups/wide-readers")
    assert page.page.locator("#offsets tbody tr").count() == 100
    assert page.text("#pager").startswith("Queues 1–100 of 150")
    page.page.click("#next-page")
    page.page.wait_for_url("**page=2*")
    assert page.page.locator("#offsets tbody tr").count() == 50
    assert page.page.locator("#offsets tbody tr").last.locator("td").nth(1).inner_text() \
        == "149"
    assert not page.errors, page.errors
