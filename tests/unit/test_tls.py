"""
TLS listeners and clients (issue 11): PEM stores, client authentication, the
principal of a client certificate and its mapping rules, the handshake
timeout, bad input on TLS and plaintext ports, host name checks, fetches over
TLS, and the clients' security options.

The certificates are made by trustme at test time; each TLS pair runs in
memory (L{twisted.test.iosim}) on a L{MemoryReactorClock}.
"""

from __future__ import annotations

import atexit
import os
import shutil
import struct
import tempfile

from click.testing import CliRunner
from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import EventLoggingObserver, MemoryReactorClock
from twisted.logger import globalLogPublisher
from twisted.protocols.tls import TLSMemoryBIOFactory
from twisted.test import iosim
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker.network import KafkaServerFactory, ResponseWriter, TLSListenerPolicy
from kafkatw.client.security import SecurityConfig, security_from
from kafkatw.security.tls import (
    NoMatchingRule,
    PrincipalMapper,
    TLSConfigError,
    VerifyLog,
    client_options,
    load_key_store,
    server_options,
)
from kafkatw.storage.segment import FileRegion
from kafkatw.testing import make_tls_files

_FILES: dict[str, object] = {}


def tls_files() -> object:
    """One set of test certificates for the module (trustme is slow-ish: ECDSA keys)."""
    if "files" not in _FILES:
        directory = tempfile.mkdtemp(prefix="kafkatw-tls-test-")
        atexit.register(shutil.rmtree, directory, True)  # trial has no tearDownModule
        _FILES["files"] = make_tls_files(directory)
    return _FILES["files"]


class FakeApis:
    """What KafkaConnection needs of KafkaApis: connection bookkeeping and one canned response."""

    def __init__(self) -> None:
        self.connections: list = []
        self.response: object = b"\x00\x00\x00\x01"

    def connection_opened(self, connection: object) -> None:
        self.connections.append(connection)

    def connection_closed(self, connection: object) -> None:
        self.connections.remove(connection)

    def handle(self, header: object, frame: bytes, context: object) -> object:
        return self.response


class Received(Protocol):
    def __init__(self) -> None:
        self.data = bytearray()
        self.lost = None

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: object = None) -> None:
        self.lost = reason


ADDRESS = IPv4Address("TCP", "127.0.0.1", 40000)


class TLSPair:
    """A broker TLS listener's connection and a client, connected in memory."""

    def __init__(self, testcase: SynchronousTestCase, server: object, client: object | None,
                 rules: str = "DEFAULT", timeout_ms: int = 5000, security_protocol: str = "SSL") -> None:
        self.clock = MemoryReactorClock()
        self.apis = FakeApis()
        verify_log = VerifyLog()
        verify_log.install(server)
        policy = TLSListenerPolicy(self.clock, timeout_ms, PrincipalMapper.parse(rules).name, verify_log)
        self.server_factory = TLSMemoryBIOFactory(server, False, KafkaServerFactory(
            self.apis, 1 << 20, security_protocol, security_protocol, policy), clock=self.clock)
        self.client_protocol = Received()
        if client is None:  # a peer that speaks no TLS
            make_client = lambda: self.client_protocol  # noqa: E731
        else:
            client_factory = TLSMemoryBIOFactory(client, True, Factory.forProtocol(lambda: self.client_protocol),
                                                 clock=self.clock)
            make_client = lambda: client_factory.buildProtocol(ADDRESS)  # noqa: E731
        self.client, self.server, self.pump = iosim.connectedServerAndClient(
            lambda: self.server_factory.buildProtocol(ADDRESS), make_client, clock=self.clock, greet=False)
        self.flush()

    def flush(self) -> None:
        """Move bytes both ways until none move (small TLS writes go out at the next reactor turn)."""
        while True:
            self.clock.advance(0)
            if not self.pump.pump():
                self.clock.advance(0)
                if not self.pump.pump():
                    return

    @property
    def connection(self) -> object:
        return self.server.wrappedProtocol


def observe(testcase: SynchronousTestCase) -> EventLoggingObserver:
    return EventLoggingObserver.createWithCleanup(testcase, globalLogPublisher)


def messages(observer: EventLoggingObserver) -> list[str]:
    from twisted.logger import formatEvent

    return [formatEvent(e) for e in observer]


class PrincipalMapperTests(SynchronousTestCase):
    """Kafka's C{ssl.principal.mapping.rules} (KIP-371), with the examples of Kafka's documentation."""

    def test_rules(self) -> None:
        mapper = PrincipalMapper.parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
            "DEFAULT")
        self.assertEqual(mapper.name("CN=kafka1,OU=ServiceUsers,O=Org,C=US"), "kafka1")
        self.assertEqual(mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US"),
                         "duke@javasoft")
        self.assertEqual(mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US,CN=duke"), "DUKE")
        self.assertEqual(mapper.name("O=no common name"), "O=no common name")

    def test_default_and_no_match(self) -> None:
        self.assertEqual(PrincipalMapper.parse("DEFAULT").name("CN=a,O=b"), "CN=a,O=b")
        self.assertEqual(PrincipalMapper.parse("").name("CN=a"), "CN=a")
        with self.assertRaises(NoMatchingRule):
            PrincipalMapper.parse("RULE:^CN=(.*)$/$1/").name("O=x")

    def test_slash_in_a_pattern_and_newlines(self) -> None:
        mapper = PrincipalMapper.parse("RULE:^CN=(.*?)\\/x,.*$/$1/L\nDEFAULT")
        self.assertEqual(mapper.name("CN=Ann/x,O=y"), "ann")

    def test_bad_rules(self) -> None:
        for bad in ("RULE:abc", "RULE:^(CN$/x/", "NOTARULE"):
            self.assertRaises(TLSConfigError, PrincipalMapper.parse, bad)


class DistinguishedNameTests(SynchronousTestCase):
    def test_rfc2253_as_java_writes_it(self) -> None:
        """Last RDN first, RFC 2253 keywords, other types as OID=#hex(DER), multi-valued RDNs with +."""
        import datetime

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
        from OpenSSL import crypto

        from kafkatw.security.tls import distinguished_name

        def rdn(*attributes: tuple) -> x509.RelativeDistinguishedName:
            return x509.RelativeDistinguishedName([x509.NameAttribute(oid, value) for oid, value in attributes])

        name = x509.Name([rdn((NameOID.COUNTRY_NAME, "US")), rdn((NameOID.ORGANIZATION_NAME, "Ex, Inc")),
                          rdn((NameOID.COMMON_NAME, "alice"), (NameOID.USER_ID, "a1")),
                          rdn((NameOID.EMAIL_ADDRESS, "alice@example.com"))])
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
        certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                       .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                       .sign(key, hashes.SHA256()))
        self.assertEqual(distinguished_name(crypto.X509.from_cryptography(certificate)),
                         "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,CN=alice+UID=a1,"
                         "O=Ex\\, Inc,C=US")


class StoreTests(SynchronousTestCase):
    def test_key_store_and_errors(self) -> None:
        files = tls_files()
        store = load_key_store(files.server)
        self.assertEqual(len(store.chain), 1)
        directory = self.mktemp()
        os.makedirs(directory)
        only_cert = os.path.join(directory, "cert.pem")
        with open(files.server, "rb") as f, open(only_cert, "wb") as out:
            out.write(f.read().split(b"-----BEGIN EC PRIVATE KEY-----")[0])
        for args, says in [
            ((os.path.join(directory, "missing.pem"),), "cannot read ssl.keystore.location"),
            ((only_cert,), "no PEM private key"),
            ((files.ca,), "no PEM private key"),
        ]:
            with self.assertRaises(TLSConfigError) as raised:
                load_key_store(*args)
            self.assertIn(says, str(raised.exception))
        with self.assertRaises(TLSConfigError) as raised:  # the key of another certificate
            load_key_store(only_cert, keyfile=files.clients["alice"])
        self.assertIn("not the first certificate's", str(raised.exception))

    def test_encrypted_key(self) -> None:
        from cryptography.hazmat.primitives import serialization

        files = tls_files()
        data = open(files.server, "rb").read()
        key = serialization.load_pem_private_key(data, None)
        encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.BestAvailableEncryption(b"key-secret"))
        path = os.path.join(self.mktemp())
        with open(path, "wb") as f:
            f.write(data.split(b"-----BEGIN EC PRIVATE KEY-----")[0] + encrypted)
        self.assertEqual(len(load_key_store(path, "key-secret").chain), 1)
        with self.assertRaises(TLSConfigError) as raised:
            load_key_store(path)
        self.assertIn("set ssl.key.password", str(raised.exception))
        with self.assertRaises(TLSConfigError) as raised:
            load_key_store(path, "wrong")
        self.assertNotIn("wrong", str(raised.exception).replace("is wrong", ""))

    def test_server_option_errors(self) -> None:
        files = tls_files()
        for kwargs, says in [
            ({"keystore": ""}, "needs ssl.keystore.location"),
            ({"keystore": files.server, "client_auth": "maybe"}, "ssl.client.auth"),
            ({"keystore": files.server, "enabled_protocols": ["SSLv3"]}, "ssl.enabled.protocols"),
            ({"keystore": files.server, "cipher_suites": ["NO-SUCH-CIPHER"]}, "ssl.cipher.suites"),
        ]:
            with self.assertRaises(TLSConfigError) as raised:
                server_options(**kwargs)
            self.assertIn(says, str(raised.exception))
        server_options(files.server, cipher_suites=["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
                       enabled_protocols=["TLSv1.2"])


class HandshakeTests(SynchronousTestCase):
    def test_mutual_tls_principal(self) -> None:
        files = tls_files()
        observer = observe(self)
        pair = TLSPair(self, server_options(files.server, None, files.ca, "required"),
                       client_options("localhost", files.ca, files.clients["alice"]))
        connection = pair.connection
        self.assertTrue(connection.handshake_done)
        self.assertEqual(connection.context.principal, "User:CN=alice,OU=eng,O=kafkatw-test")
        self.assertEqual((connection.context.listener_name, connection.context.security_protocol), ("SSL", "SSL"))
        self.assertIn("principal User:CN=alice,OU=eng,O=kafkatw-test", "\n".join(messages(observer)))
        self.assertEqual(pair.clock.getDelayedCalls(), [])  # the handshake timer is cancelled

    def test_mapping_rules_apply(self) -> None:
        files = tls_files()
        pair = TLSPair(self, server_options(files.server, None, files.ca, "required"),
                       client_options("127.0.0.1", files.ca, files.clients["bob"]),
                       rules="RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U")
        self.assertEqual(pair.connection.context.principal, "User:BOB@ENG")

    def test_no_matching_rule_closes(self) -> None:
        files = tls_files()
        observer = observe(self)
        pair = TLSPair(self, server_options(files.server, None, files.ca, "required"),
                       client_options("localhost", files.ca, files.clients["bob"]), rules="RULE:^CN=admin,.*$/admin/")
        self.assertEqual(pair.apis.connections, [])
        self.assertIn("no ssl.principal.mapping.rules rule matches", "\n".join(messages(observer)))

    def test_sasl_ssl_leaves_the_principal_to_sasl(self) -> None:
        """
        On SASL_SSL a client certificate is checked by the handshake but not
        mapped: a name no rule matches does not close the connection, and the
        principal stays User:ANONYMOUS until the SASL exchange names one.
        """
        files = tls_files()
        observer = observe(self)
        pair = TLSPair(self, server_options(files.server, None, files.ca, "requested"),
                       client_options("localhost", files.ca, files.clients["bob"]), rules="RULE:^CN=admin,.*$/admin/",
                       security_protocol="SASL_SSL")
        connection = pair.connection
        self.assertTrue(connection.handshake_done)
        self.assertEqual(pair.apis.connections, [connection])
        self.assertEqual(connection.context.principal, "User:ANONYMOUS")
        logged = "\n".join(messages(observer))
        self.assertIn("on listener SASL_SSL: SASL authentication follows", logged)
        self.assertNotIn("no ssl.principal.mapping.rules rule matches", logged)

    def test_anonymous_without_a_client_certificate(self) -> None:
        files = tls_files()
        for auth in ("none", "requested"):
            pair = TLSPair(self, server_options(files.server, None, files.ca, auth),
                           client_options("localhost", files.ca))
            self.assertEqual(pair.connection.context.principal, "User:ANONYMOUS", auth)

    def test_client_certificate_refused(self) -> None:
        """ssl.client.auth=required: none, an expired one, or one of another CA fails the handshake."""
        files = tls_files()
        for certfile, why in [(None, ""), (files.expired_client, "CN=expired,"),
                              (files.expired_client, "it has expired"),
                              (files.untrusted_client, "it is not signed by a CA in the trust store")]:
            observer = observe(self)
            pair = TLSPair(self, server_options(files.server, None, files.ca, "required"),
                           client_options("localhost", files.ca, certfile))
            self.assertEqual(pair.apis.connections, [], certfile)
            self.assertIsNotNone(pair.client_protocol.lost)
            logged = "\n".join(messages(observer))
            self.assertIn("TLS handshake from", logged)
            self.assertIn("on listener SSL failed", logged)
            self.assertIn(why, logged)

    def test_enabled_protocols(self) -> None:
        files = tls_files()
        pair = TLSPair(self, server_options(files.server, enabled_protocols=["TLSv1.3"]),
                       client_options("localhost", files.ca, enabled_protocols=["TLSv1.2"]))
        self.assertEqual(pair.apis.connections, [])
        pair = TLSPair(self, server_options(files.server, enabled_protocols=["TLSv1.2"]),
                       client_options("localhost", files.ca))
        self.assertEqual(pair.server.getHandle().get_protocol_version_name(), "TLSv1.2")

    def test_hostname_mismatch_fails_in_the_client(self) -> None:
        files = tls_files()
        pair = TLSPair(self, server_options(files.other_host), client_options("localhost", files.ca))
        self.assertEqual(pair.apis.connections, [])
        self.assertIn("DNSMismatch", repr(pair.client_protocol.lost.value))
        # Without the check (ssl.endpoint.identification.algorithm empty), the chain alone is verified.
        pair = TLSPair(self, server_options(files.other_host), client_options("localhost", files.ca,
                                                                              check_hostname=False))
        self.assertTrue(pair.connection.handshake_done)

    def test_untrusted_server_fails_in_the_client(self) -> None:
        files = tls_files()
        pair = TLSPair(self, server_options(files.untrusted_client), client_options("localhost", files.ca))
        self.assertEqual(pair.apis.connections, [])

    def test_plaintext_bytes_on_a_tls_port(self) -> None:
        files = tls_files()
        observer = observe(self)
        pair = TLSPair(self, server_options(files.server), None)
        pair.client.transport.write(struct.pack(">i", 10) + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
        pair.flush()
        self.assertEqual(pair.apis.connections, [])
        self.assertIn("on listener SSL failed", "\n".join(messages(observer)))

    def test_stalled_handshake_times_out(self) -> None:
        files = tls_files()
        observer = observe(self)
        pair = TLSPair(self, server_options(files.server), None, timeout_ms=5000)
        self.assertEqual(len(pair.apis.connections), 1)
        pair.clock.advance(4.9)
        pair.flush()
        self.assertEqual(len(pair.apis.connections), 1)
        pair.clock.advance(0.2)
        pair.flush()
        self.assertEqual(pair.apis.connections, [])
        self.assertIn("no TLS handshake within ssl.handshake.timeout.ms=5000", "\n".join(messages(observer)))

    def test_tls_handshake_on_a_plaintext_port(self) -> None:
        """A ClientHello's record header read as a frame size (0x1603 01..) is far over socket.request.max.bytes."""
        observer = observe(self)
        apis = FakeApis()
        factory = KafkaServerFactory(apis, 104857600)
        client_tls = TLSMemoryBIOFactory(client_options("localhost", tls_files().ca), True,
                                         Factory.forProtocol(Received))
        client, server, pump = iosim.connectedServerAndClient(
            lambda: factory.buildProtocol(ADDRESS), lambda: client_tls.buildProtocol(ADDRESS), greet=False)
        pump.flush()
        self.assertEqual(apis.connections, [])
        self.assertIn("is outside 0..socket.request.max.bytes", "\n".join(messages(observer)))


class TLSFetchTests(SynchronousTestCase):
    """
    A fetch response's file region goes out over TLS in slices, as the
    transport drains: no sendfile, no whole copy.
    """

    def test_region_streams_in_slices(self) -> None:
        files = tls_files()
        pair = TLSPair(self, server_options(files.server), client_options("localhost", files.ca))
        path = self.mktemp()
        size = 3 * 1024 * 1024 + 17
        payload = os.urandom(size)
        with open(path, "wb") as f:
            f.write(payload)
        fd = os.open(path, os.O_RDONLY)
        self.addCleanup(os.close, fd)
        header = b"\x00\x00\x00\x07"
        pair.apis.response = ([header, FileRegion(fd, path, 0, size)], len(header) + size)
        copied = ResponseWriter.copied_bytes
        pair.client.write(struct.pack(">i", 11) + b"\x00\x01\x00\x0c\x00\x00\x00\x07\xff\xff\x00")
        pair.flush()
        writer = pair.connection._writer
        self.assertTrue(writer.registered)
        # Twisted's TLS transport pulls from a pull producer with the global
        # cooperator; the test pulls by hand instead, one call per drained buffer.
        steps = 0
        while writer.registered:
            before = ResponseWriter.copied_bytes
            writer.resumeProducing()
            self.assertLessEqual(ResponseWriter.copied_bytes - before, 256 * 1024)  # one slice per call
            pair.flush()
            steps += 1
        self.assertEqual(ResponseWriter.copied_bytes - copied, size)
        data = bytes(pair.client_protocol.data)
        self.assertEqual(struct.unpack(">i", data[:4])[0], len(header) + size)
        self.assertEqual(data[4:8], header)
        self.assertEqual(data[8:], payload)
        self.assertGreaterEqual(steps, size // (256 * 1024))


class ClientOptionTests(SynchronousTestCase):
    def test_kafka_python_keywords(self) -> None:
        security = security_from(None, {"security_protocol": "SSL", "ssl_cafile": "ca.pem",
                                        "ssl_check_hostname": False})
        self.assertEqual((security.security_protocol, security.ssl_cafile, security.ssl_check_hostname),
                         ("SSL", "ca.pem", False))
        self.assertTrue(security.tls)
        base = SecurityConfig(security_protocol="SSL", ssl_cafile="a.pem")
        self.assertEqual(security_from(base, {"ssl_cafile": "b.pem"}).ssl_cafile, "b.pem")
        self.assertIs(security_from(base, {}), base)
        with self.assertRaises(TypeError):
            security_from(None, {"ssl_cafil": "typo.pem"})

    def test_producer_consumer_admin_take_the_options(self) -> None:
        from kafkatw.client.admin import AdminClient
        from kafkatw.client.consumer import Consumer
        from kafkatw.client.producer import Producer

        reactor = MemoryReactorClock()
        for cls in (Producer, Consumer, AdminClient):
            client = cls(reactor, "127.0.0.1:9093", security_protocol="SSL", ssl_cafile="ca.pem")
            self.assertEqual((client.client.security.security_protocol, client.client.security.ssl_cafile),
                             ("SSL", "ca.pem"), cls)
            with self.assertRaises(TypeError):
                cls(reactor, "127.0.0.1:9093", ssl_no_such_option=True)

    def test_client_connects_with_tls(self) -> None:
        """KafkaClient wraps its connections in TLS, checking the host name it dials."""
        from kafkatw.client.client import KafkaClient

        files = tls_files()
        client = KafkaClient(MemoryReactorClock(), "localhost:9093",
                             security=SecurityConfig(security_protocol="SSL", ssl_cafile=files.ca))
        options = client._tls_options("localhost")
        self.assertIs(client._tls_options("localhost"), options)  # files read once per host
        bad = KafkaClient(MemoryReactorClock(), "localhost:9093",
                          security=SecurityConfig(security_protocol="SSL", ssl_cafile="/nonexistent/ca.pem"))
        self.assertRaises(TLSConfigError, bad._tls_options, "localhost")

    def test_command_config(self) -> None:
        import click

        from kafkatw.cli._common import bootstrap_option, client_security, command_config_option

        seen = []

        @click.command()
        @bootstrap_option
        @command_config_option
        def command(bootstrap_server: str) -> None:
            seen.append(client_security())

        directory = self.mktemp()
        os.makedirs(directory)
        properties = os.path.join(directory, "client.properties")
        with open(properties, "w") as f:
            f.write("security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location=/etc/ca.pem\n"
                    "ssl.endpoint.identification.algorithm=\n")
        result = CliRunner().invoke(command, ["--bootstrap-server", "h:1", "--command-config", properties])
        self.assertEqual(result.exit_code, 0, result.output)
        security = seen[0]["security"]
        self.assertEqual((security.security_protocol, security.ssl_cafile, security.ssl_check_hostname),
                         ("SSL", "/etc/ca.pem", False))
        result = CliRunner().invoke(command, ["--bootstrap-server", "h:1"])
        self.assertEqual(seen[1], {})
        with open(properties, "w") as f:
            f.write("security.protocol=SSL\nssl.truststore.type=JKS\n")
        result = CliRunner().invoke(command, ["--bootstrap-server", "h:1", "--command-config", properties])
        self.assertEqual(result.exit_code, 2)
        self.assertIn("PEM stores only", result.output)

    def test_spark_options_pass_security_through(self) -> None:
        from kafkatw.spark._options import parse_options

        options = parse_options({"kafka.bootstrap.servers": "h:9093", "subscribe": "t",
                                 "kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/ca.pem",
                                 "kafka.ssl.keystore.location": "/me.pem"}, streaming=False)
        self.assertEqual((options.security.security_protocol, options.security.ssl_cafile,
                          options.security.ssl_certfile), ("SSL", "/ca.pem", "/me.pem"))
        self.assertEqual(parse_options({"kafka.bootstrap.servers": "h:9092", "subscribe": "t"},
                                       streaming=False).security.security_protocol, "PLAINTEXT")
        with self.assertRaises(ValueError):
            parse_options({"kafka.bootstrap.servers": "h", "subscribe": "t", "kafka.security.protocol": "TLS"},
                          streaming=False)
