"""
What the SASL interop modules share: a broker on its own ZooKeeper with a
C{SASL_PLAINTEXT} listener and a PLAIN admin (L{SaslBrokerClass}), the
C{kafkatw} command line, and a Kerberos realm with its own KDC (L{KerberosRealm}).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, ClassFixture, ZooKeeperFixture, find_free_port

__all__ = ["PLAIN_JAAS", "ADMIN_PROPERTIES", "kafkatw", "SaslBrokerClass", "KerberosRealm", "kerberos_missing"]

#: The broker listener's PLAIN users (admin, carol) and its own client login (admin).
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_carol="carol-secret";')
#: The admin's C{--command-config} for kafkatw's tools.
ADMIN_PROPERTIES = ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="admin" password="admin-secret";\n')


def kafkatw(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run kafkatw's command line (C{python -m kafkatw.cli.main}), at most 90 s."""
    return subprocess.run([sys.executable, "-m", "kafkatw.cli.main", *args], capture_output=True, text=True,
                          timeout=90, env={**os.environ, **env} if env else None)


class SaslBrokerClass(ClassFixture, unittest.TestCase):
    """
    One broker on its own ZooKeeper for a test class: a C{SASL_PLAINTEXT}
    listener with L{PLAIN_JAAS} and C{mechanisms} (C{sasl.enabled.mechanisms};
    C{None}: the default), started with C{overrides} (and
    C{broker_env} in its environment); C{admin.properties} in the class's
    directory logs in as admin.  Subclasses hook in with C{prepare()}
    (before the broker starts, after ZooKeeper) and C{started()}; brokers
    they start go in C{more_brokers}, stopped first.
    """

    prefix = "kafkatw-sasl-"
    mechanisms: str | None = None
    overrides: dict[str, str] = {}
    broker_env: dict[str, str] = {}

    @classmethod
    def setUpClass(cls) -> None:
        cls.directory = tempfile.mkdtemp(prefix=cls.prefix)
        cls.zookeeper = ZooKeeperFixture(os.path.join(cls.directory, "zookeeper"))
        cls.connect = cls.zookeeper.start()
        try:
            cls.prepare()
            port = find_free_port()
            cls.broker = BrokerProcess(0, cls.connect + "/kafkatw", cls.directory, {
                "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
                **({"sasl.enabled.mechanisms": cls.mechanisms} if cls.mechanisms else {}),
                **cls.overrides,
            }, port=port, env=cls.broker_env).start()
            cls.bootstrap = cls.broker.bootstrap
            cls.admin_properties = os.path.join(cls.directory, "admin.properties")
            with open(cls.admin_properties, "w") as f:
                f.write(ADMIN_PROPERTIES)
            cls.started()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def prepare(cls) -> None:
        pass

    @classmethod
    def started(cls) -> None:
        pass

    @classmethod
    def tearDownClass(cls) -> None:
        for broker in [*getattr(cls, "more_brokers", []), getattr(cls, "broker", None)]:
            if broker is not None:
                broker.stop()
        cls.zookeeper.stop()
        cls.cleanup()
        shutil.rmtree(cls.directory, ignore_errors=True)

    @classmethod
    def cleanup(cls) -> None:
        """After the broker and ZooKeeper stopped, before the directory goes."""

    @classmethod
    def admin(cls, tool: str, *args: str) -> subprocess.CompletedProcess:
        """A kafkatw tool as admin; its failure is an C{AssertionError}."""
        result = kafkatw(tool, "--bootstrap-server", cls.bootstrap, "--command-config", cls.admin_properties, *args)
        assert result.returncode == 0, (tool, args, result.stdout, result.stderr)
        return result

    @classmethod
    def create(cls, *topics: str) -> None:
        for topic in topics:
            cls.admin("topics", "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")


#: MIT Kerberos' KDC and tools (Debian's krb5-kdc, krb5-admin-server, krb5-user).
KERBEROS_TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next((p for p in (f"/usr/sbin/{tool}", f"/sbin/{tool}") if os.access(p, os.X_OK)),
                                      None)


def kerberos_missing() -> str | None:
    """Why a real realm cannot be built here (a missing tool or python-gssapi), else C{None}."""
    missing = [tool for tool in KERBEROS_TOOLS if _which(tool) is None]
    if missing:
        return (f"MIT Kerberos tools missing: {', '.join(missing)} (apt-get install krb5-kdc krb5-admin-server "
                "krb5-user; scripts/setup.sh)")
    try:
        import gssapi  # noqa: F401
    except ImportError as e:
        return f"python-gssapi missing ({e}; pip install kafkatw[kerberos])"
    return None


class KerberosRealm:
    """
    A Kerberos realm of its own: C{krb5.conf} and C{kdc.conf} in
    C{directory}, a database made by C{kdb5_util create -s}, and MIT's
    C{krb5kdc} in the foreground on a free 127.0.0.1 port (TCP only).  No
    DNS: C{dns_lookup_kdc}, C{dns_lookup_realm}, C{rdns} and
    C{dns_canonicalize_hostname} are off, so a service on C{127.0.0.1} is
    C{<service>/127.0.0.1@REALM}.

    L{env} gives a process the realm (C{KRB5_CONFIG}) and a replay cache in
    C{directory}; L{add_principal} makes a principal with random keys and
    writes them to a keytab.
    """

    def __init__(self, directory: str, realm: str = "KAFKATW.TEST") -> None:
        self.directory = directory
        self.realm = realm
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.krb5_conf = os.path.join(directory, "krb5.conf")
        self.kdc_conf = os.path.join(directory, "kdc.conf")
        self.log = os.path.join(directory, "kdc.log")

    @property
    def env(self) -> dict[str, str]:
        return {"KRB5_CONFIG": self.krb5_conf, "KRB5_KDC_PROFILE": self.kdc_conf,
                "KRB5RCACHEDIR": os.path.join(self.directory, "rcache")}

    def _run(self, *command: str, timeout_s: float = 30.0) -> str:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **self.env})
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:3])} failed: {done.stderr or done.stdout}")
        return done.stdout

    def start(self, timeout_s: float = 20.0) -> "KerberosRealm":
        os.makedirs(os.path.join(self.directory, "rcache"), exist_ok=True)
        self.port = find_free_port()
        with open(self.krb5_conf, "w") as f:
            f.write(f"""[libdefaults]
    default_realm = {self.realm}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    rdns = false
    dns_canonicalize_hostname = false
    udp_preference_limit = 1
    ticket_lifetime = 1h
    forwardable = false

[realms]
    {self.realm} = {{
        kdc = 127.0.0.1:{self.port}
    }}

[domain_realm]
    127.0.0.1 = {self.realm}
""")
        with open(self.kdc_conf, "w") as f:
            f.write(f"""[kdcdefaults]
    kdc_ports = {self.port}
    kdc_tcp_listen = 127.0.0.1:{self.port}
    kdc_listen = 127.0.0.1:{self.port}

[realms]
    {self.realm} = {{
        database_name = {self.directory}/principal
        key_stash_file = {self.directory}/stash
        acl_file = {self.directory}/kadm5.acl
        kdc_tcp_listen = 127.0.0.1:{self.port}
        kdc_listen = 127.0.0.1:{self.port}
        max_life = 1h
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    }}

[logging]
    kdc = FILE:{self.log}
""")
        open(os.path.join(self.directory, "kadm5.acl"), "w").close()
        self._run(_which("kdb5_util") or "kdb5_util", "-r", self.realm, "create", "-s", "-P", "master-key-secret")
        with open(os.path.join(self.directory, "krb5kdc.err"), "wb") as errors:
            self.process = subprocess.Popen([_which("krb5kdc") or "krb5kdc", "-n", "-r", self.realm],
                                            env={**os.environ, **self.env}, stdout=subprocess.DEVNULL,
                                            stderr=errors, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    with open(os.path.join(self.directory, "krb5kdc.err"), errors="replace") as f:
                        raise RuntimeError(f"krb5kdc did not listen on 127.0.0.1:{self.port}: {f.read()}")
                time.sleep(0.1)

    def add_principal(self, principal: str, keytab: str | None = None) -> str:
        """
        Add C{principal} (random keys) and export its keys to C{keytab}
        (default: C{<directory>/<name>.keytab}); again for a principal that
        exists, new keys (the old keytab goes stale).

        @return: the keytab's path.
        """
        keytab = keytab or os.path.join(self.directory, principal.replace("/", "_") + ".keytab")
        kadmin = _which("kadmin.local") or "kadmin.local"
        listed = self._run(kadmin, "-r", self.realm, "-q", f"getprinc {principal}", timeout_s=30)
        if "Principal:" not in listed:
            self._run(kadmin, "-r", self.realm, "-q", f"addprinc -randkey {principal}")
        self._run(kadmin, "-r", self.realm, "-q", f"ktadd -k {keytab} {principal}")
        return keytab

    def kinit(self, principal: str, keytab: str, ccache: str) -> None:
        """Put C{principal}'s ticket-granting ticket in C{ccache} (C{FILE:...})."""
        self._run(_which("kinit") or "kinit", "-k", "-t", keytab, "-c", ccache, principal)

    def stop(self) -> None:
        """Stop the KDC (idempotent)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> "KerberosRealm":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
