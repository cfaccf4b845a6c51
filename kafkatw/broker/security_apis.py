"""
The security handlers, mixed into L{kafkatw.broker.apis.KafkaApis}: SASL
after authentication (SaslHandshake, SaslAuthenticate), SCRAM credentials
(DescribeUserScramCredentials, AlterUserScramCredentials, KIP-554) and ACLs
(CreateAcls, DescribeAcls, DeleteAcls, KIP-11 and KIP-290: Kafka's
C{AclApis}).

SASL itself is served before a connection's first other request by
L{kafkatw.broker.authenticator}; a handshake reaching these handlers comes
after it.  Credentials live in ZooKeeper (C{/config/users/<user>}) through the
registry, ACLs in the authorizer (L{kafkatw.broker.authorizer}); the
authorization model is docs/security.md's.  With an authorizer the ACL
requests need Describe (DescribeAcls) or Alter (CreateAcls, DeleteAcls) on
the cluster; without one they are answered C{SECURITY_DISABLED}, as Kafka
answers.

Source: Apache Kafka C{KafkaApis} (C{handleSaslHandshakeRequest},
C{handleSaslAuthenticateRequest}, C{handleDescribeUserScramCredentialsRequest},
C{handleAlterUserScramCredentialsRequest}), C{AclApis}; KIP-11, KIP-152,
KIP-290, KIP-554.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger

from ..errors import ErrorCode
from ..security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from ..security.sasl import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISM_TYPES, credential_from_salted_password
from ..zookeeper.bridge import ZooKeeperError
from .request_context import RequestContext

__all__ = ["SECURITY_VERSIONS", "SecurityApis", "NO_AUTHORIZER", "NO_AUTHORIZER_ALTER"]

_log = Logger()

#: API key -> (min, max) version served.
SECURITY_VERSIONS: dict[int, tuple[int, int]] = {
    17: (0, 1),  # SaslHandshake (before authentication: kafkatw.broker.authenticator)
    36: (0, 2),  # SaslAuthenticate (KIP-152; likewise)
    50: (0, 0),  # DescribeUserScramCredentials (KIP-554)
    51: (0, 0),  # AlterUserScramCredentials (KIP-554)
    29: (1, 3),  # DescribeAcls (KIP-11, KIP-290 patterns; v2+ flexible)
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
}

#: The C{error_message} of DescribeAcls on a broker without an authorizer, with
#: C{SECURITY_DISABLED} (Kafka's C{AclApis.handleDescribeAcls}).
NO_AUTHORIZER = "No Authorizer is configured on the broker"
#: The same for CreateAcls and DeleteAcls (Kafka's C{SecurityDisabledException} there).
NO_AUTHORIZER_ALTER = "No Authorizer is configured."


class SecurityApis:
    """
    SaslHandshake, SaslAuthenticate, the SCRAM credentials' requests and the
    ACLs'; a mixin of L{kafkatw.broker.apis.KafkaApis}, whose attributes and
    helpers it uses.
    """

    # provided by KafkaApis
    admin: Any
    authorizer: Any
    _allowed: Callable[..., bool]
    _respond: Callable[..., bytes]

    def security_handlers(self) -> dict[int, Callable[..., Any]]:
        """The API key -> handler entries for L{SECURITY_VERSIONS}."""
        return {17: self.handle_sasl_handshake, 36: self.handle_sasl_authenticate,
                50: self.handle_describe_user_scram_credentials, 51: self.handle_alter_user_scram_credentials,
                29: self.handle_describe_acls, 30: self.handle_create_acls, 31: self.handle_delete_acls}

    # --- SASL and SCRAM credentials ---------------------------------------------

    def handle_sasl_handshake(self, context: RequestContext, request: Any) -> bytes:
        """
        Reached only after authentication, or on a listener without SASL
        (L{kafkatw.broker.authenticator} answers it before): C{ILLEGAL_SASL_STATE},
        as Kafka's C{KafkaApis}.
        """
        return self._respond(context, {"error_code": int(ErrorCode.illegal_sasl_state), "mechanisms": []})

    def handle_sasl_authenticate(self, context: RequestContext, request: Any) -> bytes:
        """Likewise: no re-authentication (C{connections.max.reauth.ms=0})."""
        return self._respond(context, {
            "error_code": int(ErrorCode.illegal_sasl_state), "auth_bytes": b"", "session_lifetime": 0,
            "error_message": "SaslAuthenticate request received after successful authentication"
            if context.connection.security_protocol.startswith("SASL_") else
            f"SaslAuthenticate on a {context.connection.security_protocol} listener"})

    def handle_describe_user_scram_credentials(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        The mechanisms and iteration counts of users' SCRAM credentials (never
        salts or keys); every user having one when C{users} is null or empty.
        Kafka's errors per user: C{RESOURCE_NOT_FOUND} (no credential),
        C{DUPLICATE_RESOURCE} (named twice).
        """
        async def go() -> bytes:
            try:
                everyone = await self.admin.registry.list_scram_users()
            except ZooKeeperError as e:
                _log.warn("DescribeUserScramCredentials: ZooKeeper unavailable ({error})", error=e)
                return self._respond(context, {"error_code": int(ErrorCode.unknown_server_error),
                                               "error_message": "ZooKeeper is unavailable", "results": []})
            results = []
            names = [u.name for u in request.users] if request.users else sorted(everyone)
            for name in dict.fromkeys(names):
                entry: dict[str, Any] = {"user": name, "error_code": 0, "error_message": None, "credential_infos": []}
                if names.count(name) > 1:
                    entry.update(error_code=int(ErrorCode.duplicate_resource),
                                 error_message="Cannot describe SCRAM credentials for the same user twice in a "
                                               f"single request: {name}")
                elif name not in everyone:
                    entry.update(error_code=int(ErrorCode.resource_not_found),
                                 error_message=f"Attempt to describe a user credential that does not exist: {name}")
                else:
                    entry["credential_infos"] = [
                        {"mechanism": SCRAM_MECHANISM_TYPES[m], "iterations": c.iterations}
                        for m, c in sorted(everyone[name].items())]
                results.append(entry)
            return self._respond(context, {"error_code": 0, "error_message": None, "results": results})

        return defer.Deferred.fromCoroutine(go())

    def handle_alter_user_scram_credentials(self, context: RequestContext, request: Any) -> defer.Deferred:
        """
        Upsert and delete SCRAM credentials in C{/config/users/<user>}, with
        Kafka's checks per user: C{UNSUPPORTED_SASL_MECHANISM} (mechanism type
        not 1 or 2), C{UNACCEPTABLE_CREDENTIAL} (iterations outside
        4096..16384, an empty name or salted password), C{DUPLICATE_RESOURCE}
        (a mechanism of a user altered twice), C{RESOURCE_NOT_FOUND} (deleting
        a credential that does not exist).  A user with any error is left
        unchanged.  The broker stores the salted password's keys (KIP-554):
        the password itself never reaches it.
        """
        mechanisms = {t: m for m, t in SCRAM_MECHANISM_TYPES.items()}

        def check(name: str, mechanism_type: int, seen: set) -> tuple[ErrorCode, str] | None:
            if not name:
                return ErrorCode.unacceptable_credential, "Username must not be empty"
            if mechanism_type not in mechanisms:
                return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
            if (name, mechanism_type) in seen:
                return ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"
            seen.add((name, mechanism_type))
            return None

        async def go() -> bytes:
            errors: dict[str, tuple[ErrorCode, str]] = {}
            order: list[str] = []
            seen: set = set()
            upserts: dict[str, dict[str, Any]] = {}
            deletes: dict[str, list[str]] = {}
            for d in request.deletions:
                order.append(d.name)
                problem = check(d.name, int(d.mechanism), seen)
                if problem:
                    errors.setdefault(d.name, problem)
                else:
                    deletes.setdefault(d.name, []).append(mechanisms[int(d.mechanism)])
            for u in request.upsertions:
                order.append(u.name)
                problem = check(u.name, int(u.mechanism), seen)
                if problem is None and int(u.iterations) < MIN_ITERATIONS:
                    problem = ErrorCode.unacceptable_credential, "Too few iterations"
                if problem is None and int(u.iterations) > MAX_ITERATIONS:
                    problem = ErrorCode.unacceptable_credential, "Too many iterations"
                if problem is None and (not u.salt or not u.salted_password):
                    # Any salt of one byte or more, as Kafka takes it (RFC 5802 sets no length).
                    problem = ErrorCode.unacceptable_credential, "The salt and the salted password must not be empty"
                if problem:
                    errors.setdefault(u.name, problem)
                else:
                    mechanism = mechanisms[int(u.mechanism)]
                    upserts.setdefault(u.name, {})[mechanism] = credential_from_salted_password(
                        mechanism, bytes(u.salt), bytes(u.salted_password), int(u.iterations))
            results = []
            for name in dict.fromkeys(order):
                if name not in errors:
                    try:
                        existing = await self.admin.registry.get_user_scram_credentials(name)
                        missing = [m for m in deletes.get(name, []) if m not in existing]
                        if missing:
                            errors[name] = (ErrorCode.resource_not_found,
                                            "Attempt to delete a user credential that does not exist")
                        else:
                            await self.admin.registry.alter_user_scram_credentials(
                                name, upserts.get(name, {}), deletes.get(name, []))
                            _log.info("SCRAM credentials of user {user}: set {set}, deleted {deleted}", user=name,
                                      set=sorted(upserts.get(name, {})), deleted=deletes.get(name, []))
                    except ZooKeeperError as e:
                        _log.warn("AlterUserScramCredentials of {user}: ZooKeeper unavailable ({error})",
                                  user=name, error=e)
                        errors[name] = (ErrorCode.unknown_server_error, "ZooKeeper is unavailable")
                code, message = errors.get(name, (ErrorCode.none, None))
                results.append({"user": name, "error_code": int(code), "error_message": message})
            return self._respond(context, {"throttle_time": 0, "results": results})

        return defer.Deferred.fromCoroutine(go())

    # --- ACLs: CreateAcls, DescribeAcls, DeleteAcls (KIP-11, KIP-290) ---------------

    def _acls_refused(self, context: RequestContext, operation: AclOperation,
                      disabled_message: str) -> tuple[ErrorCode, str | None]:
        """
        C{(SECURITY_DISABLED, disabled_message)} without an authorizer;
        C{(CLUSTER_AUTHORIZATION_FAILED, None)} without C{operation} on the
        cluster; else C{(NONE, None)}.  Kafka's texts (C{AclApis}) are
        L{NO_AUTHORIZER} (DescribeAcls) and L{NO_AUTHORIZER_ALTER}
        (CreateAcls, DeleteAcls).
        """
        if self.authorizer is None:
            return ErrorCode.security_disabled, disabled_message
        if not self._allowed(context, operation, ResourceType.CLUSTER):
            return ErrorCode.cluster_authorization_failed, None
        return ErrorCode.none, None

    @staticmethod
    def _acl_filter(f: Any) -> AclBindingFilter:
        """@raise InvalidAclError: a code Kafka does not define."""
        try:
            return AclBindingFilter(ResourceType(f.resource_type_filter), f.resource_name_filter,
                                    PatternType(f.pattern_type_filter), f.principal_filter, f.host_filter,
                                    AclOperation(f.operation), AclPermissionType(f.permission_type))
        except ValueError as e:
            raise InvalidAclError(str(e)) from None

    def handle_create_acls(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        """Alter on the cluster is needed; each creation is answered on its own (C{INVALID_REQUEST} for a bad one)."""
        refused, message = self._acls_refused(context, AclOperation.ALTER, NO_AUTHORIZER_ALTER)
        if refused:
            return self._respond(context, {"throttle_time": 0, "results": [
                {"error_code": int(refused), "error_message": message} for _ in request.creations]})
        bindings: list[AclBinding | None] = []
        for c in request.creations:
            try:
                bindings.append(AclBinding(
                    ResourcePattern(ResourceType(c.resource_type), c.resource_name, PatternType(c.resource_pattern_type)),
                    AccessControlEntry(c.principal, c.host, AclOperation(c.operation),
                                       AclPermissionType(c.permission_type))))
            except ValueError:
                bindings.append(None)

        async def go() -> bytes:
            valid = [b for b in bindings if b is not None]
            outcome = iter(await self.authorizer.create_acls(valid))
            results = []
            for binding in bindings:
                error = next(outcome) if binding is not None else InvalidAclError("unknown code in the ACL")
                if error is None:
                    results.append({"error_code": 0, "error_message": None})
                    _log.info("ACL created by {principal}: {pattern} {entry}", principal=context.connection.principal,
                              pattern=str(binding.pattern), entry=str(binding.entry))
                elif isinstance(error, InvalidAclError):
                    results.append({"error_code": int(ErrorCode.invalid_request), "error_message": str(error)})
                else:
                    results.append({"error_code": int(ErrorCode.unknown_server_error), "error_message": str(error)})
            return self._respond(context, {"throttle_time": 0, "results": results})

        return defer.Deferred.fromCoroutine(go())

    def handle_describe_acls(self, context: RequestContext, request: Any) -> bytes:
        """
        Describe on the cluster is needed; a filter with an unknown code gets
        C{INVALID_REQUEST}; without an authorizer, C{SECURITY_DISABLED} and
        L{NO_AUTHORIZER} (not an empty list), as Kafka answers.
        """
        body: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "error_message": None, "resources": []}
        refused, message = self._acls_refused(context, AclOperation.DESCRIBE, NO_AUTHORIZER)
        if refused:
            body.update(error_code=int(refused), error_message=message)
            return self._respond(context, body)
        try:
            acl_filter = self._acl_filter(request)
            acl_filter.validate()
        except InvalidAclError as e:
            body.update(error_code=int(ErrorCode.invalid_request), error_message=str(e))
            return self._respond(context, body)
        for pattern, entries in sorted(self.authorizer.describe_acls(acl_filter).items(), key=lambda kv: kv[0]):
            body["resources"].append({
                "resource_type": int(pattern.resource_type), "resource_name": pattern.name,
                "pattern_type": int(pattern.pattern_type),
                "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                          "permission_type": int(e.permission_type)} for e in entries]})
        return self._respond(context, body)

    def handle_delete_acls(self, context: RequestContext, request: Any) -> defer.Deferred | bytes:
        """Alter on the cluster is needed; each filter is answered with the ACLs it deleted."""
        refused, message = self._acls_refused(context, AclOperation.ALTER, NO_AUTHORIZER_ALTER)
        if refused:
            return self._respond(context, {"throttle_time": 0, "filter_results": [
                {"error_code": int(refused), "error_message": message, "matching_acls": []}
                for _ in request.filters]})
        filters: list[AclBindingFilter | InvalidAclError] = []
        for f in request.filters:
            try:
                filters.append(self._acl_filter(f))
            except InvalidAclError as e:
                filters.append(e)

        async def go() -> bytes:
            valid = [f for f in filters if isinstance(f, AclBindingFilter)]
            outcome = iter(await self.authorizer.delete_acls(valid))
            results = []
            for f in filters:
                result: Any = next(outcome) if isinstance(f, AclBindingFilter) else f
                if isinstance(result, InvalidAclError):
                    results.append({"error_code": int(ErrorCode.invalid_request), "error_message": str(result),
                                    "matching_acls": []})
                elif isinstance(result, Exception):
                    results.append({"error_code": int(ErrorCode.unknown_server_error), "error_message": str(result),
                                    "matching_acls": []})
                else:
                    for b in result:
                        _log.info("ACL deleted by {principal}: {pattern} {entry}",
                                  principal=context.connection.principal, pattern=str(b.pattern), entry=str(b.entry))
                    results.append({"error_code": 0, "error_message": None, "matching_acls": [
                        {"error_code": 0, "error_message": None, "resource_type": int(b.pattern.resource_type),
                         "resource_name": b.pattern.name, "pattern_type": int(b.pattern.pattern_type),
                         "principal": b.entry.principal, "host": b.entry.host, "operation": int(b.entry.operation),
                         "permission_type": int(b.entry.permission_type)} for b in result]})
            return self._respond(context, {"throttle_time": 0, "filter_results": results})

        return defer.Deferred.fromCoroutine(go())
