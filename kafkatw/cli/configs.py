"""
C{kafkatw configs}: describe and alter the configs of users, topics and
brokers, as Kafka's C{kafka-configs.sh} (C{ConfigCommand}).

    kafkatw configs --bootstrap-server B --command-config admin.properties --alter \\
        --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    kafkatw configs --bootstrap-server B --entity-type users --entity-name alice --describe
    kafkatw configs --bootstrap-server B --entity-type users --entity-name alice --alter --delete-config SCRAM-SHA-512
    kafkatw configs --zookeeper 127.0.0.1:2181 --entity-type users --entity-name admin --alter \\
        --add-config 'SCRAM-SHA-256=[password=admin-secret]'
    kafkatw configs --bootstrap-server B --entity-type topics --entity-name t --alter --add-config retention.ms=60000
    kafkatw configs --bootstrap-server B --entity-type brokers --entity-default --describe --all
    kafkatw configs --bootstrap-server B --alter --entity-type clients --entity-name c1 \
        --add-config 'producer_byte_rate=1024,consumer_byte_rate=2048'
    kafkatw configs --bootstrap-server B --alter --entity-type users --entity-name alice \
        --entity-type clients --entity-default --add-config request_percentage=50
    kafkatw configs --bootstrap-server B --describe --entity-type clients

Users: SCRAM credentials (AlterUserScramCredentials and
DescribeUserScramCredentials, KIP-554; the client sends the salted password,
never the password) and client quotas.  C{--zookeeper} writes
C{/config/users/<user>} directly, to create the first admin before any broker
runs, as Kafka allowed.  Topics and brokers: DescribeConfigs and
IncrementalAlterConfigs.  Client quotas (C{producer_byte_rate},
C{consumer_byte_rate}, C{request_percentage}) of users, client ids and both
(C{--entity-type users --entity-name U --entity-type clients --entity-name C},
each name paired with the entity type in the same position, C{--entity-default}
standing for the default): DescribeClientQuotas and AlterClientQuotas (KIP-546).

C{--add-config} is Kafka's list: C{k1=v1,k2=[a,b],k3=v3}, square brackets
grouping a value holding commas.  Output follows Kafka 3.x's C{ConfigCommand}.
"""

from __future__ import annotations

from typing import Any

import click

from kafkatw.errors import KafkaError
from kafkatw.security.sasl import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS

from ._common import describe_error, fail

__all__ = ["configs", "parse_config_list", "parse_scram_value", "quota_entity"]

#: Kafka's quota config keys (kafkatw/broker/quota_manager.py).
_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
#: --entity-type -> DescribeClientQuotas/AlterClientQuotas entity type.
_QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id"}

#: Kafka's C{ConfigSource} numbers -> names (synonyms in C{--describe}).
_SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
_RESOURCE = {"topics": 2, "brokers": 4}
_SET, _DELETE = 0, 1


def parse_config_list(text: str) -> dict[str, str]:
    """
    Kafka's C{--add-config} list: C{k=v} items separated by commas, a value in
    C{[...]} may hold commas (the brackets are dropped).

    @raise ValueError: an item without C{=}, or unbalanced brackets.
    """
    items: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ']' in --add-config")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced '[' in --add-config")
    items.append(text[start:])
    result = {}
    for item in items:
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--add-config items are key=value, not {item.split('=')[0]!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        result[key.strip()] = value
    return result


def parse_scram_value(mechanism: str, value: str) -> tuple[int, str]:
    """
    C{iterations=8192,password=secret} (iterations optional: Kafka's default,
    4096).

    @return: (iterations, password).
    @raise ValueError: no password, an unknown field, iterations not a number.
    """
    fields = {}
    for part in value.split(","):
        key, sep, v = part.partition("=")
        if not sep:
            raise ValueError(f"{mechanism}: expected [iterations=N,password=P]")
        fields[key.strip()] = v
    unknown = set(fields) - {"iterations", "password"}
    if unknown:
        raise ValueError(f"{mechanism}: unknown field(s) {', '.join(sorted(unknown))}")
    if not fields.get("password"):
        raise ValueError(f"{mechanism}: a password is required")
    try:
        iterations = int(fields.get("iterations", MIN_ITERATIONS))
    except ValueError:
        raise ValueError(f"{mechanism}: iterations must be a number") from None
    return iterations, fields["password"]


def quota_entity(entity_types: list[str], names: list[str | None]) -> tuple[tuple[str, str | None], ...]:
    """
    The quota entity of C{--entity-type}s and their names in order (C{""}
    from C{--entity-default}: the default, C{None}), as Kafka's C{ConfigCommand}
    pairs them: C{(("user", "alice"), ("client-id", None))}.

    @raise click.UsageError: not users and/or clients, or a type without a name.
    """
    if not 1 <= len(entity_types) <= 2 or any(t not in _QUOTA_ENTITY_TYPES for t in entity_types) \
            or len(set(entity_types)) != len(entity_types):
        raise click.UsageError("only '--entity-type users --entity-type clients' may be combined")
    if len(names) != len(entity_types):
        raise click.UsageError("give --entity-name or --entity-default for each --entity-type")
    pairs = sorted(zip(entity_types, names), key=lambda p: p[0] != "users")
    return tuple((_QUOTA_ENTITY_TYPES[t], n or None) for t, n in pairs)


def _user_changes(add: dict[str, str], delete: list[str]) -> tuple[dict[str, tuple[int, str]], list[str]]:
    upserts = {}
    for key, value in add.items():
        if key not in SCRAM_MECHANISMS:
            raise click.UsageError(f"kafkatw keeps SCRAM credentials ({', '.join(SCRAM_MECHANISMS)}) and quotas"
                                   f" ({', '.join(_QUOTA_KEYS)}) for users, not {key!r}")
        try:
            upserts[key] = parse_scram_value(key, value)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
    for key in delete:
        if key not in SCRAM_MECHANISMS:
            raise click.UsageError(f"kafkatw keeps SCRAM credentials and quotas for users, not {key!r}")
    return upserts, delete


def _security(command_config: str | None) -> Any:
    from kafkatw.client.security import SecurityConfig
    from kafkatw.properties import parse_properties

    if command_config is None:
        return None
    try:
        with open(command_config, encoding="utf-8") as f:
            return SecurityConfig.from_properties(parse_properties(f.read()))
    except OSError as e:
        raise click.BadParameter(f"cannot read {command_config}: {e.strerror}", param_hint="--command-config")
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--command-config") from None


class _EntityOrder(click.Command):
    """Records the order of C{--entity-name} and C{--entity-default} (Kafka pairs them with the types by position)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        order: list[str | None] = []
        tokens = iter(args)
        for token in tokens:
            if token == "--entity-name":
                order.append(next(tokens, None))
            elif token.startswith("--entity-name="):
                order.append(token.partition("=")[2])
            elif token == "--entity-default":
                order.append("")
        ctx.meta["kafkatw.entity_names"] = order
        return super().parse_args(ctx, args)


@click.command(cls=_EntityOrder,
               short_help="Describe and alter user, client, topic and broker configs (kafka-configs.sh).")
@click.option("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]", help="The broker(s) to connect to.")
@click.option("--zookeeper", "zookeeper_connect", metavar="HOST:PORT[/chroot]",
              help="Write SCRAM credentials of users straight to ZooKeeper (before any broker runs).")
@click.option("--command-config", metavar="FILE",
              help="Client properties (security.protocol, sasl.mechanism, sasl.jaas.config, ssl.*).")
@click.option("--entity-type", "entity_types", type=click.Choice(["users", "topics", "brokers", "clients"]),
              multiple=True, help="The kind of entity (users and clients may be given together, for quotas).")
@click.option("--entity-name", "entity_names", multiple=True,
              help="The entity (user name, client id, topic, broker id).")
@click.option("--entity-default", "entity_defaults", count=True,
              help="The default entity (brokers; users and clients for quotas).")
@click.option("--user", help="Same as --entity-type users --entity-name USER.")
@click.option("--topic", help="Same as --entity-type topics --entity-name TOPIC.")
@click.option("--broker", help="Same as --entity-type brokers --entity-name BROKER.")
@click.option("--client", help="Same as --entity-type clients --entity-name CLIENT.")
@click.option("--alter", "action", flag_value="alter", help="Add or delete configs.")
@click.option("--describe", "action", flag_value="describe", help="Show configs.")
@click.option("--add-config", metavar="K=V,K2=[A,B]", help="Configs to set.")
@click.option("--delete-config", metavar="K,K2", help="Configs to delete.")
@click.option("--all", "show_all", is_flag=True, help="With --describe: every config, defaults included.")
def configs(bootstrap_server: str | None, zookeeper_connect: str | None, command_config: str | None,
            entity_types: tuple[str, ...], entity_names: tuple[str, ...], entity_defaults: int, user: str | None,
            topic: str | None, broker: str | None, client: str | None, action: str | None, add_config: str | None,
            delete_config: str | None, show_all: bool) -> None:
    """Describe and alter configs, as kafka-configs.sh."""
    names: list[str | None] = list(click.get_current_context().meta.get("kafkatw.entity_names", []))
    if len(entity_types) > 1 or client is not None or entity_types[:1] == ("clients",) or (
            entity_types[:1] == ("users",) and names == [""]) or (
            entity_types[:1] == ("users",) and len(names) == 1 and action == "alter"
            and _quota_keys_only(add_config, delete_config)):
        types = list(entity_types)
        for shortcut, kind in ((user, "users"), (client, "clients")):
            if shortcut is not None:
                types.append(kind)
                names.append(shortcut)
        _quotas(bootstrap_server, zookeeper_connect, command_config, types, names, action, add_config,
                delete_config)
        return
    if len(names) > 1:
        raise click.UsageError("give one --entity-name or --entity-default")
    entity_type = entity_types[0] if entity_types else None
    entity_default = entity_defaults > 0
    entity_name = names[0] if names and names[0] else None
    for shortcut, kind in ((user, "users"), (topic, "topics"), (broker, "brokers")):
        if shortcut is not None:
            if entity_type not in (None, kind):
                raise click.UsageError(f"--{kind[:-1]} contradicts --entity-type {entity_type}")
            entity_type, entity_name = kind, shortcut
    if entity_type is None:
        raise click.UsageError("--entity-type is required")
    if action is None:
        raise click.UsageError("give --alter or --describe")
    if (bootstrap_server is None) == (zookeeper_connect is None):
        raise click.UsageError("give one of --bootstrap-server and --zookeeper")
    if entity_default and entity_type != "brokers":
        raise click.UsageError("--entity-default is for brokers, and users and clients (quotas)")
    if entity_default:
        entity_name = ""
    elif entity_name is None and action == "alter":
        raise click.UsageError("--alter needs --entity-name (or --entity-default)")
    if zookeeper_connect is not None and entity_type != "users":
        raise click.UsageError("--zookeeper is for users' SCRAM credentials; use --bootstrap-server")
    try:
        add = parse_config_list(add_config or "")
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    delete = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    if action == "alter" and not add and not delete:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    if entity_type == "users" and action == "describe" and bootstrap_server is not None:
        _describe_quotas(bootstrap_server, command_config, ["users"], [] if entity_name is None else [entity_name])
    if entity_type == "users":
        upserts, delete = _user_changes(add, delete) if action == "alter" else ({}, [])
        if zookeeper_connect is not None:
            _users_zookeeper(zookeeper_connect, action, entity_name, upserts, delete)
        else:
            _users_admin(bootstrap_server, _security(command_config), action, entity_name, upserts, delete)
        return
    _resource_admin(bootstrap_server, _security(command_config), entity_type, entity_name, entity_default,
                    action, add, delete, show_all)


def _quota_keys_only(add_config: str | None, delete_config: str | None) -> bool:
    """Whether the --add-config/--delete-config keys are all quota keys (and there is at least one)."""
    try:
        keys = list(parse_config_list(add_config or ""))
    except ValueError:
        return False
    keys += [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    return bool(keys) and all(k in _QUOTA_KEYS for k in keys)


def _describe_entity(entity: tuple[tuple[str, str | None], ...]) -> str:
    words = {"user": "user-principal", "client-id": "client-id"}
    return ", ".join(f"{words.get(t, t)} '{'<default>' if n is None else n}'" for t, n in entity)


def _quotas(bootstrap_server: str | None, zookeeper_connect: str | None, command_config: str | None,
            entity_types: list[str], names: list[str | None], action: str | None, add_config: str | None,
            delete_config: str | None) -> None:
    """Client quotas: AlterClientQuotas and DescribeClientQuotas (KIP-546), as Kafka's C{ConfigCommand}."""
    from kafkatw.client.admin import ClientQuotaAlteration

    if action is None:
        raise click.UsageError("give --alter or --describe")
    if bootstrap_server is None or zookeeper_connect is not None:
        raise click.UsageError("client quotas need --bootstrap-server (not --zookeeper)")
    if action == "describe":
        _describe_quotas(bootstrap_server, command_config, entity_types, names)
        return
    entity = quota_entity(entity_types, names)
    try:
        add = parse_config_list(add_config or "")
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    delete = [k.strip() for k in (delete_config or "").split(",") if k.strip()]
    if not add and not delete:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    ops: list[tuple[str, float | None]] = []
    for key, value in add.items():
        if key not in _QUOTA_KEYS:
            raise click.UsageError(f"invalid quota config {key!r}: one of {', '.join(_QUOTA_KEYS)}")
        try:
            ops.append((key, float(value)))
        except ValueError:
            raise click.UsageError(f"{key} must be a number, not {value!r}") from None
    for key in delete:
        if key not in _QUOTA_KEYS:
            raise click.UsageError(f"invalid quota config {key!r}: one of {', '.join(_QUOTA_KEYS)}")
        ops.append((key, None))
    try:
        with _admin(bootstrap_server, _security(command_config)) as admin:
            error = admin.alter_client_quotas([ClientQuotaAlteration(entity, tuple(ops))]).get(entity)
    except KafkaError as e:
        fail(f"Error while executing config command with args: {describe_error(e)}")
    if error is not None:
        fail(f"Error while executing config command with args: {describe_error(error)}")
    kind, name = entity[0]
    singular = "user" if kind == "user" else "client"
    if name is None:
        click.echo(f"Completed updating default config for {singular}s in the cluster.")
    else:
        click.echo(f"Completed updating config for {singular} {name}.")


def _describe_quotas(bootstrap_server: str, command_config: str | None, entity_types: list[str],
                     names: list[str | None]) -> None:
    """Kafka's C{describeQuotaConfigs}: a strict filter, a type without a name matching each of its entities."""
    from kafkatw.client.admin import ClientQuotaFilterComponent

    if len(names) > len(entity_types):
        raise click.UsageError("give --entity-name or --entity-default for each --entity-type")
    components = []
    for i, entity_type in enumerate(entity_types):
        if entity_type not in _QUOTA_ENTITY_TYPES:
            raise click.UsageError("only '--entity-type users --entity-type clients' may be combined")
        kind = _QUOTA_ENTITY_TYPES[entity_type]
        if i >= len(names):
            components.append(ClientQuotaFilterComponent(kind, None, 2))  # every entity of the type
        elif names[i]:
            components.append(ClientQuotaFilterComponent(kind, names[i], 0))
        else:
            components.append(ClientQuotaFilterComponent(kind, None, 1))
    try:
        with _admin(bootstrap_server, _security(command_config)) as admin:
            found = admin.describe_client_quotas(components, strict=True)
    except KafkaError as e:
        fail(f"Error while executing config command with args: {describe_error(e)}")
    for entity, values in sorted(found.items(), key=lambda item: str(item[0])):
        shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        click.echo(f"Quota configs for {_describe_entity(entity)} are {shown}")


def _admin(bootstrap_server: str, security: Any) -> Any:
    from kafkatw.client.blocking import BlockingAdminClient

    return BlockingAdminClient(bootstrap_server, client_id="kafkatw-configs", default_api_timeout_ms=30000,
                               security=security)


def _print_credentials(user: str, infos: list[tuple[str, int]]) -> None:
    shown = ", ".join(f"{m}=iterations={i}" for m, i in infos)
    click.echo(f"SCRAM credential configs for user-principal '{user}' are {shown}")


def _users_admin(bootstrap_server: str, security: Any, action: str, user: str | None,
                 upserts: dict[str, tuple[int, str]], delete: list[str]) -> None:
    from kafkatw.client.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion

    try:
        with _admin(bootstrap_server, security) as admin:
            if action == "describe":
                found = admin.describe_user_scram_credentials(None if user is None else [user])
                for name, infos in sorted(found.items()):
                    if isinstance(infos, KafkaError):  # as Kafka: e.g. a user without credentials
                        click.echo(f"Error retrieving SCRAM credential configs for user-principal '{name}': "
                                   f"{describe_error(infos)}")
                        continue
                    _print_credentials(name, [(i.mechanism, i.iterations) for i in infos])
                return
            assert user is not None
            alterations: list[Any] = [UserScramCredentialDeletion(user, m) for m in delete]
            alterations += [UserScramCredentialUpsertion(user, m, password, iterations)
                            for m, (iterations, password) in upserts.items()]
            error = admin.alter_user_scram_credentials(alterations).get(user)
    except KafkaError as e:
        fail(f"Error while executing config command with args: {describe_error(e)}")
    if error is not None:
        fail(f"Error while executing config command with args: {describe_error(error)}")
    click.echo(f"Completed updating config for user {user}.")


def _users_zookeeper(zookeeper_connect: str, action: str, user: str | None,
                     upserts: dict[str, tuple[int, str]], delete: list[str]) -> None:
    from kafkatw.client.blocking import call_with_zookeeper
    from kafkatw.security.sasl import make_scram_credential
    from kafkatw.zookeeper.registry import Registry

    async def describe(zk: Any) -> dict:
        registry = Registry(zk)
        if user is None:
            return await registry.list_scram_users()
        return {user: await registry.get_user_scram_credentials(user)}

    async def alter(zk: Any) -> None:
        credentials = {m: make_scram_credential(m, password, iterations) for m, (iterations, password) in upserts.items()}
        await Registry(zk).alter_user_scram_credentials(user, credentials, delete)

    for mechanism, (iterations, _password) in upserts.items():
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            fail(f"Error while executing config command with args: {mechanism}: iterations must be in "
                 f"{MIN_ITERATIONS}..{MAX_ITERATIONS}, not {iterations}")
    try:
        if action == "describe":
            for name, found in sorted(call_with_zookeeper(describe, zookeeper_connect, 30.0).items()):
                if found:
                    _print_credentials(name, [(m, c.iterations) for m, c in sorted(found.items())])
            return
        call_with_zookeeper(alter, zookeeper_connect, 30.0)
    except Exception as e:  # ZooKeeper errors, timeouts
        fail(f"Error while executing config command with args: {describe_error(e)}")
    click.echo(f"Completed updating config for entity: user-principal '{user}'.")


def _resource_admin(bootstrap_server: str, security: Any, entity_type: str, name: str | None, default: bool,
                    action: str, add: dict[str, str], delete: list[str], show_all: bool) -> None:
    resource = _RESOURCE[entity_type]
    singular = entity_type[:-1]
    try:
        with _admin(bootstrap_server, security) as admin:
            if action == "alter":
                ops = [(k, _SET, v) for k, v in add.items()] + [(k, _DELETE, None) for k in delete]
                error = admin.incremental_alter_configs({(resource, name): ops}).get((resource, name))
                if error is not None:
                    fail(f"Error while executing config command with args: {describe_error(error)}")
                click.echo("Completed updating default config for brokers in the cluster." if default else
                           f"Completed updating config for {singular} {name}.")
                return
            if name is None:
                names = sorted(admin.list_topics()) if entity_type == "topics" else \
                    [str(n) for n in sorted(admin.describe_cluster().nodes)]
            else:
                names = [name]
            for entity in names:
                entries = admin.describe_configs([(resource, entity)])[(resource, entity)]
                dynamic = (1,) if entity_type == "topics" else ((3,) if default else (2,))
                shown = [e for e in entries.values() if show_all or e.source in dynamic]
                if default:
                    head = "All default configs" if show_all else "Default configs"
                    click.echo(f"{head} for brokers in the cluster are:")
                else:
                    click.echo(f"{'All' if show_all else 'Dynamic'} configs for {singular} {entity} are:")
                for e in sorted(shown, key=lambda e: e.name):
                    value = "null" if e.is_sensitive or e.value is None else e.value
                    synonym = f"{_SOURCES.get(e.source, 'UNKNOWN')}:{e.name}={value}"
                    click.echo(f"  {e.name}={value} sensitive={str(e.is_sensitive).lower()} synonyms={{{synonym}}}")
    except KafkaError as e:
        fail(f"Error while executing config command with args: {describe_error(e)}")
