"""The connection search shared by the threaded and the asyncio client, without a server:
the steps it asks its driver for (open, ask, drop, wait), what a node's answers make it do,
and the pool of one connection per broker group."""

from __future__ import annotations

import pytest

from fmq.client.acquire import (
    OWN_LINK,
    Ask,
    Drop,
    Found,
    LinkPool,
    Open,
    Search,
    Wait,
    search_steps,
)
from fmq.client.auth import Credentials
from fmq.client.discovery import ANY, PRIMARY, Finder
from fmq.errors import (
    AuthenticationFailed,
    BrokerClosed,
    ConnectionLost,
    PrimaryNotFound,
    RequestTimeout,
)
from fmq.protocol import Op

A, B, C = ("127.0.0.1", 1), ("127.0.0.1", 2), ("127.0.0.1", 3)
PRIMARY_HELLO = {"node": {"role": "primary", "primary": ""}}


def follower_of(primary: str) -> dict:
    return {"node": {"role": "follower", "primary": primary}}


def search(servers, node=PRIMARY, credentials=None, ping=False, timeout=10.0) -> Search:
    return Search(search_steps(Finder(servers, node), credentials, timeout, 5.0,
                               lambda rounds: 0.25, ping=ping))


def test_an_unreachable_server_is_skipped_and_the_primary_is_found():
    s = search([A, B])
    assert s.advance() == Open(A)
    assert s.advance(ConnectionLost("refused")) == Open(B)
    step = s.advance()
    assert isinstance(step, Ask) and step.op is Op.HELLO and step.timeout == 5.0
    assert s.advance(PRIMARY_HELLO) is None
    assert s.found == Found(B, PRIMARY_HELLO, None, None)


def test_a_follower_is_dropped_and_the_primary_it_names_is_tried_next():
    s = search([A, B, C], ping=True)
    assert s.advance() == Open(A)
    s.advance()  # HELLO
    assert s.advance(follower_of("127.0.0.1:3")) == Drop()
    assert s.advance() == Open(C)
    s.advance()
    assert s.advance(PRIMARY_HELLO) == Ask(Op.PING, {}, 10.0)
    assert s.advance({"max_in_flight": 8}) is None
    assert s.found.address == C and s.found.ping == {"max_in_flight": 8}


def test_a_client_of_any_node_takes_the_first_that_answers():
    s = search([A, B], node=ANY)
    s.advance()
    s.advance()
    assert s.advance(follower_of("127.0.0.1:2")) is None
    assert s.found.address == A


def test_only_followers_answering_means_rounds_with_waits_then_primary_not_found():
    s = search([A], timeout=0.0)
    s.advance()
    s.advance()
    assert s.advance(follower_of("")) == Drop()
    with pytest.raises(PrimaryNotFound, match="127.0.0.1:1 is a follower"):
        s.advance()


def test_a_round_where_nodes_answered_ends_in_a_wait():
    s = search([A, B], timeout=10.0)
    s.advance()
    s.advance()
    assert s.advance(follower_of("")) == Drop()
    assert s.advance() == Open(B)
    assert s.advance(ConnectionLost("refused")) == Wait(0.25)
    assert s.advance() == Open(A)  # the next round


def test_no_server_answering_is_connection_lost_at_once():
    s = search([A, B])
    s.advance()
    s.advance(ConnectionLost("a refused"))
    with pytest.raises(ConnectionLost, match="a refused; b refused"):
        s.advance(ConnectionLost("b refused"))


def test_a_silent_peer_is_taken_for_another_kind_of_server():
    s = search([A, B])
    s.advance()
    s.advance()
    assert s.advance(RequestTimeout("no answer")) == Drop()
    assert s.advance() == Open(B)
    with pytest.raises(ConnectionLost, match="did not answer the FMQ handshake"):
        s.advance(ConnectionLost("refused"))


def test_a_refused_log_in_ends_the_search_after_dropping_the_connection():
    s = search([A, B], credentials=Credentials("alice", "secret"))
    s.advance()
    s.advance()
    step = s.advance({**PRIMARY_HELLO, "auth_required": True,
                      "mechanisms": ["SCRAM-SHA-256"]})
    assert isinstance(step, Ask) and step.op is Op.AUTH_START and step.timeout == 10.0
    assert s.advance(AuthenticationFailed("wrong password")) == Drop()
    with pytest.raises(AuthenticationFailed):
        s.advance()


class FakeConn:
    def __init__(self) -> None:
        self.closed = False
        self.redirect: str | None = None


def test_the_pool_holds_one_connection_per_broker_group():
    pool = LinkPool({OWN_LINK: Finder([A]), "west": Finder([B])})
    east, west = FakeConn(), FakeConn()
    pool[OWN_LINK].attach(east)
    pool["west"].attach(west)
    assert pool[OWN_LINK].usable() is east and pool["west"].usable() is west
    assert pool["west"].claim(False, "client") == (west, None)
    west.redirect = "127.0.0.1:3"  # a NotPrimary came back on it
    assert pool["west"].usable() is None
    assert pool["west"].claim(False, "client") == (None, west)
    assert pool["west"].finder.primary == C and pool[OWN_LINK].finder.primary is None
    assert pool["west"].opened == 1 and pool.take_all() == [east]
    assert pool[OWN_LINK].usable() is None
    with pytest.raises(BrokerClosed, match="this producer is closed"):
        pool[OWN_LINK].claim(True, "producer")
