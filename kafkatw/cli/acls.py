"""
C{kafkatw acls}: add, remove and list ACLs, as Kafka's C{kafka-acls.sh} (C{AclCommand}).

Through a broker (C{--bootstrap-server}, with C{--command-config} for a
secured listener) it sends CreateAcls, DeleteAcls and DescribeAcls; with
C{--authorizer-properties zookeeper.connect=HOST:PORT[/chroot]} it writes the
ACL znodes and their change notifications straight into ZooKeeper, as Kafka's
tool did before KIP-4 -- the way to create the first ACLs (for the admin and
the brokers) before any principal may send CreateAcls.

Output follows C{AclCommand} (Apache Kafka 3.x)::

    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     	(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     	(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

C{--producer} grants Write, Describe and Create on the topics (Write and
Describe on C{--transactional-id}s; IdempotentWrite on the cluster with
C{--idempotent}); C{--consumer} grants Read and Describe on the topics and Read
on the C{--group}s.
"""

from __future__ import annotations

from typing import Any

import click

from kafkatw.errors import KafkaError
from kafkatw.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    supported_operations,
)

from ._common import describe_error, fail, parse_properties, read_security_config

__all__ = ["acls", "format_pattern", "format_filter"]

_ERROR = "Error while executing ACL command: "
_OPERATIONS = ["Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "AlterConfigs",
               "DescribeConfigs", "IdempotentWrite", "All"]


def format_pattern(pattern: ResourcePattern) -> str:
    return str(pattern)


def format_filter(f: AclBindingFilter) -> str:
    """Kafka's C{ResourcePatternFilter.toString}."""
    return f"ResourcePatternFilter(resourceType={f.resource_type.name}, name={f.name}, " \
           f"patternType={f.pattern_type.name})"


def _entries_text(entries: Any) -> str:
    return "\n".join("\t" + str(e) for e in entries)


class _BrokerAcls:
    """ACLs through a broker: CreateAcls, DeleteAcls, DescribeAcls."""

    def __init__(self, bootstrap: str, security: Any, timeout_ms: int) -> None:
        from kafkatw.client.blocking import BlockingAdminClient

        options: dict[str, Any] = {"client_id": "kafkatw-acls", "request_timeout_ms": timeout_ms,
                                   "default_api_timeout_ms": timeout_ms}
        if security is not None:
            options["security"] = security
        self.admin = BlockingAdminClient(bootstrap, **options)

    def create(self, bindings: list[AclBinding]) -> None:
        for binding, error in self.admin.create_acls(bindings).items():
            if error is not None:
                raise error

    def delete(self, filters: list[AclBindingFilter]) -> None:
        for result in self.admin.delete_acls(filters).values():
            if isinstance(result, Exception):
                raise result

    def describe(self, acl_filter: AclBindingFilter) -> dict[ResourcePattern, list[AccessControlEntry]]:
        out: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for binding in self.admin.describe_acls(acl_filter):
            out.setdefault(binding.pattern, []).append(binding.entry)
        return out

    def close(self) -> None:
        self.admin.close()


class _ZooKeeperAcls:
    """ACLs straight in ZooKeeper (C{--authorizer-properties zookeeper.connect=...})."""

    def __init__(self, zookeeper_connect: str, timeout_ms: int) -> None:
        self.connect = zookeeper_connect
        self.timeout_s = timeout_ms / 1000.0

    def _run(self, work: Any) -> Any:
        from kafkatw.client.blocking import call_with_zookeeper
        from kafkatw.zookeeper.acl_store import ZkAclStore
        from kafkatw.zookeeper.registry import Registry

        async def session(zk: Any) -> Any:
            store = ZkAclStore(Registry(zk))
            await store.load()
            return await work(store)

        return call_with_zookeeper(session, self.connect, self.timeout_s)

    def create(self, bindings: list[AclBinding]) -> None:
        async def work(store: Any) -> None:
            for error in await store.create_acls(bindings):
                if error is not None:
                    raise error

        self._run(work)

    def delete(self, filters: list[AclBindingFilter]) -> None:
        async def work(store: Any) -> None:
            for result in await store.delete_acls(filters):
                if isinstance(result, Exception):
                    raise result

        self._run(work)

    def describe(self, acl_filter: AclBindingFilter) -> dict[ResourcePattern, list[AccessControlEntry]]:
        async def work(store: Any) -> Any:
            return store.describe_acls(acl_filter)

        return self._run(work)

    def close(self) -> None:
        pass


@click.command(short_help="Add, remove or list ACLs (kafka-acls.sh).")
@click.option("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]", help="The broker(s) to connect to.")
@click.option("--command-config", type=click.Path(dir_okay=False),
              help="Client properties (security.protocol, ssl.*, sasl.*) for the connection to the brokers.")
@click.option("--authorizer-properties", multiple=True, metavar="KEY=VALUE",
              help="zookeeper.connect=HOST:PORT[/chroot]: manage the ACLs in ZooKeeper directly, without a broker.")
@click.option("--add", "action", flag_value="add", help="Add ACLs.")
@click.option("--remove", "action", flag_value="remove", help="Remove ACLs.")
@click.option("--list", "action", flag_value="list", help="List ACLs.")
@click.option("--allow-principal", multiple=True, metavar="Type:name", help="Principal to allow (repeatable).")
@click.option("--deny-principal", multiple=True, metavar="Type:name", help="Principal to deny (repeatable).")
@click.option("--principal", "principals", multiple=True, metavar="Type:name",
              help="With --list: only the ACLs of this principal (repeatable).")
@click.option("--allow-host", multiple=True, help="Host the allowed principals connect from (default: *).")
@click.option("--deny-host", multiple=True, help="Host the denied principals connect from (default: *).")
@click.option("--operation", "operations", multiple=True, metavar="OPERATION",
              help=f"Operation (repeatable; default All): {', '.join(_OPERATIONS)}.")
@click.option("--topic", "topics", multiple=True, help="Topic (repeatable; * for all).")
@click.option("--group", "groups", multiple=True, help="Consumer group (repeatable; * for all).")
@click.option("--cluster", is_flag=True, help="The cluster.")
@click.option("--transactional-id", "transactional_ids", multiple=True, help="Transactional id (repeatable).")
@click.option("--resource-pattern-type", type=click.Choice(["literal", "prefixed", "any", "match"],
                                                            case_sensitive=False), default="literal",
              show_default=True, help="How the resource names match (any and match: for --list and --remove).")
@click.option("--producer", is_flag=True, help="The ACLs of a producer (Write, Describe, Create on the topics).")
@click.option("--consumer", is_flag=True, help="The ACLs of a consumer (Read, Describe on the topics, Read on "
                                               "the groups).")
@click.option("--idempotent", is_flag=True, help="With --producer: IdempotentWrite on the cluster too.")
@click.option("--force", is_flag=True, help="Do not ask before removing.")
@click.option("--command-timeout-ms", type=click.IntRange(min=1), default=30000, show_default=True)
def acls(bootstrap_server: str | None, command_config: str | None, authorizer_properties: tuple[str, ...],
         action: str | None, allow_principal: tuple[str, ...], deny_principal: tuple[str, ...],
         principals: tuple[str, ...], allow_host: tuple[str, ...], deny_host: tuple[str, ...],
         operations: tuple[str, ...], topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
         transactional_ids: tuple[str, ...], resource_pattern_type: str, producer: bool, consumer: bool,
         idempotent: bool, force: bool, command_timeout_ms: int) -> None:
    """Add, remove or list ACLs (kafka-acls.sh)."""
    if action is None:
        raise click.UsageError("Command must include exactly one action: --list, --add, --remove.")
    zk_props = parse_properties(authorizer_properties, "--authorizer-properties")
    if (bootstrap_server is None) == ("zookeeper.connect" not in zk_props):
        raise click.UsageError("give one of --bootstrap-server or --authorizer-properties zookeeper.connect=...")
    pattern_type = PatternType.parse(resource_pattern_type)
    if action == "add" and pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise click.UsageError("A '--resource-pattern-type' value of 'any' or 'match' is not valid when adding acls.")
    if (producer or consumer) and action == "list":
        raise click.UsageError("--producer and --consumer go with --add or --remove")
    if consumer and not groups:
        raise click.UsageError("With --consumer you must specify a --group")
    if idempotent and not producer:
        raise click.UsageError("--idempotent goes with --producer")
    try:
        ops = [AclOperation.parse(o) for o in operations]
    except InvalidAclError:
        raise click.BadParameter(f"expected one of {', '.join(_OPERATIONS)}", param_hint="--operation") from None

    def patterns(kind: ResourceType, names: tuple[str, ...]) -> list[tuple[ResourceType, str]]:
        return [(kind, n) for n in names]

    resources = patterns(ResourceType.TOPIC, topics) + patterns(ResourceType.GROUP, groups) + \
        patterns(ResourceType.TRANSACTIONAL_ID, transactional_ids)
    if cluster or (producer and idempotent):
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))

    # operations per resource
    def ops_for(kind: ResourceType) -> list[AclOperation]:
        if producer or consumer:
            wanted: list[AclOperation] = []
            if producer:
                wanted += {ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
                           ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                           ResourceType.CLUSTER: [AclOperation.IDEMPOTENT_WRITE]}.get(kind, [])
            if consumer:
                wanted += {ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                           ResourceType.GROUP: [AclOperation.READ]}.get(kind, [])
            return wanted
        return ops or [AclOperation.ALL]

    for kind, _name in resources:
        bad = [op for op in ops_for(kind) if op != AclOperation.ALL and op not in supported_operations(kind)]
        if bad and not (producer or consumer):
            raise click.UsageError(
                f"ResourceType {kind.name} only supports operations "
                f"{','.join(sorted(o.name for o in supported_operations(kind)))}")

    entries_by_kind: dict[ResourceType, list[AccessControlEntry]] = {}
    for kind, _name in resources:
        entries = []
        for op in ops_for(kind):
            for principal in allow_principal:
                for host in allow_host or ("*",):
                    entries.append(AccessControlEntry(principal, host, op, AclPermissionType.ALLOW))
            for principal in deny_principal:
                for host in deny_host or ("*",):
                    entries.append(AccessControlEntry(principal, host, op, AclPermissionType.DENY))
        entries_by_kind[kind] = entries

    if action == "add":
        if not resources:
            raise click.UsageError("You must specify a resource: --topic, --group, --cluster or --transactional-id")
        if not allow_principal and not deny_principal:
            raise click.UsageError("You must specify one of: --allow-principal, --deny-principal when trying to "
                                   "add ACLs.")

    backend: Any = None
    try:
        if bootstrap_server is not None:
            backend = _BrokerAcls(bootstrap_server, read_security_config(command_config), command_timeout_ms)
        else:
            backend = _ZooKeeperAcls(zk_props["zookeeper.connect"], command_timeout_ms)
        if action == "add":
            bindings = []
            for kind, name in resources:
                pattern = ResourcePattern(kind, name, pattern_type)
                entries = entries_by_kind[kind]
                if not entries:
                    continue
                click.echo(f"Adding ACLs for resource `{pattern}`: \n {_entries_text(entries)} \n")
                bindings += [AclBinding(pattern, e) for e in entries]
            backend.create(bindings)
            _list(backend, resources, pattern_type, ())
        elif action == "remove":
            filters = []
            for kind, name in resources or [(ResourceType.ANY, None)]:
                rf = AclBindingFilter(kind, name, pattern_type)
                entries = entries_by_kind.get(kind, []) if (allow_principal or deny_principal) else []
                if entries:
                    question = (f"Are you sure you want to remove ACLs: \n {_entries_text(entries)} \n "
                                f"from resource filter `{format_filter(rf)}`? (y/n)")
                    chosen = [rf._replace(principal=e.principal, host=e.host, operation=e.operation,
                                          permission_type=e.permission_type) for e in entries]
                else:
                    question = f"Are you sure you want to delete all ACLs for resource filter `{format_filter(rf)}`? (y/n)"
                    chosen = [rf]
                if not force and not click.confirm(question, default=False, show_default=False, prompt_suffix=""):
                    continue
                filters += chosen
            if filters:
                backend.delete(filters)
            _list(backend, resources, pattern_type, ())
        else:
            _list(backend, resources, pattern_type, principals)
    except (KafkaError, InvalidAclError, OSError, ValueError) as e:
        fail(_ERROR + describe_error(e))
    finally:
        if backend is not None:
            backend.close()


def _list(backend: Any, resources: list[tuple[ResourceType, str]], pattern_type: PatternType,
          principals: tuple[str, ...]) -> None:
    found: dict[ResourcePattern, list[AccessControlEntry]] = {}
    if resources:
        for kind, name in resources:
            found.update(backend.describe(AclBindingFilter(kind, name, pattern_type)))
    else:
        found = backend.describe(AclBindingFilter(pattern_type=PatternType.ANY if pattern_type == PatternType.LITERAL
                                                  else pattern_type))
    for principal in principals:
        click.echo(f"ACLs for principal `{principal}`")
    for pattern, entries in sorted(found.items()):
        if principals:
            entries = [e for e in entries if e.principal in principals]
            if not entries:
                continue
        text = "\n".join("\t" + str(e) for e in sorted(entries, key=str))
        click.echo(f"Current ACLs for resource `{pattern}`: \n {text} \n")
