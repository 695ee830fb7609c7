"""The fixtures of the server and security tests, for the topic tests."""

from tests.security.conftest import auth_server, certs, secure_server  # noqa: F401
from tests.server.conftest import start_server  # noqa: F401
