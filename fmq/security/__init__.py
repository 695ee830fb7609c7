"""Users, their SCRAM credentials and the access rules, kept in a file of the data directory
(docs/security.md)."""

from fmq.security.acl import Operation, ResourceType, Rule, allowed
from fmq.security.users import SECURITY_FILE, StoredCredential, UserStore, make_credential

__all__ = ["Operation", "ResourceType", "Rule", "allowed", "SECURITY_FILE", "StoredCredential", "UserStore", "make_credential"]
