"""
How a client secures its connections: the security protocol, TLS files, SASL.

One L{SecurityConfig} is given to a L{kafkatw.client.client.KafkaClient}; its
fields carry kafka-python's option names (C{security_protocol}, C{ssl_cafile},
C{sasl_mechanism} ...), and L{SecurityConfig.from_properties} reads the Kafka
names of a C{client.properties} file (C{security.protocol},
C{ssl.truststore.location}, C{sasl.jaas.config} ...), PEM stores only (KIP-651).

Source: Kafka documentation, "Security" and "Producer/Consumer Configs";
kafka-python's C{KafkaConsumer} option names; KIP-651 (PEM key stores).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from ..security.jaas import parse_jaas_config

__all__ = ["SecurityConfig", "SECURITY_PROTOCOLS", "SASL_MECHANISMS", "security_from"]

#: Kafka's security protocols (C{SecurityProtocol}).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms kafkatw speaks.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")


@dataclass(frozen=True)
class SecurityConfig:
    """
    A client's security settings, under kafka-python's names.

    @ivar security_protocol: one of L{SECURITY_PROTOCOLS}.
    @ivar ssl_cafile: PEM file of the certificate authorities trusted to sign
        the broker's certificate; C{None} trusts the system's store.
    @ivar ssl_certfile: PEM file of the client's certificate chain (mutual TLS);
        it may also hold the private key.
    @ivar ssl_keyfile: PEM file of the client's private key, when not in
        C{ssl_certfile}.
    @ivar ssl_password: password of an encrypted private key.
    @ivar ssl_check_hostname: verify that the broker's certificate names the
        host connected to (Kafka's C{ssl.endpoint.identification.algorithm=https}).
    @ivar ssl_ciphers: OpenSSL cipher list, or C{None} for the default.
    @ivar sasl_mechanism: one of L{SASL_MECHANISMS} (C{SASL_*} protocols only).
    @ivar sasl_plain_username: the SASL user name (PLAIN and SCRAM).
    @ivar sasl_plain_password: the SASL password (PLAIN and SCRAM); never logged.
    @ivar sasl_oauth_token_provider: OAUTHBEARER's token source: an object
        with C{token()} (kafka-python's C{sasl_oauth_token_provider}; its
        C{extensions()}, when it has one, are sent too) or a callable
        returning the token (a JWT, C{str}); it is called for each
        connection.  L{kafkatw.security.oauthbearer.UnsecuredTokenProvider}
        makes unsecured tokens for development.
    @ivar sasl_kerberos_service_name: GSSAPI: the service of the brokers'
        principals (C{kafka}: tickets are asked for C{kafka/<broker host>}).
    @ivar sasl_kerberos_domain_name: GSSAPI: the host of the brokers'
        principals, instead of each broker's host as connected (kafka-python's).
    @ivar sasl_kerberos_principal: GSSAPI: the client's principal
        (C{alice@REALM}); with L{sasl_kerberos_keytab}, its ticket is got
        with the keytab's keys, else taken from the ticket cache
        (C{KRB5CCNAME}; C{kinit}).
    @ivar sasl_kerberos_keytab: GSSAPI: the client's keytab file.
    """

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = None
    ssl_check_hostname: bool = True
    ssl_ciphers: str | None = None
    sasl_mechanism: str = "PLAIN"
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = None
    sasl_oauth_token_provider: Any = None
    sasl_kerberos_service_name: str = "kafka"
    sasl_kerberos_domain_name: str | None = None
    sasl_kerberos_principal: str | None = None
    sasl_kerberos_keytab: str | None = None

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)},"
                             f" not {self.security_protocol!r}")
        if self.sasl and self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)},"
                             f" not {self.sasl_mechanism!r}")

    def __repr__(self) -> str:  # never show the passwords
        shown = ", ".join(f"{f.name}={'***' if 'password' in f.name and getattr(self, f.name) else getattr(self, f.name)!r}"
                          for f in fields(self))
        return f"SecurityConfig({shown})"

    @property
    def tls(self) -> bool:
        """Whether connections are wrapped in TLS (C{SSL}, C{SASL_SSL})."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """Whether connections authenticate with SASL (C{SASL_PLAINTEXT}, C{SASL_SSL})."""
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any]) -> "SecurityConfig":
        """
        The settings among C{options} (kafka-python's names; others are ignored).

        @raise ValueError: an unknown protocol or mechanism.
        """
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in options.items() if k in names and v is not None})

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> "SecurityConfig":
        """
        The settings of a Kafka C{client.properties} (C{--command-config}).

        Reads C{security.protocol}, C{ssl.truststore.location} (PEM),
        C{ssl.keystore.location} (PEM: certificate chain and key),
        C{ssl.key.password}, C{ssl.endpoint.identification.algorithm}
        (C{https} or empty), C{ssl.cipher.suites}, C{sasl.mechanism} and
        C{sasl.jaas.config} (its C{username} and C{password}; for
        C{OAUTHBEARER}, an C{OAuthBearerLoginModule}'s C{unsecuredLogin*}
        options make an unsecured token provider, as Kafka's default login
        callback handler; for C{GSSAPI}, a C{Krb5LoginModule}'s
        C{principal} and, with C{useKeyTab=true}, C{keyTab}) and
        C{sasl.kerberos.service.name}.

        @raise ValueError: a store type other than PEM, an unparseable JAAS
            entry, an unknown protocol or mechanism.
        """
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            if properties.get(key, "PEM").upper() != "PEM":
                raise ValueError(f"{key}={properties[key]}: kafkatw reads PEM stores only (KIP-651)")
        settings: dict[str, Any] = {}
        if "security.protocol" in properties:
            settings["security_protocol"] = properties["security.protocol"].strip().upper()
        if properties.get("ssl.truststore.location"):
            settings["ssl_cafile"] = properties["ssl.truststore.location"]
        if properties.get("ssl.keystore.location"):
            settings["ssl_certfile"] = properties["ssl.keystore.location"]
        if properties.get("ssl.key.password"):
            settings["ssl_password"] = properties["ssl.key.password"]
        if "ssl.endpoint.identification.algorithm" in properties:
            settings["ssl_check_hostname"] = properties["ssl.endpoint.identification.algorithm"].strip().lower() == "https"
        if properties.get("ssl.cipher.suites"):
            settings["ssl_ciphers"] = ":".join(s.strip() for s in properties["ssl.cipher.suites"].split(",") if s.strip())
        if "sasl.mechanism" in properties:
            settings["sasl_mechanism"] = properties["sasl.mechanism"].strip().upper()
        if properties.get("sasl.jaas.config"):
            jaas = parse_jaas_config(properties["sasl.jaas.config"])
            if settings.get("sasl_mechanism") == "GSSAPI":
                from ..security.kerberos import keytab_login

                principal, keytab = keytab_login(jaas.options)
                settings["sasl_kerberos_principal"], settings["sasl_kerberos_keytab"] = principal, keytab
                if jaas.options.get("serviceName"):
                    settings["sasl_kerberos_service_name"] = jaas.options["serviceName"]
            elif settings.get("sasl_mechanism") == "OAUTHBEARER":
                from ..security.oauthbearer import unsecured_login_provider

                settings["sasl_oauth_token_provider"] = unsecured_login_provider(jaas.options)
            else:
                settings["sasl_plain_username"] = jaas.username
                settings["sasl_plain_password"] = jaas.password
        if properties.get("sasl.kerberos.service.name"):
            settings["sasl_kerberos_service_name"] = properties["sasl.kerberos.service.name"].strip()
        return cls(**settings)

    def replace(self, **changes: Any) -> "SecurityConfig":
        return replace(self, **changes)


#: Plaintext, no authentication: the default.
PLAINTEXT = SecurityConfig()


def security_from(security: SecurityConfig | None, options: Mapping[str, Any],
                  owner: str = "the client") -> SecurityConfig:
    """
    The L{SecurityConfig} of a producer, consumer or admin client given
    C{security} and/or kafka-python's keyword options (C{security_protocol},
    C{ssl_cafile} ...), which replace C{security}'s fields.

    @raise TypeError: an option that is not a L{SecurityConfig} field (a typo).
    @raise ValueError: an unknown protocol or mechanism.
    """
    names = {f.name for f in fields(SecurityConfig)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"{owner} got unexpected keyword arguments: {', '.join(unknown)}")
    base = security or PLAINTEXT
    return replace(base, **options) if options else base
