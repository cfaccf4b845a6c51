"""
The client's security settings and Kafka's JAAS strings.
"""

from twisted.trial.unittest import SynchronousTestCase

from kafkatw.client.security import SecurityConfig
from kafkatw.security.jaas import parse_jaas_config

PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
         'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


class JaasTests(SynchronousTestCase):
    def test_plain_listener_users(self) -> None:
        jaas = parse_jaas_config(PLAIN)
        self.assertEqual(jaas.login_module, "org.apache.kafka.common.security.plain.PlainLoginModule")
        self.assertEqual(jaas.control_flag, "required")
        self.assertEqual((jaas.username, jaas.password), ("admin", "admin-secret"))
        self.assertEqual(jaas.users(), {"admin": "admin-secret", "alice": "alice-secret"})

    def test_escaped_quote_and_bare_value(self) -> None:
        jaas = parse_jaas_config('ScramLoginModule required username=alice password="a\\"b";')
        self.assertEqual((jaas.username, jaas.password), ("alice", 'a"b'))

    def test_errors_do_not_quote_the_text(self) -> None:
        for bad in ('PlainLoginModule username="u" password="hunter2";',
                    'PlainLoginModule maybe password="hunter2";',
                    'PlainLoginModule required password="hunter2"; extra'):
            with self.assertRaises(ValueError) as caught:
                parse_jaas_config(bad)
            self.assertNotIn("hunter2", str(caught.exception))


class SecurityConfigTests(SynchronousTestCase):
    def test_defaults_are_plaintext(self) -> None:
        config = SecurityConfig()
        self.assertEqual(config.security_protocol, "PLAINTEXT")
        self.assertFalse(config.tls)
        self.assertFalse(config.sasl)

    def test_from_properties(self) -> None:
        config = SecurityConfig.from_properties({
            "security.protocol": "sasl_ssl",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": "ca.pem",
            "ssl.endpoint.identification.algorithm": "",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": PLAIN,
        })
        self.assertTrue(config.tls and config.sasl)
        self.assertEqual(config.ssl_cafile, "ca.pem")
        self.assertFalse(config.ssl_check_hostname)
        self.assertEqual(config.sasl_mechanism, "SCRAM-SHA-512")
        self.assertEqual((config.sasl_plain_username, config.sasl_plain_password), ("admin", "admin-secret"))
        self.assertNotIn("admin-secret", repr(config))

    def test_from_kwargs_takes_kafka_python_names(self) -> None:
        config = SecurityConfig.from_kwargs({"security_protocol": "SSL", "ssl_cafile": "ca.pem",
                                             "bootstrap_servers": "x:1", "ssl_password": None})
        self.assertEqual((config.security_protocol, config.ssl_cafile), ("SSL", "ca.pem"))

    def test_bad_values(self) -> None:
        with self.assertRaises(ValueError):
            SecurityConfig(security_protocol="TLS")
        with self.assertRaises(ValueError):
            SecurityConfig(security_protocol="SASL_SSL", sasl_mechanism="DIGEST-MD5")
        with self.assertRaises(ValueError):
            SecurityConfig.from_properties({"ssl.truststore.type": "JKS", "ssl.truststore.location": "x.jks"})
