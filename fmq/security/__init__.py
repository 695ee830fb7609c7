"""Users and their SCRAM credentials, kept in a file of the data directory
(docs/security.md)."""

from fmq.security.users import SECURITY_FILE, StoredCredential, UserStore, make_credential

__all__ = ["SECURITY_FILE", "StoredCredential", "UserStore", "make_credential"]
