"""Log-in, the session cookie, CSRF refusal and per-user visibility, in a real browser
against a real server with users and rules."""

from __future__ import annotations

import pytest

from fmq.client import Producer
from fmq.message import Message
from tests.security.conftest import PASSWORD, add_rule_offline, add_user_offline
from tests.server.harness import ServerProcess, free_port

from .browser import chromium, watched

#: admin may do everything; alice may describe and consume "orders" and describe "billing".
RULES = [
    ("--principal", "admin", "--operation", "all", "--cluster"),
    ("--principal", "admin", "--operation", "all", "--topic", "", "--prefix"),
    ("--principal", "admin", "--operation", "all", "--group", "", "--prefix"),
    ("--principal", "alice", "--operation", "describe", "--topic", "orders"),
    ("--principal", "alice", "--operation", "consume", "--topic", "orders"),
    ("--principal", "alice", "--operation", "describe", "--group", "billing"),
]
QUICK = {"server": {"auth_failure_delay_ms": 1, "auth_failure_max_delay_ms": 20}}


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-login")
    data = str(root / "data")
    for user in ("admin", "alice"):
        add_user_offline(data, user)
    for rule in RULES:
        add_rule_offline(data, *rule)
    port = free_port()
    admin = {"user": "admin", "password": PASSWORD}
    srv = ServerProcess(data, QUICK, client_options=admin,
                        extra_args=("--console-port", str(port)))
    srv.start()
    try:
        with Producer(srv.address, **admin) as p:
            p.send_message(Message("orders", b"tea for two", key="k-1", queue_id=0))
            p.send_message(Message("secret-plans", b"plans-for-the-moon", key="k-1", queue_id=0))
        yield {"url": f"http://127.0.0.1:{port}", "shots": str(root / "screenshots"),
               "server": srv}
    finally:
        srv.kill()


@pytest.fixture(scope="module")
def browser(console):
    with chromium(console["shots"]) as b:
        yield b


def log_in(page, url: str, user: str, password: str, then: str = "/topics",
           expect_status: int = 200) -> None:
    page.open(url + then)  # redirected to the log-in form, which brings her back
    assert "/login" in page.page.url
    page.page.fill('input[name="user"]', user)
    page.page.fill('input[name="password"]', password)
    page.expect(url + "/login", expect_status)
    with page.page.expect_navigation() as answer:
        page.page.click('button[type="submit"]')
    assert answer.value.status == expect_status
    assert not page.errors, page.errors


def test_a_page_without_a_session_leads_to_the_log_in_form(console, browser):
    page = watched(browser, console["shots"])
    page.open(console["url"] + "/groups/billing")
    assert page.page.url.startswith(console["url"] + "/login?next=")
    page.shot("login")
    assert page.page.locator('input[name="password"]').count() == 1


def test_a_wrong_password_is_refused_and_sets_no_cookie(console, browser):
    page = watched(browser, console["shots"])
    log_in(page, console["url"], "alice", "not the password", expect_status=401)
    assert "authentication failed" in page.text("#error")
    assert page.page.context.cookies() == []
    page.open(console["url"] + "/topics")
    assert "/login" in page.page.url
    log_in(page, console["url"], "nobody", PASSWORD, expect_status=401)  # the same answer
    assert "authentication failed" in page.text("#error")


def test_alice_sees_only_what_her_rules_allow(console, browser):
    page = watched(browser, console["shots"])
    log_in(page, console["url"], "alice", PASSWORD)
    assert page.page.url == console["url"] + "/topics"
    assert page.text("#user") == "alice"
    assert page.page.locator('tr[data-topic="orders"] td.messages').inner_text() == "1"
    assert "secret-plans" not in page.page.content()
    cookie, = page.page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    page.open(console["url"] + "/topics/secret-plans", expect_status=403)
    assert "secret-plans" in page.text("#error")  # the refusal names what she asked for
    page.open(console["url"] + "/messages?topic=secret-plans&key=k-1", expect_status=403)
    assert "plans-for-the-moon" not in page.page.content()
    page.open(console["url"] + "/messages?topic=orders&key=k-1")
    assert page.text("pre.body") == "tea for two"
    page.open(console["url"] + "/transactions", expect_status=403)
    page.open(console["url"] + "/")
    assert page.page.locator("#no-stats").count() == 1


def test_admin_sees_every_topic(console, browser):
    page = watched(browser, console["shots"])
    log_in(page, console["url"], "admin", PASSWORD)
    assert page.page.locator('tr[data-topic="secret-plans"]').count() == 1
    page.open(console["url"] + "/transactions")


def test_a_post_without_the_csrf_token_is_refused(console, browser):
    page = watched(browser, console["shots"])
    log_in(page, console["url"], "alice", PASSWORD)
    forged = page.page.request.post(console["url"] + "/logout", form={"csrf": "forged"})
    assert forged.status == 403
    assert "CSRF" in forged.text()
    page.open(console["url"] + "/topics")  # still logged in: the forged POST did nothing
    assert page.text("#user") == "alice"
    page.page.click("text=Log out")  # the real form carries the token
    page.page.wait_for_url("**/login")
    page.open(console["url"] + "/topics")
    assert "/login" in page.page.url


def test_changing_actions_follow_the_users_rules(console, browser):
    """alice may describe "orders" but not alter it: no change forms, and a confirmed
    delete posted with her own valid CSRF token is refused by the server's access check;
    the admin sees the forms."""
    page = watched(browser, console["shots"])
    log_in(page, console["url"], "alice", PASSWORD)
    page.open(console["url"] + "/topics/orders")
    assert page.page.locator("#alter-topic, #delete-topic").count() == 0
    page.open(console["url"] + "/groups/billing")
    assert page.page.locator("#reset").count() == 0
    token = page.page.locator('header input[name="csrf"]').input_value()
    refused = page.page.request.post(console["url"] + "/topics/orders/delete",
                                     form={"csrf": token, "confirmed": "yes",
                                           "force": "yes"})
    assert refused.status == 403 and "orders" in refused.text()
    refused = page.page.request.post(console["url"] + "/groups/billing/reset",
                                     form={"csrf": token, "confirmed": "yes",
                                           "to": "earliest"})
    assert refused.status == 403
    page.open(console["url"] + "/topics")
    assert page.page.locator('tr[data-topic="orders"]').count() == 1  # not deleted
    admin = watched(browser, console["shots"])
    log_in(admin, console["url"], "admin", PASSWORD)
    admin.open(console["url"] + "/topics/orders")
    assert admin.page.locator("#alter-topic").count() == 1
    admin.open(console["url"] + "/groups/billing")
    assert admin.page.locator("#reset").count() == 1


def test_the_cluster_page_is_for_those_who_may_describe_the_cluster(console, browser):
    page = watched(browser, console["shots"])
    log_in(page, console["url"], "alice", PASSWORD)
    page.open(console["url"] + "/cluster")
    assert page.page.locator("#no-cluster").count() == 1
    assert page.page.locator("svg.chart").count() == 0  # no rates of topics she cannot see
    page.open(console["url"] + "/topics/orders")
    assert page.page.locator("#messages-chart").count() == 1  # her topic's own
    admin = watched(browser, console["shots"])
    log_in(admin, console["url"], "admin", PASSWORD)
    admin.open(console["url"] + "/cluster")
    assert admin.page.locator("#messages-chart").count() == 1


def test_an_admin_adds_a_user_and_a_rule_and_the_user_logs_in_then_is_removed(console,
                                                                              browser):
    """/users as `fmq user` and `fmq acl` do: each change confirmed first; the new user
    sees what her new rule allows; once removed, her open session ends."""
    admin = watched(browser, console["shots"])
    log_in(admin, console["url"], "admin", PASSWORD, then="/users")
    assert admin.page.locator('tr[data-user="alice"]').count() == 1
    admin.page.fill('#add-user input[name="user"]', "carol")
    admin.page.fill('#add-user input[name="password"]', "carol's long password")
    admin.page.fill('#add-user input[name="again"]', "carol's long password")
    with admin.page.expect_navigation():
        admin.page.click('#add-user button[type="submit"]')
    assert "Add user carol" in admin.text("h1")
    assert "carol's long password" not in admin.page.content()  # only the credential
    admin.shot("add-user")
    with admin.page.expect_navigation():
        admin.page.click('#confirm button[type="submit"]')
    assert admin.text("#done") == "User carol added."
    admin.open(console["url"] + "/users")
    admin.page.fill('#add-rule input[name="principal"]', "carol")
    admin.page.select_option('#add-rule select[name="operation"]', "describe")
    admin.page.select_option('#add-rule select[name="resource_type"]', "topic")
    admin.page.fill('#add-rule input[name="pattern"]', "orders")
    with admin.page.expect_navigation():
        admin.page.click('#add-rule button[type="submit"]')
    assert "allow carol describe on topic 'orders'" in admin.text("#explain")
    with admin.page.expect_navigation():
        admin.page.click('#confirm button[type="submit"]')
    admin.open(console["url"] + "/users")
    admin.shot("users")
    assert "carol" in admin.text("#rule-list")

    carol = watched(browser, console["shots"])
    log_in(carol, console["url"], "carol", "carol's long password")
    assert carol.page.locator('tr[data-topic="orders"]').count() == 1
    assert "secret-plans" not in carol.page.content()
    carol.open(console["url"] + "/users", expect_status=403)  # not an administrator

    admin.open(console["url"] + "/users")
    with admin.page.expect_navigation():
        admin.page.locator('tr[data-user="carol"] button').click()
    with admin.page.expect_navigation():
        admin.page.click('#confirm button[type="submit"]')
    assert admin.text("#done") == "User carol removed."
    carol.open(console["url"] + "/topics")
    assert "/login" in carol.page.url  # her session ended with her


def test_a_topic_she_may_not_describe_is_in_no_groups_names_counts_or_lag(console,
                                                                          browser):
    """alice may describe group billing, which committed in "orders" and in
    "secret-plans": she sees its lag in "orders" only, and "secret-plans" nowhere."""
    from fmq.client import Client
    from fmq.protocol import Op
    with Client(console["server"].address, user="admin", password=PASSWORD) as c:
        for topic in ("orders", "secret-plans"):
            c.call(Op.COMMIT_OFFSET, {"group": "billing", "topic": topic, "queue_id": 0,
                                      "next_offset": 0})
    page = watched(browser, console["shots"])
    log_in(page, console["url"], "alice", PASSWORD, then="/groups")
    row = page.page.locator('tr[data-group="billing"]')
    assert "orders" in row.inner_text() and "secret-plans" not in page.page.content()
    assert row.locator("td.lag").inner_text() == "1"  # orders' one message, not the plans'
    page.open(console["url"] + "/groups/billing")
    assert page.text("#group-lag") == "1"
    assert "secret-plans" not in page.page.content()
    admin = watched(browser, console["shots"])
    log_in(admin, console["url"], "admin", PASSWORD, then="/groups/billing")
    assert admin.text("#group-lag") == "2"  # both topics' messages
