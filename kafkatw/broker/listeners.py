"""
Kafka's listeners: names, security protocols, advertised addresses, and the
inter-broker listener.

A broker listens on C{listeners} (C{NAME://host:port}, comma-separated; an
empty host binds every interface).  Each listener's name is mapped to its
security protocol by C{listener.security.protocol.map}
(C{INTERNAL:SASL_SSL,EXTERNAL:SSL}); without it, Kafka's default map names
the four protocols after themselves.  C{advertised.listeners} gives the
addresses registered in C{/brokers/ids/<id>} (by default those bound).  The
broker's own connections to other brokers (replica fetchers, controller) go
through C{inter.broker.listener.name}, or the listener named after
C{security.inter.broker.protocol} (default C{PLAINTEXT}); setting both is an
error, as in Kafka.  Unlike Kafka, a broker with one listener and neither key
uses that listener between brokers (Kafka refuses an C{SSL}-only broker then).

kafkatw also accepts Twisted server endpoint strings (C{tcp:9092:interface=127.0.0.1})
as listeners: they are the C{PLAINTEXT} listener.

Source: Kafka's C{EndPoint}, C{ListenerName}, C{KafkaConfig} (listener
validation) and KIP-103 (separation of internal and external traffic).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple

from twisted.internet import endpoints

__all__ = [
    "DEFAULT_PROTOCOL_MAP",
    "Listener",
    "ListenerConfig",
    "ListenerConfigError",
    "parse_listener",
    "parse_protocol_map",
    "listener_config",
]

#: Kafka's security protocols.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: C{listener.security.protocol.map}'s default (Kafka's).
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}

# Kafka's EndPoint.uriParseExp: NAME://host:port, IPv6 hosts in brackets.
_URI = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


class ListenerConfigError(ValueError):
    """A listener setting that cannot be served; the message is one line naming the setting."""


class Listener(NamedTuple):
    """
    One listener.

    @ivar name: its name, upper case (C{PLAINTEXT}, C{SSL}, C{INTERNAL}).
    @ivar security_protocol: one of C{PLAINTEXT}, C{SSL}, C{SASL_PLAINTEXT}, C{SASL_SSL}.
    @ivar host: the host to bind or advertise (C{""}: every interface).
    @ivar port: the port (0: any free port).
    @ivar endpoint: the Twisted server endpoint string to bind.
    @ivar source: the entry as configured.
    """

    name: str
    security_protocol: str
    host: str
    port: int
    endpoint: str
    source: str = ""

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")


class ListenerConfig(NamedTuple):
    """
    A broker's listeners, as its configuration gives them.

    @ivar listeners: the listeners to bind, in configuration order.
    @ivar advertised: listener name -> C{(host, port)} to register; a listener
        missing here registers the address it is bound to (C{0.0.0.0} becomes
        C{127.0.0.1}).  A port of 0 also means the bound port.
    @ivar protocol_map: listener name -> security protocol.
    @ivar inter_broker_listener: the listener the broker's own client uses.
    """

    listeners: list[Listener]
    advertised: dict[str, tuple[str, int]]
    protocol_map: dict[str, str]
    inter_broker_listener: str

    def listener(self, name: str) -> Listener:
        for listener in self.listeners:
            if listener.name == name:
                return listener
        raise KeyError(name)

    @property
    def inter_broker_protocol(self) -> str:
        return self.protocol_map[self.inter_broker_listener]


def parse_protocol_map(value: str) -> dict[str, str]:
    """
    Parse C{listener.security.protocol.map} (C{NAME:PROTOCOL,...}); empty gives
    L{DEFAULT_PROTOCOL_MAP}.

    @raise ListenerConfigError: an entry without C{:}, an unknown protocol, a name twice.
    """
    if not value.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    result: dict[str, str] = {}
    for entry in value.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ListenerConfigError(f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ListenerConfigError(f"listener.security.protocol.map: {protocol!r} (for {name}) is not one of "
                                      f"{', '.join(SECURITY_PROTOCOLS)}")
        if name in result:
            raise ListenerConfigError(f"listener.security.protocol.map names {name} twice")
        result[name] = protocol
    return result


def _endpoint_string(host: str, port: int) -> str:
    escaped = host.replace(":", "\\:")
    return f"tcp:{port}:interface={escaped}" if host else f"tcp:{port}"


def parse_listener(value: str, protocol_map: Mapping[str, str], setting: str = "listeners") -> Listener:
    """
    Parse one C{NAME://host:port} entry, or a Twisted endpoint string (plaintext).

    @raise ListenerConfigError: a malformed entry, a port outside 0..65535, a
        name not in C{protocol_map}, or a Twisted C{ssl:} endpoint (TLS
        listeners are C{SSL://host:port}, configured with C{ssl.*}).
    """
    value = value.strip()
    if "://" not in value:
        kind = value.partition(":")[0].lower()
        if kind in ("ssl", "tls"):
            raise ListenerConfigError(
                f"{setting}: {value!r}: a TLS listener is SSL://host:port (with ssl.keystore.location ...),"
                " not a Twisted ssl: endpoint")
        if setting != "listeners" or not kind:
            raise ListenerConfigError(f"{setting}: {value!r} is not NAME://host:port")
        try:
            endpoints.serverFromString(object(), value)  # parses only: nothing is bound
        except Exception as e:
            raise ListenerConfigError(f"{setting}: {value!r} is not NAME://host:port nor a Twisted endpoint"
                                      f" ({e})") from None
        port = -1
        for part in value.split(":")[1:2]:
            port = int(part) if part.isdigit() else -1
        interface = re.search(r"interface=((?:[^:\\]|\\.)*)", value)
        return Listener("PLAINTEXT", "PLAINTEXT", interface.group(1).replace("\\:", ":") if interface else "",
                        port, value, value)
    match = _URI.match(value)
    if match is None:
        raise ListenerConfigError(f"{setting}: {value!r} is not NAME://host:port")
    name, host, port_text = match.group(1).strip().upper(), match.group(2), match.group(3)
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ListenerConfigError(f"{setting}: {value!r}: the port must be in 0..65535")
    if name not in protocol_map:
        raise ListenerConfigError(
            f"{setting}: no security protocol for listener {name}; add {name}:<PROTOCOL> to"
            " listener.security.protocol.map")
    return Listener(name, protocol_map[name], host, port, _endpoint_string(host, port), value)


def listener_config(config: Any) -> ListenerConfig:
    """
    The listeners of a L{kafkatw.config.BrokerConfig} (C{listeners},
    C{advertised.listeners}, C{listener.security.protocol.map},
    C{inter.broker.listener.name}, C{security.inter.broker.protocol}).

    @raise ListenerConfigError: one line saying which setting is wrong.
    """
    protocol_map = parse_protocol_map(config["listener.security.protocol.map"])
    listeners = [parse_listener(entry, protocol_map) for entry in config["listeners"]]
    if not listeners:
        raise ListenerConfigError("listeners must name at least one listener")
    names = [listener.name for listener in listeners]
    for name in names:
        if names.count(name) > 1:
            raise ListenerConfigError(f"listeners: each listener must have a different name; {name} is there twice")
    ports = [listener.port for listener in listeners if listener.port > 0]
    for port in ports:
        if ports.count(port) > 1:
            raise ListenerConfigError(f"listeners: each listener must have a different port; {port} is there twice")
    advertised: dict[str, tuple[str, int]] = {}
    for index, entry in enumerate(config["advertised.listeners"]):
        if "://" not in entry:
            # kafkatw's older form: host:port for the first listener.
            if index:
                raise ListenerConfigError(f"advertised.listeners: {entry!r} is not NAME://host:port")
            host, _, port_text = entry.rpartition(":")
            if not port_text.isdigit():
                raise ListenerConfigError(f"advertised.listeners: {entry!r} is not host:port")
            advertised[listeners[0].name] = (host.strip("[]"), int(port_text))
            continue
        parsed = parse_listener(entry, protocol_map, "advertised.listeners")
        if parsed.name not in names:
            raise ListenerConfigError(f"advertised.listeners: {parsed.name} is not a listener in listeners")
        if parsed.name in advertised:
            raise ListenerConfigError(f"advertised.listeners names {parsed.name} twice")
        advertised[parsed.name] = (parsed.host, parsed.port)
    by_name = config["inter.broker.listener.name"].strip().upper()
    by_protocol = config["security.inter.broker.protocol"].strip().upper()
    if by_name and by_protocol:
        raise ListenerConfigError("only one of inter.broker.listener.name and security.inter.broker.protocol"
                                  " may be set")
    if by_protocol and by_protocol not in SECURITY_PROTOCOLS:
        raise ListenerConfigError(f"security.inter.broker.protocol: {by_protocol!r} is not one of "
                                  f"{', '.join(SECURITY_PROTOCOLS)}")
    inter_broker = by_name or by_protocol or "PLAINTEXT"
    if not by_name and not by_protocol and "PLAINTEXT" not in names and len(listeners) == 1:
        inter_broker = listeners[0].name  # one listener: it is the inter-broker one
    if inter_broker not in names:
        setting = ("inter.broker.listener.name" if by_name else "security.inter.broker.protocol" if by_protocol
                   else "inter.broker.listener.name (default: the PLAINTEXT listener)")
        raise ListenerConfigError(f"{setting}: {inter_broker} is not a listener in listeners"
                                  f" ({', '.join(names)})")
    if config["advertised.listeners"] and inter_broker not in advertised and any(
            "://" in entry for entry in config["advertised.listeners"]):
        raise ListenerConfigError(f"advertised.listeners must include the inter-broker listener {inter_broker}")
    return ListenerConfig(listeners, advertised, protocol_map, inter_broker)


class _WithAdvertised:
    """A broker config whose C{advertised.listeners} is another value (for L{check_advertised_listeners})."""

    def __init__(self, config: Any, advertised: list[str]) -> None:
        self._config = config
        self._advertised = advertised

    def __getitem__(self, name: str) -> Any:
        return self._advertised if name == "advertised.listeners" else self._config[name]


def check_advertised_listeners(config: Any, advertised: list[str]) -> ListenerConfig:
    """
    The listeners of C{config} with C{advertised.listeners} set to
    C{advertised} (a dynamic per-broker change, Kafka's
    C{DynamicListenerConfig.validateReconfiguration}: each name a listener
    of C{listeners}, the inter-broker one included).

    @raise ListenerConfigError: one line saying what is wrong.
    """
    return listener_config(_WithAdvertised(config, advertised))
