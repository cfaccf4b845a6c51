"""
Kafka's security model: security protocols, TLS, SASL and ACLs (docs/security.md).

This package sits below both the broker and the clients: it imports neither.
"""
