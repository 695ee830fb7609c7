"""The console's changing actions in a real browser against a real server: creating,
altering and deleting a topic, resetting a group's offsets (plan, then execute; refused
while the group has live members) and redriving dead letters. Each asks for confirmation
first, and a POST without the page's CSRF token changes nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import fmq
from fmq.client import Client, Consumer, Producer
from fmq.protocol import Op
from tests.server.harness import ServerProcess, free_port
from tests.server.test_scheduled_and_retries import FAST_RETRIES, _wait_for_dead_letter

from .browser import chromium, watched

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-actions")
    port = free_port()
    config = {**FAST_RETRIES, "server": {**FAST_RETRIES["server"], "console_sample_ms": 500}}
    srv = ServerProcess(str(root / "data"), config, extra_args=("--console-port", str(port)))
    srv.start()
    try:
        yield {"server": srv, "url": f"http://127.0.0.1:{port}",
               "shots": str(root / "screenshots")}
    finally:
        srv.kill()


@pytest.fixture(scope="module")
def browser(console):
    with chromium(console["shots"]) as b:
        yield b


def describe(srv, topic: str) -> dict:
    with Client(srv.address) as c:
        return c.describe_topic(topic)


def committed(srv, group: str, topic: str, queue_id: int) -> int | None:
    with Client(srv.address) as c:
        return c.call(Op.FETCH_OFFSET, {"group": group, "topic": topic,
                                        "queue_id": queue_id})["offset"]


def submit(page, selector: str, url_glob: str) -> None:
    with page.page.expect_navigation(url=url_glob, timeout=30_000):
        page.page.click(selector)
    assert not page.errors, page.errors


def ask_then_confirm(page, form: str, asked_at: str, done_at: str | None = None, *,
                     explains: str | None = None,
                     before_confirming: Callable[[], object] = lambda: None) -> None:
    """One changing action: submit ``form``, whose answer (at ``asked_at``) only asks,
    saying ``explains`` (when given); ``before_confirming()`` looks at what was asked
    (nothing is changed yet); then confirm, landing at ``done_at`` (default: ``asked_at``)."""
    submit(page, f'{form} button[type="submit"]', asked_at)
    if explains is not None:
        assert explains in page.text("#explain")
    before_confirming()
    submit(page, '#confirm button[type="submit"]', done_at or asked_at)


def test_creating_a_topic_asks_first_then_creates_it(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/topics")
    page.page.click("#new-topic")
    page.page.wait_for_url("**/new-topic")
    page.page.fill('input[name="name"]', "invoices")
    page.page.fill('input[name="queues"]', "3")
    page.page.fill('input[name="retention_ms"]', "3600000")

    def not_yet_created() -> None:
        page.shot("create-topic")
        with Client(console["server"].address) as c:
            assert "invoices" not in [t["name"] for t in c.list_topics()]

    ask_then_confirm(page, "#new-topic", "**/new-topic", "**/topics/invoices",
                     explains="Create topic invoices with queues 3, retention (ms) 3600000",
                     before_confirming=not_yet_created)
    assert describe(console["server"], "invoices")["queues"] == 3
    assert page.page.locator("#queues tbody tr").count() == 3


def test_altering_a_topic_changes_its_retention(console, browser):
    with Client(console["server"].address) as c:
        c.create_topic("receipts", queues=2)
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/topics/receipts")
    page.page.fill('#alter-topic input[name="retention_ms"]', "7200000")
    page.page.fill('#alter-topic input[name="queues"]', "4")
    ask_then_confirm(page, "#alter-topic", "**/topics/receipts/alter", "**/topics/receipts",
                     explains="queues 4, retention (ms) 7200000")
    topic = describe(console["server"], "receipts")
    assert topic["queues"] == 4 and topic["effective"]["retention_ms"] == 7_200_000


def test_deleting_a_topic_with_unread_messages_needs_the_box_ticked(console, browser):
    srv = console["server"]
    with Producer(srv.address) as p:
        for i in range(3):
            p.send_message(fmq.Message("old-orders", f"o{i}".encode(), queue_id=0))
    with Client(srv.address) as c:
        c.call(Op.COMMIT_OFFSET, {"group": "archive", "topic": "old-orders", "queue_id": 0,
                                  "next_offset": 1})
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/topics/old-orders")
    delete_url = console["url"] + "/topics/old-orders/delete"

    def refused() -> None:
        page.shot("delete-topic")
        page.expect(delete_url, 409)

    ask_then_confirm(page, "#delete-topic", "**/topics/old-orders/delete",
                     before_confirming=refused)
    assert "consumer groups have not read" in page.text("#error")
    assert describe(srv, "old-orders")["name"] == "old-orders"  # still there
    page.open(console["url"] + "/topics/old-orders")

    def forced() -> None:
        page.page.check('input[name="force"]')
        page.expect(delete_url, 200)

    ask_then_confirm(page, "#delete-topic", "**/topics/old-orders/delete",
                     before_confirming=forced)
    assert page.text("#done") == "Topic old-orders is deleted."
    page.open(console["url"] + "/topics")
    assert page.page.locator('tr[data-topic="old-orders"]').count() == 0


def test_a_confirmed_post_without_the_pages_csrf_token_changes_nothing(console, browser):
    page = watched(browser, console["shots"])
    forged = page.page.request.post(console["url"] + "/new-topic",
                                    form={"name": "forged", "confirmed": "yes",
                                          "csrf": "forged"})
    assert forged.status == 403 and "CSRF" in forged.text()
    with Client(console["server"].address) as c:
        assert "forged" not in [t["name"] for t in c.list_topics()]


def test_resetting_offsets_shows_the_plan_then_moves_them(console, browser):
    srv = console["server"]
    with Producer(srv.address) as p:
        for i in range(6):
            p.send_message(fmq.Message("ledger", f"l{i}".encode(), queue_id=0))
    with Client(srv.address) as c:
        c.call(Op.COMMIT_OFFSET, {"group": "books", "topic": "ledger", "queue_id": 0,
                                  "next_offset": 5})
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/groups/books")
    page.page.select_option('#reset select[name="topic"]', "ledger")
    page.page.fill('#reset input[name="queue"]', "0")
    page.page.select_option('#reset select[name="to"]', "offset")
    page.page.fill('#reset input[name="value"]', "2")

    def planned_only() -> None:
        page.shot("reset-plan")
        row = page.page.locator("#plan tbody tr").first
        assert (row.locator("td.old").inner_text(), row.locator("td.new").inner_text()) == \
            ("5", "2")
        assert committed(srv, "books", "ledger", 0) == 5

    ask_then_confirm(page, "#reset", "**/groups/books/reset", before_confirming=planned_only)
    assert page.text("#changes td.new") == "2"
    assert committed(srv, "books", "ledger", 0) == 2


def test_a_reset_is_refused_while_the_group_has_live_members(console, browser):
    srv = console["server"]
    with Producer(srv.address) as p:
        p.send_message(fmq.Message("tickets", b"t0", queue_id=0))
    with Consumer(srv.address, "desk", "tickets") as member:
        deadline = time.monotonic() + 30
        while not member.poll(0.5) and time.monotonic() < deadline:
            pass
        member.commit()
        page = watched(browser, console["shots"])
        page.open(console["url"] + "/groups/desk")
        page.page.select_option('#reset select[name="to"]', "earliest")
        page.expect(console["url"] + "/groups/desk/reset", 409)
        submit(page, '#reset button[type="submit"]', "**/groups/desk/reset")
        assert "has live members (1)" in page.text("#error")
        assert "--force" not in page.text("#error")
    assert committed(srv, "desk", "tickets", 0) == 1


def test_redriving_dead_letters_asks_first_then_moves_them(console, browser):
    srv = console["server"]
    with Producer(srv.address) as p:
        p.send("parcels", b"bad", key="p-1")

    def fail(m: fmq.StoredMessage) -> None:
        raise ValueError("cannot process")

    worker = Consumer(srv.address, "post", "parcels")
    runner = threading.Thread(target=worker.run, args=(fail,))
    runner.start()
    try:
        _wait_for_dead_letter(srv.address, "post")
    finally:
        worker.close()
        runner.join(10)
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/groups/post")
    assert page.text("#dead-letters") == "1"
    assert page.text("#retries").startswith("0 ")  # none waiting: it is dead
    ask_then_confirm(page, "#redrive", "**/groups/post/redrive",
                     explains="dead letters back to it")
    assert page.text("#done") == "Redrove 1 dead letter of group post."
    page.open(console["url"] + "/groups/post")
    assert page.text("#dead-letters") == "0"
