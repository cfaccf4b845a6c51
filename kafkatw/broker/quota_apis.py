"""
DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546: the client
quotas of users and client ids, kept in ZooKeeper as Kafka's ZooKeeper mode
keeps them (kafkatw/broker/quota_manager.py draws the layout).

An entity on the wire is a list of components C{(entity_type, entity_name)}
with C{entity_type} C{user} or C{client-id} and C{entity_name} C{None} for the
default.  A describe filter component matches a name exactly (match type 0),
the default (1) or any entity having that component (2); with C{strict}, an entity with a
component type the filter does not name is left out.  Describe needs
DescribeConfigs on the cluster, alter AlterConfigs, as in Kafka.

Source: KIP-546; Kafka's C{ZkAdminManager.describeClientQuotas} and
C{alterClientQuotas}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from ..errors import ErrorCode
from ..security.acl import AclOperation, ResourceType
from ..zookeeper.bridge import ZooKeeperError
from .quota_manager import DEFAULT, PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, QUOTA_KEYS, QuotaEntity

__all__ = ["QuotaApis", "QUOTA_VERSIONS", "entity_components"]

#: API key -> (min version, max version) served (what kafka-python's admin client speaks).
QUOTA_VERSIONS: dict[int, tuple[int, int]] = {
    48: (0, 1),  # DescribeClientQuotas (KIP-546)
    49: (0, 1),  # AlterClientQuotas (KIP-546)
}

_USER, _CLIENT_ID = "user", "client-id"
_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_SPECIFIED = 0, 1, 2
#: Byte rates are Kafka's LONG quota configs; request_percentage is a DOUBLE.
_LONG_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)


class _Invalid(Exception):
    pass


def _entity(components: Any) -> QuotaEntity:
    """The L{QuotaEntity} of request components (names C{None} -> L{DEFAULT})."""
    found: dict[str, str] = {}
    for c in components:
        if c.entity_type not in (_USER, _CLIENT_ID):
            raise _Invalid(f"Unsupported quota entity type: {c.entity_type}")
        if c.entity_type in found:
            raise _Invalid(f"Duplicate quota entity type: {c.entity_type}")
        found[c.entity_type] = DEFAULT if c.entity_name is None else c.entity_name
    if not found:
        raise _Invalid("Invalid empty client quota entity")
    return QuotaEntity(found.get(_USER), found.get(_CLIENT_ID))


def entity_components(entity: QuotaEntity) -> list[dict[str, Any]]:
    """The wire components of C{entity} (L{DEFAULT} -> C{None})."""
    components = []
    for entity_type, name in ((_USER, entity.user), (_CLIENT_ID, entity.client_id)):
        if name is not None:
            components.append({"entity_type": entity_type, "entity_name": None if name == DEFAULT else name})
    return components


def _matches(entity: QuotaEntity, components: Any, strict: bool) -> bool:
    names = {_USER: entity.user, _CLIENT_ID: entity.client_id}
    named = set()
    for c in components:
        named.add(c.entity_type)
        name = names.get(c.entity_type)
        if name is None:
            return False
        if c.match_type == _MATCH_EXACT:
            if (c.match is None and name != DEFAULT) or (c.match is not None and name != c.match):
                return False
        elif c.match_type == _MATCH_DEFAULT:
            if name != DEFAULT:
                return False
    if strict and any(name is not None and t not in named for t, name in names.items()):
        return False
    return True


def _stored_value(key: str, value: float) -> str:
    """The text ZooKeeper holds for a quota value (Kafka's LONG byte rates are whole numbers)."""
    if key in _LONG_KEYS:
        if value != int(value):
            raise _Invalid(f"Value for {key} must be a whole number, not {value}")
        return str(int(value))
    return str(float(value))


class QuotaApis:
    """The client quota handlers of L{kafkatw.broker.apis.KafkaApis} (a mixin)."""

    def quota_handlers(self) -> dict[int, Any]:
        return {48: self.handle_describe_client_quotas, 49: self.handle_alter_client_quotas}

    def handle_describe_client_quotas(self, context: Any, request: Any) -> defer.Deferred | bytes:
        if not self._allowed(context, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
            return self._respond(context, {"throttle_time": 0,
                                           "error_code": int(ErrorCode.cluster_authorization_failed),
                                           "error_message": None, "entries": None})
        for c in request.components:
            if c.entity_type not in (_USER, _CLIENT_ID) or c.match_type not in (0, 1, 2):
                return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.invalid_request),
                                               "error_message": f"Unsupported filter component: {c.entity_type}",
                                               "entries": None})

        async def go() -> bytes:
            try:
                found = await self.admin.registry.list_quota_entity_configs()
            except ZooKeeperError as e:
                return self._respond(context, {"throttle_time": 0, "error_code": int(ErrorCode.unknown_server_error),
                                               "error_message": str(e), "entries": None})
            entries = []
            for entity_type, name, config in found:
                entity = QuotaEntity.from_entity_path(entity_type, name)
                values = [{"key": k, "value": float(config[k])} for k in QUOTA_KEYS if k in config
                          and _is_number(config[k])]
                if values and _matches(entity, request.components, request.strict):
                    entries.append({"entity": entity_components(entity), "values": values})
            return self._respond(context, {"throttle_time": 0, "error_code": 0, "error_message": None,
                                           "entries": entries})

        return defer.Deferred.fromCoroutine(go())

    def handle_alter_client_quotas(self, context: Any, request: Any) -> defer.Deferred | bytes:
        allowed = self._allowed(context, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)

        async def go() -> bytes:
            results = []
            for entry in request.entries:
                wire_entity = [{"entity_type": c.entity_type, "entity_name": c.entity_name} for c in entry.entity]
                code, message = ErrorCode.none, None
                try:
                    if not allowed:
                        code = ErrorCode.cluster_authorization_failed
                        raise _Invalid(None)
                    entity = _entity(entry.entity)
                    upserts, deletions = {}, []
                    for op in entry.ops:
                        if op.key not in QUOTA_KEYS:
                            raise _Invalid(f"Invalid configuration key {op.key}")
                        if op.remove:
                            deletions.append(op.key)
                            continue
                        if not op.value > 0:
                            raise _Invalid(f"Quota {op.key} must be positive, not {op.value}")
                        upserts[op.key] = _stored_value(op.key, op.value)
                    if not request.validate_only:
                        await self.admin.registry.alter_entity_config(entity.entity_path(), upserts, deletions)
                except _Invalid as e:
                    if code == ErrorCode.none:
                        code = ErrorCode.invalid_request
                    message = e.args[0]
                except ZooKeeperError as e:
                    code, message = ErrorCode.unknown_server_error, str(e)
                results.append({"error_code": int(code), "error_message": message, "entity": wire_entity})
            written = not request.validate_only and any(r["error_code"] == 0 for r in results)
            if written and getattr(self.admin, "config_written", None) is not None:
                # as AlterConfigs: this broker applies the quotas it wrote before it answers (its own change
                # notification may come later), so a client is throttled from its next request on
                await self.admin.config_written()
            return self._respond(context, {"throttle_time": 0, "entries": results})

        return defer.Deferred.fromCoroutine(go())


def _is_number(text: str) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True
