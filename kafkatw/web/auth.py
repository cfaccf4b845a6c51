"""
HTTP basic authentication of the console against the broker's SASL users,
when an authorizer is configured (docs/operations.md, "Health, lag and the
console").

The console's users are the users of the broker's first SASL listener
(C{listener.security.protocol.map}): PLAIN's C{user_<name>} entries of its
JAAS config, and the SCRAM credentials in ZooKeeper (C{/config/users/<user>},
read at each check as the listener reads them).  A user is the principal
C{User:<name>}, authorized by the broker's ACL authorizer as on the Kafka
port.  A successful check is remembered for L{CACHE_SECONDS} (by a digest of
the password), so a console refreshing every 2 s does not run PBKDF2 each
time.

Twisted's C{twisted.web.guard} does the HTTP part: L{console_guard} wraps the
console in an C{HTTPAuthSessionWrapper} over a C{Portal} with
L{BrokerUserChecker} and L{ConsoleRealm}.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Callable

from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import IUsernamePassword
from twisted.cred.error import UnauthorizedLogin
from twisted.cred.portal import IRealm, Portal
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.guard import BasicCredentialFactory, HTTPAuthSessionWrapper
from twisted.web.resource import IResource
from zope.interface import implementer

from ..security.sasl import SCRAM_MECHANISMS, credential_from_salted_password, salted_password

__all__ = ["BrokerUserChecker", "ConsoleRealm", "console_guard", "sasl_listener", "CACHE_SECONDS"]

_log = Logger()

#: How long a successful check is remembered (s).
CACHE_SECONDS = 60.0


def sasl_listener(server: Any) -> str | None:
    """The first listener of C{server} with SASL PLAIN or SCRAM enabled, or C{None}."""
    listeners = server.listeners
    if listeners is None:
        return None
    for listener in listeners.listeners:
        if listener.security_protocol.startswith("SASL_"):
            mechanisms = server.config.listener_value(listener.name, "sasl.enabled.mechanisms")
            if "PLAIN" in mechanisms or any(m in SCRAM_MECHANISMS for m in mechanisms):
                return listener.name
    return None


@implementer(ICredentialsChecker)
class BrokerUserChecker:
    """
    Checks a user name and password against a listener's SASL users.

    @param settings: returns the listener's
        L{kafkatw.broker.authenticator.SaslServerSettings} (C{None} while the
        broker has not started: every check fails).
    @param clock: provides C{seconds}, for the cache.
    """

    credentialInterfaces = (IUsernamePassword,)

    def __init__(self, settings: Callable[[], Any], clock: Any) -> None:
        self.settings = settings
        self.clock = clock
        #: (user, password digest) -> when the check succeeded (s)
        self._checked: dict[tuple[str, bytes], float] = {}

    def requestAvatarId(self, credentials: Any) -> defer.Deferred:
        return defer.Deferred.fromCoroutine(self._check(credentials))

    async def _check(self, credentials: Any) -> bytes:
        user = credentials.username.decode("utf-8", "replace")
        password = credentials.password.decode("utf-8", "replace")
        digest = hashlib.sha256(credentials.password).digest()
        now = self.clock.seconds()
        checked = self._checked.get((user, digest))
        if checked is not None and now - checked < CACHE_SECONDS:
            return user.encode("utf-8")
        settings = self.settings()
        if settings is None or not user:
            raise UnauthorizedLogin()
        ok = False
        if "PLAIN" in settings.mechanisms and user in settings.plain_users:
            ok = hmac.compare_digest(settings.plain_users[user].encode("utf-8"), password.encode("utf-8"))
        for mechanism in settings.mechanisms:
            if ok or mechanism not in SCRAM_MECHANISMS:
                continue
            credential = await settings.scram_credential(mechanism, user)
            if credential is not None:
                salted = salted_password(mechanism, password, credential.salt, credential.iterations)
                stored = credential_from_salted_password(mechanism, credential.salt, salted,
                                                         credential.iterations).stored_key
                ok = hmac.compare_digest(stored, credential.stored_key)
        if not ok:
            _log.info("console login refused for user {user}", user=user)
            raise UnauthorizedLogin()
        if len(self._checked) > 1000:
            self._checked.clear()
        self._checked[(user, digest)] = now
        return user.encode("utf-8")


@implementer(IRealm)
class ConsoleRealm:
    """
    The console seen by one user: C{make_console(principal)} makes it for
    C{User:<name>}.
    """

    def __init__(self, make_console: Callable[[str], Any]) -> None:
        self.make_console = make_console

    def requestAvatar(self, avatarId: bytes, mind: Any, *interfaces: Any) -> tuple:
        if IResource not in interfaces:
            raise NotImplementedError("the console is an IResource")
        return IResource, self.make_console("User:" + avatarId.decode("utf-8")), lambda: None


def console_guard(make_console: Callable[[str], Any], checker: BrokerUserChecker) -> HTTPAuthSessionWrapper:
    """The console behind HTTP basic authentication (realm C{kafkatw console})."""
    return HTTPAuthSessionWrapper(Portal(ConsoleRealm(make_console), [checker]),
                                  [BasicCredentialFactory(b"kafkatw console")])
