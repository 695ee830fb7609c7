"""SaslHandshake (key 17) and SaslAuthenticate (key 36): Kafka clients log in as FMQ's users.

SCRAM-SHA-256 is verified as FMQ's own AUTH_START / AUTH_FINISH verify it
(:class:`fmq.server.authn.Authenticator`, ``scramp``), against the credentials ``fmq user
add`` stores. SCRAM-SHA-512 is verified the same way against the user's SHA-512 keys,
which FMQ keeps for every password set since it offers the mechanism (a SHA-512 exchange
needs keys derived with SHA-512 from the password, which the server never has): a user
whose password was set before has none, and fails with a message naming the fix (set the
password again, ``fmq user passwd``, or use SCRAM-SHA-256); the log names the user. PLAIN
(the password itself) is offered only over TLS, and checked by deriving the stored key from
it with the user's salt and iteration count.

A failure answers SASL_AUTHENTICATION_FAILED after FMQ's slow-down (doubling per failure of
the connection and of its address, ``auth_failure_delay_ms``), is counted in the server's
``auth_failures`` and logged with the user name only. An unknown user is refused exactly as
a wrong password is.

Handshake version 1 is followed by SaslAuthenticate requests. After version 0, Kafka's
original flow (clients older than Kafka 1.0's, and kafka-python or Sarama configured for
older brokers), the client's SASL messages follow as bare frames, a 4-byte size and the
bytes with no request header, and each answer is one too (:func:`raw_token`), until the
client has logged in; a failed log-in there closes the connection after the slow-down,
as Kafka does, since a bare frame has no room for an error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import struct
from typing import Any

from kio.schema.errors import ErrorCode
from scramp import ScramException, ScramMechanism

from fmq.security.credentials import ITERATIONS, SHA512_MECHANISM, ScramKeys
from fmq.security.users import MECHANISM
from fmq.server.kafka.apis import BEFORE_LOGIN, kafka_api
from fmq.server.kafka.framing import FrameError
from fmq.server.kafka.session import KafkaSession

logger = logging.getLogger("fmq.server.kafka")

PLAIN = "PLAIN"


class SaslFailed(Exception):
    """A failed log-in: the message is what the log says; the client is told only that it
    failed, unless the message is ``public`` (nothing in it tells a guesser anything)."""

    def __init__(self, message: str, public: bool = False) -> None:
        super().__init__(message)
        self.public = public


#: The hash of each SCRAM mechanism served.
SCRAM_HASHES = {MECHANISM: hashlib.sha256, SHA512_MECHANISM: hashlib.sha512}
#: What a failed SCRAM-SHA-512 log-in is told besides the usual (a user whose password was
#: set before FMQ kept SHA-512 keys cannot log in with it; saying so only for such a user
#: would tell a guesser which names exist).
SHA512_HINT = ("; SCRAM-SHA-512 needs the user's password set by an FMQ release that keeps "
               "SHA-512 keys: set it again (fmq user passwd) or use SCRAM-SHA-256")


def mechanisms(session: KafkaSession) -> list[str]:
    """What this connection may log in with."""
    scram = [MECHANISM, SHA512_MECHANISM]
    return [*scram, PLAIN] if session.tls else scram


class RawLoginFailed(FrameError):
    """A log-in after SaslHandshake v0 failed: the connection closes (the slow-down waited
    first), the only answer a bare SASL frame leaves."""


@kafka_api(17, "SaslHandshake", 0, 1, access=BEFORE_LOGIN)
async def sasl_handshake(session: KafkaSession, request: Any, version: int) -> dict:
    offered = mechanisms(session)
    if request.mechanism not in offered:
        why = ("PLAIN sends the password itself and is offered only over TLS"
               if request.mechanism == PLAIN else
               "not a mechanism FMQ serves")
        logger.info("kafka connection %s: SASL mechanism %r refused (%s)", session.peer,
                    request.mechanism, why)
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": offered}
    session.sasl_mechanism, session.scram = request.mechanism, None
    # Version 0: the SASL messages come next as bare frames (raw_token answers them).
    session.sasl_raw = version == 0
    return {"error_code": ErrorCode.none, "mechanisms": offered}


async def raw_token(session: KafkaSession, frame: bytes) -> bytes:
    """The answer to a SASL message sent as a bare frame after SaslHandshake v0: the
    server's next message, framed the same way (a size and the bytes; PLAIN's is empty).
    Once logged in, the connection's frames are Kafka requests again. Raises
    RawLoginFailed (after the slow-down) when the log-in fails."""
    try:
        reply = _step(session, frame)
    except SaslFailed as exc:
        session.sasl_raw = False
        told = await _refuse(session, exc)
        raise RawLoginFailed(f"SASL log-in after SaslHandshake v0 failed: {told} (a client "
                             f"of handshake v0 learns it as the connection closing)") from None
    if session.principal is not None:
        session.sasl_raw = False
    return struct.pack(">i", len(reply)) + reply


@kafka_api(36, "SaslAuthenticate", 0, 2, access=BEFORE_LOGIN)
async def sasl_authenticate(session: KafkaSession, request: Any, version: int) -> dict:
    try:
        reply = _step(session, bytes(request.auth_bytes))
    except SaslFailed as exc:
        return {"error_code": ErrorCode.sasl_authentication_failed,
                "error_message": await _refuse(session, exc), "auth_bytes": b"",
                "session_lifetime": 0}
    return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": reply,
            "session_lifetime": 0}  # 0: no re-authentication asked (KIP-368)


def _step(session: KafkaSession, data: bytes) -> bytes:
    """The server's next message for the client's ``data``; raises SaslFailed."""
    auth = session.ctx.authenticator
    if session.principal is not None:
        raise SaslFailed(f"this connection is logged in as {session.principal!r} already; "
                         f"open a new one to log in as another user", public=True)
    if auth is None or not auth.enforcing:
        raise SaslFailed("this server has no users: connect without SASL "
                         "(security.protocol=PLAINTEXT; docs/security.md)", public=True)
    if not auth.users_known:
        raise SaslFailed("this node has not read its users from etcd yet; retry in a moment",
                         public=True)
    if session.sasl_mechanism == PLAIN:
        return _plain(session, data)
    if session.sasl_mechanism in SCRAM_HASHES:
        return _scram(session, data)
    raise SaslFailed("SaslAuthenticate before SaslHandshake", public=True)


def _scram(session: KafkaSession, data: bytes) -> bytes:
    state, session.scram = session.scram, None  # one try per client-first: no replays
    try:
        text = data.decode()
        if state is None:
            server, first, user, known = _start(session, text)
            session.scram = (server, user, known, text, first)
            return first.encode()
        server, user, known, client_first, server_first = state
        final = legacy_final(session, user, client_first, server_first, text)
        if final is None:
            server.set_client_final(text)
            final = server.get_server_final()
    except (ScramException, UnicodeDecodeError, KeyError, ValueError, TypeError,
            IndexError, binascii.Error) as exc:
        user = state[1] if state is not None else None
        raise SaslFailed(_failure(user, f"bad SCRAM message: {exc}")) from None
    if not known:  # a made-up credential cannot verify; defence in depth
        raise SaslFailed(_failure(user, "unknown user"))
    _logged_in(session, user)
    return final.encode()


def _start(session: KafkaSession, client_first: str) -> tuple[Any, str, str, bool]:
    """SCRAM's first step for the connection's mechanism: (server state, server-first
    message, user, known)."""
    auth = session.ctx.authenticator
    if session.sasl_mechanism == MECHANISM:
        return auth.start(client_first)
    seen: dict[str, Any] = {}

    def auth_fn(user: str) -> tuple[bytes, bytes, bytes, int]:
        keys, known = sha512_keys(session, user)
        seen.update(user=user, known=known)
        return keys.salt, keys.stored_key, keys.server_key, keys.iterations

    server = ScramMechanism(SHA512_MECHANISM).make_server(auth_fn)
    server.set_client_first(client_first)
    return server, server.get_server_first(), seen["user"], seen["known"]


def sha512_keys(session: KafkaSession, user: str) -> tuple[ScramKeys, bool]:
    """The user's SCRAM-SHA-512 keys and True; made-up keys and False for an unknown user
    or one whose password was set before FMQ kept SHA-512 keys (logged: the fix is to set
    it again)."""
    credential, known = session.ctx.authenticator.credential(user)
    if known and credential.sha512 is not None:
        return credential.sha512, True
    if known:
        logger.warning("kafka connection %s: user %r has no SCRAM-SHA-512 keys (its password "
                       "was set before FMQ kept them); set it again with fmq user passwd, "
                       "or log in with SCRAM-SHA-256", session.peer, user)
    # Keyed by the made-up or real SHA-256 key: stable per user, and no proof verifies.
    fake = hmac.new(credential.stored_key, user.encode(), hashlib.sha512).digest()
    return ScramKeys(fake[:16], ITERATIONS, fake, fake[::-1]), False


def legacy_final(session: KafkaSession, user: str, client_first: str, server_first: str,
                 client_final: str) -> str | None:
    """The server-final message for librdkafka before 2.6.1, or None for any other client.

    Those versions (kcat as packaged today among them) send the client nonce once more in
    front of the combined nonce of the server-first message; Kafka 3.8.1 to 3.9 accept it
    (the nonce must end with the server's). The proof is verified here over the messages as
    sent, since ``scramp`` requires the exact nonce: it still binds the server's nonce, so
    a replayed exchange fails as before."""
    fields = dict(f.split("=", 1) for f in client_final.split(",") if "=" in f)
    nonce = server_first.split(",", 1)[0].removeprefix("r=")
    client_nonce = client_first.rsplit("r=", 1)[1]
    if fields.get("r") != client_nonce + nonce or fields.get("c") != "biws" or "p" not in fields:
        return None
    digest = SCRAM_HASHES[session.sasl_mechanism]
    if session.sasl_mechanism == MECHANISM:
        credential, known = session.ctx.authenticator.credential(user)
    else:
        credential, known = sha512_keys(session, user)
    bare = client_first.split(",", 2)[2]
    auth_message = f"{bare},{server_first},{client_final.rsplit(',p=', 1)[0]}".encode()
    signature = hmac.new(credential.stored_key, auth_message, digest).digest()
    proof = base64.b64decode(fields["p"], validate=True)
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    if not (known and hmac.compare_digest(digest(client_key).digest(),
                                          credential.stored_key)):
        raise SaslFailed(_failure(user, "wrong proof"))
    verifier = hmac.new(credential.server_key, auth_message, digest).digest()
    return "v=" + base64.b64encode(verifier).decode()


def _plain(session: KafkaSession, data: bytes) -> bytes:
    parts = data.split(b"\0")
    if len(parts) != 3:
        raise SaslFailed(_failure(None, "a PLAIN message is authzid NUL user NUL password"))
    try:
        authzid, user, password = (p.decode() for p in parts)
    except UnicodeDecodeError:
        raise SaslFailed(_failure(None, "a PLAIN message is UTF-8 text")) from None
    if authzid and authzid != user:
        raise SaslFailed(_failure(user, "acting for another user is not served"))
    credential, known = session.ctx.authenticator.credential(user)
    try:
        _, stored_key, _, _ = ScramMechanism(MECHANISM).make_auth_info(
            password, iteration_count=credential.iterations, salt=credential.salt)
    except (ScramException, ValueError) as exc:  # a password SASLprep refuses
        raise SaslFailed(_failure(user, f"bad password: {exc}")) from None
    if not (hmac.compare_digest(stored_key, credential.stored_key) and known):
        raise SaslFailed(_failure(user, "wrong password or unknown user"))
    _logged_in(session, user)
    return b""


def _failure(user: str | None, why: str) -> str:
    # What the log says (the user name only: never a password or a proof).
    return f"{why}{f' (user {user!r})' if user else ''}"


def _logged_in(session: KafkaSession, user: str) -> None:
    session.principal = user
    logger.info("kafka connection %s: logged in as %r with %s", session.peer, user,
                session.sasl_mechanism)


async def _refuse(session: KafkaSession, failure: SaslFailed) -> str:
    """Log and count a failed log-in, wait the slow-down, and give the client's message."""
    auth = session.ctx.authenticator
    session.scram = None
    session.auth_failures += 1
    delay = 0.0
    if auth is not None and auth.enforcing:
        address = session.peer.rpartition(":")[0] or session.peer
        delay = auth.delay(session.auth_failures - 1, address)
    logger.warning("kafka connection %s: authentication failed (%s); answering in %d ms",
                   session.peer, failure, round(delay * 1000))
    await asyncio.sleep(delay)
    if failure.public:
        return str(failure)
    hint = SHA512_HINT if session.sasl_mechanism == SHA512_MECHANISM else ""
    return ("authentication failed: wrong user name or password, or a malformed SASL "
            f"exchange; check sasl.username and sasl.password (docs/kafka.md){hint}")
