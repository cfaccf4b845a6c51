"""
Integration tests of the broker's HTTP port with real ZooKeeper and broker
processes: C{/healthz} and C{/readyz} before and after the broker started,
C{kafka_consumergroup_lag} going to zero once a consumer caught up, and the
web console in a real headless chromium (selenium and Debian's
C{chromium-driver}, installed by scripts/setup.sh): its pages load, its charts
draw, its message browser shows the records the test produced, and a group's
lag goes to zero after its consumer catches up; in admin mode a topic is
created and a record produced through the page.  The console of a
three-broker cluster under a bounded load, opened on the broker that leads
nothing: its rates are the sums of the brokers', its totals those of the
brokers' own metrics, another broker's partition is browsed, the topic id is
Kafka's, empty tables say why, the status pill is readable; every page is
screenshot and each screenshot checked (size, not blank).

Set C{KAFKATW_CONSOLE_SCREENSHOTS} to a directory to keep the console's
screenshots (docs/console-*.png were taken so: console-group.png by
L{ConsoleBrowserTests}, the others by L{ClusterConsoleTests}).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition

from kafkatw.testing import BrokerProcess, find_free_port, running_cluster, wait_for

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def lag_metric(port: int, group: str, topic: str) -> float | None:
    _, text = http_get(f"http://127.0.0.1:{port}/metrics")
    found = re.search(rf'kafka_consumergroup_lag\{{consumergroup="{group}",partition="0",topic="{topic}"\}} (\S+)',
                      text)
    return None if found is None else float(found[1])


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(start, start + count):
        producer.produce(topic, key=f"order-{i}".encode(), value=json.dumps({"order": i, "item": "tea"}).encode(),
                         headers=[("source", b"test_console")])
    assert producer.flush(15) == 0


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> None:
    """Read C{count} records with a group member of C{group} and commit synchronously."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 60
    try:
        while read < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            read += 1
            if read == count:
                consumer.commit(message=message, asynchronous=False)
        assert read == count, f"read {read} of {count}"
    finally:
        consumer.close()


class MetricsBindAddressTests(unittest.TestCase):
    """
    C{metrics.bind.address} (issue 30): broker 1's HTTP port listens on
    127.0.0.2 only, and broker 0's console (on 127.0.0.1) reads its counters
    at the host broker 1 registered, as it would on another machine.
    """

    RECORDS = 25

    def test_the_console_reads_a_broker_bound_elsewhere(self) -> None:
        from kazoo.client import KazooClient

        from kafkatw.client import BlockingAdminClient, NewTopic

        with running_cluster(brokers=0) as cluster:
            connect = cluster.zookeeper.connect_string + "/kafkatw"
            base = tempfile.mkdtemp(prefix="kafkatw-metrics-bind-")
            self.addCleanup(shutil.rmtree, base, True)
            brokers = [BrokerProcess(0, connect, base, {"metrics.port": "0"}),
                       BrokerProcess(1, connect, base, {"metrics.port": "0", "metrics.bind.address": "127.0.0.2"})]
            for broker in brokers:
                broker.start()
                self.addCleanup(broker.stop)
            console_port = int(re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", brokers[0].log_text())[1])
            port = int(re.search(r"metrics at http://127\.0\.0\.2:(\d+)/metrics", brokers[1].log_text())[1])
            self.assertEqual(http_get(f"http://127.0.0.2:{port}/healthz"), (200, "ok\n"))
            self.assertEqual(http_get(f"http://127.0.0.1:{port}/healthz")[0], 0)  # not bound there

            zookeeper = KazooClient(hosts=connect, timeout=10)
            zookeeper.start(timeout=10)
            try:
                registration = json.loads(zookeeper.get("/brokers/ids/1")[0])
            finally:
                zookeeper.stop()
                zookeeper.close()
            self.assertEqual((registration["metrics_host"], registration["metrics_port"]), ("127.0.0.2", port))

            with BlockingAdminClient(brokers[0].bootstrap) as admin:
                admin.create_topics([NewTopic("bound", replica_assignment={0: [1]})])  # led by broker 1
            produce(brokers[0].bootstrap, "bound", 0, self.RECORDS)

            def broker_1_counters() -> dict | None:
                code, body = http_get(f"http://127.0.0.1:{console_port}/console/api/overview")
                if code != 200:
                    return None
                [row] = [b for b in json.loads(body)["brokers"] if b["id"] == 1]
                counters = row["counters"]
                return counters if counters and counters["messages_in"] == self.RECORDS else None

            counters = wait_for(broker_1_counters, 30, "broker 1's counters in broker 0's console")
            self.assertEqual(counters["topics"]["bound"]["messages_in"], self.RECORDS)


class HealthTests(unittest.TestCase):
    def test_healthz_and_readyz_before_and_after_start(self) -> None:
        port = find_free_port()
        with running_cluster(brokers=0) as cluster:
            zookeeper = cluster.zookeeper
            base = tempfile.mkdtemp(prefix="kafkatw-health-")
            self.addCleanup(shutil.rmtree, base, True)
            broker = BrokerProcess(0, zookeeper.connect_string + "/kafkatw", base,
                                   {"metrics.port": str(port), "zookeeper.connection.timeout.ms": "60000"})
            zookeeper.popen.send_signal(signal.SIGSTOP)  # no session until it is continued
            try:
                broker.popen = subprocess.Popen(broker.command(), stdin=subprocess.DEVNULL,
                                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
                self.addCleanup(broker.stop)
                wait_for(lambda: http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200, 30, "/healthz")
                self.assertEqual(http_get(f"http://127.0.0.1:{port}/healthz"), (200, "ok\n"))
                code, body = http_get(f"http://127.0.0.1:{port}/readyz")
                self.assertEqual(code, 503)
                self.assertIn("no ZooKeeper session", body)
                self.assertIn("the logs are not loaded yet", body)
                self.assertIn("broker 0 is not registered in /brokers/ids yet", body)
            finally:
                zookeeper.popen.send_signal(signal.SIGCONT)
            wait_for(lambda: http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200, 60, "/readyz 200")
            self.assertEqual(http_get(f"http://127.0.0.1:{port}/readyz"), (200, "ready\n"))


class LagTests(unittest.TestCase):
    def test_lag_goes_to_zero_when_the_consumer_catches_up(self) -> None:
        port = find_free_port()
        with running_cluster(brokers=1, overrides={"metrics.port": str(port), "metrics.lag.interval.ms": "300"}) \
                as [broker]:
            produce(broker.bootstrap, "lagged", 0, 30)
            consume_and_commit(broker.bootstrap, "lag-group", "lagged", 10)
            wait_for(lambda: lag_metric(port, "lag-group", "lagged") == 20, 30, "lag 20")
            _, text = http_get(f"http://127.0.0.1:{port}/metrics")
            self.assertIn('kafka_topic_partition_current_offset{partition="0",topic="lagged"} 30.0', text)
            self.assertIn('kafka_consumergroup_current_offset{consumergroup="lag-group",partition="0",topic="lagged"}'
                          ' 10.0', text)
            self.assertRegex(text, r'kafka_network_requestmetrics_totaltimems_count\{request="Produce"\} [1-9]')
            self.assertIn('kafka_server_brokertopicmetrics_messagesin_total{topic="lagged"} 30.0', text)
            consume_and_commit(broker.bootstrap, "lag-group", "lagged", 20)
            wait_for(lambda: lag_metric(port, "lag-group", "lagged") == 0, 30, "lag 0")

    def test_lag_exported_once_by_the_controller(self) -> None:
        """Two brokers: only the controller exports lag, with the other broker's partitions' end offsets."""
        with running_cluster(brokers=2, overrides={"metrics.port": "0", "metrics.lag.interval.ms": "300"}) \
                as brokers:
            ports = [int(re.search(r"metrics at http://127.0.0.1:(\d+)/metrics", b.log_text())[1]) for b in brokers]
            from kafkatw.client import BlockingAdminClient, NewTopic

            with BlockingAdminClient(brokers[0].bootstrap) as admin:  # one partition led by each broker
                admin.create_topics([NewTopic("spread", replica_assignment={0: [0], 1: [1]})])
            producer = Producer({"bootstrap.servers": brokers[0].bootstrap})
            for i in range(20):
                producer.produce("spread", value=b"v", partition=i % 2)
            self.assertEqual(producer.flush(15), 0)
            consumer = Consumer({"bootstrap.servers": brokers[0].bootstrap, "group.id": "spread-group"})
            consumer.commit(offsets=[TopicPartition("spread", 0, 4), TopicPartition("spread", 1, 6)],
                            asynchronous=False)
            consumer.close()

            def exported() -> list:
                found = []
                for port in ports:
                    _, text = http_get(f"http://127.0.0.1:{port}/metrics")
                    found.append(sorted(re.findall(r'kafka_consumergroup_lag\{consumergroup="spread-group",'
                                                   r'partition="(\d)",topic="spread"\} (\S+)', text)))
                return found

            wait_for(lambda: sorted(exported()) == [[], [("0", "6.0"), ("1", "4.0")]], 30,
                     "lag of both partitions on exactly one broker")

            # a live member, described by both brokers' consoles (one asks the other, its coordinator)
            member = Consumer({"bootstrap.servers": brokers[0].bootstrap, "group.id": "live-group",
                               "client.id": "live-client", "auto.offset.reset": "earliest"})
            self.addCleanup(member.close)
            member.subscribe(["spread"])
            deadline = time.monotonic() + 60
            while len(member.assignment()) < 2 and time.monotonic() < deadline:
                member.poll(0.2)
            member.commit(offsets=[TopicPartition("spread", 0, 1), TopicPartition("spread", 1, 1)],
                          asynchronous=False)

            def described(port: int) -> object:
                code, body = http_get(f"http://127.0.0.1:{port}/console/api/group?id=live-group")
                if code != 200:
                    return None
                group = json.loads(body)
                return group["state"], [(m["client_id"], m["assignment"]) for m in group["members"]]

            for port in ports:
                wait_for(lambda port=port: described(port) == ("Stable", [("live-client", ["spread-0", "spread-1"])]),
                         30, f"the member described by the console at {port}")

    def test_lag_of_a_zookeeper_group(self) -> None:
        """The paper's ZooKeeper-coordinated group: offsets in /consumers, lag on the same metric."""
        from kafkatw.client import BlockingZookeeperConsumerGroup

        port = find_free_port()
        with running_cluster(brokers=1, overrides={"metrics.port": str(port), "metrics.lag.interval.ms": "300"}) \
                as cluster:
            [broker] = cluster
            produce(broker.bootstrap, "paper", 0, 12)
            with BlockingZookeeperConsumerGroup("paper-group", ["paper"], zookeeper_connect=broker.zookeeper_connect,
                                                bootstrap_servers=broker.bootstrap, auto_offset_reset="smallest",
                                                enable_auto_commit=False) as group:
                records = []
                deadline = time.monotonic() + 30
                while len(records) < 5 and time.monotonic() < deadline:
                    records += group.poll(500, max_records=5 - len(records))
                self.assertEqual(len(records), 5)
                group.commit({("paper", 0): 5})
                wait_for(lambda: lag_metric(port, "paper-group", "paper") == 7, 30, "lag 7")
                _, body = http_get(f"http://127.0.0.1:{port}/console/api/groups")
                self.assertIn({"group": "paper-group", "kind": "zookeeper", "lag": 7, "partitions": 1,
                               "coordinator": None}, json.loads(body)["groups"])
                while len(records) < 12 and time.monotonic() < deadline + 30:
                    records += group.poll(500)
                self.assertEqual(len(records), 12)
                group.commit({("paper", 0): 12})
                wait_for(lambda: lag_metric(port, "paper-group", "paper") == 0, 30, "lag 0")


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret" user_bob="bob-secret";')


class ConsoleSecurityTests(unittest.TestCase):
    def test_basic_authentication_and_describe_acls(self) -> None:
        """Under an authorizer: HTTP basic against the SASL users; alice sees the topic she may Describe."""
        import base64

        from kafkatw.client import BlockingAdminClient, NewTopic
        from kafkatw.client.security import SecurityConfig
        from kafkatw.security.acl import (
            AccessControlEntry,
            AclBinding,
            AclOperation,
            AclPermissionType,
            ResourcePattern,
            ResourceType,
        )

        http_port, port = find_free_port(), find_free_port()
        overrides = {"metrics.port": str(http_port), "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                     "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                     "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                     "super.users": "User:broker"}
        with running_cluster(brokers=0) as cluster:
            base = tempfile.mkdtemp(prefix="kafkatw-console-security-")
            self.addCleanup(shutil.rmtree, base, True)
            broker = BrokerProcess(0, cluster.zookeeper.connect_string + "/kafkatw", base, overrides, port=port)
            self.addCleanup(broker.stop)
            broker.start()
            self.assertIn("web console: HTTP basic authentication against the SASL users of listener"
                          " SASL_PLAINTEXT", broker.log_text())
            security = SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                      sasl_plain_username="broker", sasl_plain_password="broker-secret")
            with BlockingAdminClient(broker.bootstrap, security=security) as admin:
                admin.create_topics([NewTopic("visible", 1, 1), NewTopic("hidden", 1, 1)])
                admin.create_acls([AclBinding(ResourcePattern(ResourceType.TOPIC, "visible"),
                                              AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE,
                                                                 AclPermissionType.ALLOW))])

            def get(path: str, user: str | None, password: str = "") -> tuple[int, str]:
                request = urllib.request.Request(f"http://127.0.0.1:{http_port}/{path}")
                if user is not None:
                    token = base64.b64encode(f"{user}:{password}".encode()).decode()
                    request.add_header("Authorization", f"Basic {token}")
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        return response.status, response.read().decode()
                except urllib.error.HTTPError as e:
                    return e.code, e.read().decode()

            self.assertEqual(get("console/", None)[0], 401)
            self.assertEqual(get("console/api/topics", None)[0], 401)
            self.assertEqual(get("console/api/topics", "alice", "wrong")[0], 401)
            self.assertEqual(get("metrics", None)[0], 200)
            self.assertEqual(get("readyz", None), (200, "ready\n"))
            code, page = get("console/", "alice", "alice-secret")
            self.assertEqual(code, 200)
            self.assertIn("kafkatw console", page)

            def names(user: str, password: str) -> list[str]:
                code, body = get("console/api/topics", user, password)
                self.assertEqual(code, 200)
                return [t["name"] for t in json.loads(body)["topics"]]

            wait_for(lambda: names("alice", "alice-secret") == ["visible"], 30, "alice sees the topic she may Describe")
            self.assertEqual(names("bob", "bob-secret"), [])
            self.assertEqual(names("broker", "broker-secret"), ["hidden", "visible"])  # a super user
            code, body = get("console/api/messages?topic=visible&partition=0", "alice", "alice-secret")
            self.assertEqual((code, json.loads(body)["error"]), (400, "User:alice may not Read topic visible"))


class _Browser:
    """A headless chromium (selenium, Debian's chromium and chromedriver) and the helpers of the console's tests."""

    def setUp(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,1000"):
            options.add_argument(argument)
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.addCleanup(self.driver.quit)
        self.screenshots = os.environ.get("KAFKATW_CONSOLE_SCREENSHOTS")

    def screenshot(self, name: str) -> None:
        if self.screenshots:
            self.driver.save_screenshot(os.path.join(self.screenshots, f"console-{name}.png"))

    def open(self, url: str, page: str) -> None:
        self.driver.execute_script("if (document.body) delete document.body.dataset.loaded;")
        self.driver.get(url)
        self.wait_js(f"return document.body.dataset.page === '{page}' && !!document.body.dataset.loaded", page)

    def wait_js(self, script: str, what: str, timeout_s: float = 30) -> object:
        try:
            return wait_for(lambda: self.driver.execute_script(script), timeout_s, what)
        except AssertionError:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; the page shows: "
                                 f"{self.driver.execute_script('return location.hash')} "
                                 f"{self.driver.find_element('tag name', 'main').text[:500]!r}") from None

    def chart_points(self, canvas_id: str) -> list:
        data = self.driver.execute_script(f"var c = document.getElementById('{canvas_id}');"
                                          " return c && c.dataset.points;")
        return json.loads(data) if data else []

    def canvas_has_ink(self, canvas_id: str) -> bool:
        """Whether the canvas has pixels other than white (lines, grid, labels)."""
        return self.driver.execute_script(
            f"var c = document.getElementById('{canvas_id}'); if (!c) return false;"
            " var d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            " for (var i = 0; i < d.length; i += 4) {"
            "   if (d[i] < 200 || d[i + 1] < 200 || d[i + 2] < 200) return true; }"
            " return false;")


@unittest.skipIf(CHROMIUM is None or CHROMEDRIVER is None,
                 "chromium and chromedriver are not installed (scripts/setup.sh installs Debian's chromium and"
                 " chromium-driver)")
class ConsoleBrowserTests(_Browser, unittest.TestCase):
    def test_console_pages(self) -> None:
        port = find_free_port()
        with running_cluster(brokers=1, overrides={"metrics.port": str(port), "metrics.lag.interval.ms": "500"}) \
                as [broker]:
            base = f"http://127.0.0.1:{port}/console/"
            produce(broker.bootstrap, "orders", 0, 40)
            consume_and_commit(broker.bootstrap, "billing", "orders", 15)

            # overview: health, counts, and the produce rate chart once records flow
            self.open(base + "#/overview", "overview")
            for round_ in range(4):  # records flow for a few of the console's 2 s refreshes
                produce(broker.bootstrap, "orders", 40 + 10 * round_, 10)
                time.sleep(1.5)
            self.wait_js("var c = document.getElementById('cluster-messages');"
                         " if (!c || !c.dataset.points) return false; var p = JSON.parse(c.dataset.points)[0].points;"
                         " return p.length >= 3 && p.some(function (x) { return x[1] > 0; });",
                         "a non-zero produce rate drawn")
            self.assertTrue(self.canvas_has_ink("cluster-messages"))
            self.assertTrue(self.canvas_has_ink("cluster-bytes"))
            text = self.driver.find_element("tag name", "main").text
            self.assertIn("ready", text)
            self.assertIn("Under-replicated", text)
            self.screenshot("overview")

            # topics and a topic
            self.open(base + "#/topics", "topics")
            self.assertIn("orders", self.driver.find_element("tag name", "table").text)
            self.assertEqual(self.driver.find_elements("css selector", "form.admin"), [])  # read-only
            self.open(base + "#/topic/orders", "topic")
            topic_text = self.driver.find_element("tag name", "main").text
            self.assertIn("cleanup.policy", topic_text)
            self.assertIn("80", topic_text)  # the high watermark
            self.screenshot("topic")

            # the message browser shows what was produced
            self.open(base + "#/messages?topic=orders&partition=0&offset=5", "messages")
            self.wait_js("return document.querySelectorAll('.record-offset').length > 0", "records")
            offsets = [e.text for e in self.driver.find_elements("css selector", ".record-offset")]
            self.assertEqual(offsets[:3], ["5", "6", "7"])
            values = self.driver.find_elements("css selector", ".record-value")
            self.assertIn('"order": 5', values[0].text)
            self.assertIn("order-5", self.driver.find_element("id", "records").text)
            self.assertIn("source: test_console", self.driver.find_element("id", "records").text)
            self.screenshot("messages")

            # the group: lag 65, then 0 once the consumer caught up, drawn over time
            self.open(base + "#/groups", "groups")
            self.wait_js("return document.body.innerText.indexOf('billing') >= 0", "the group listed")
            self.open(base + "#/group/billing", "group")
            self.wait_js("var e = document.getElementById('group-total-lag'); return e && e.textContent === '65';",
                         "lag 65")
            consume_and_commit(broker.bootstrap, "billing", "orders", 65)  # from its committed 15
            self.wait_js("var e = document.getElementById('group-total-lag'); return e && e.textContent === '0';",
                         "lag 0", timeout_s=60)
            self.wait_js("var c = document.getElementById('lag-chart'); if (!c || !c.dataset.points) return false;"
                         " var p = JSON.parse(c.dataset.points)[0].points;"
                         " return p.length > 1 && p[p.length - 1][1] === 0"
                         "   && p.some(function (x) { return x[1] > 0; });",
                         "the lag chart from 65 to 0")
            self.assertTrue(self.canvas_has_ink("lag-chart"))
            self.screenshot("group")

    def test_admin_mode_creates_a_topic_and_produces(self) -> None:
        """metrics.console.admin.enable: create a topic and produce a record through the page, then browse it."""
        port = find_free_port()
        with running_cluster(brokers=1, overrides={"metrics.port": str(port),
                                                   "metrics.console.admin.enable": "true"}):
            base = f"http://127.0.0.1:{port}/console/"
            request = urllib.request.Request(base + "api/admin/create-topic", data=b'{"name": "forged"}',
                                             headers={"Content-Type": "application/json"}, method="POST")
            with self.assertRaises(urllib.error.HTTPError) as refused:  # a cross-site form cannot set the header
                urllib.request.urlopen(request, timeout=10)
            self.assertEqual(refused.exception.code, 403)

            self.open(base + "#/topics", "topics")
            form = self.driver.find_element("id", "create-topic")
            form.find_element("name", "name").send_keys("made-in-browser")
            form.find_element("name", "partitions").send_keys("1")
            form.find_element("name", "replication_factor").send_keys("1")
            form.find_element("tag name", "button").click()
            self.wait_js("var n = document.getElementById('admin-notice'); return document.body.dataset.page === "
                         "'topic' && !!n && n.textContent === 'Created topic made-in-browser.';", "the topic created")
            self.wait_js("return !!document.getElementById('produce')", "the topic page with its produce form")
            form = self.driver.find_element("id", "produce")
            form.find_element("name", "key").send_keys("greeting")
            form.find_element("name", "value").send_keys("hello from the console")
            form.find_element("tag name", "button").click()
            self.wait_js("var n = document.getElementById('admin-notice'); return !!n && n.textContent === "
                         "'Produced to made-in-browser-0 at offset 0.';", "the record produced")
            self.screenshot("admin")

            self.open(base + "#/messages?topic=made-in-browser&partition=0", "messages")
            self.wait_js("return document.querySelectorAll('.record-offset').length > 0", "records")
            records = self.driver.find_element("id", "records").text
            self.assertIn("greeting", records)
            self.assertIn("hello from the console", records)


def messages_in_total(port: int) -> int:
    """A broker's C{kafka_server_brokertopicmetrics_messagesin_total} (all topics), from its own C{/metrics}."""
    _, text = http_get(f"http://127.0.0.1:{port}/metrics")
    return int(float(re.search(r"^kafka_server_brokertopicmetrics_messagesin_total (\S+)$", text, re.M)[1]))


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    import struct

    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG 2's contrast ratio of two CSS C{rgb(r, g, b)} colours."""
    def luminance(css: str) -> float:
        channels = [int(c) / 255 for c in re.findall(r"\d+", css)[:3]]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@unittest.skipIf(CHROMIUM is None or CHROMEDRIVER is None,
                 "chromium and chromedriver are not installed (scripts/setup.sh installs Debian's chromium and"
                 " chromium-driver)")
class ClusterConsoleTests(_Browser, unittest.TestCase):
    """
    The console of a three-broker cluster under a bounded load, opened on
    the broker that leads nothing: its numbers are the sums of the brokers'
    own metrics, each page is screenshot (to C{KAFKATW_CONSOLE_SCREENSHOTS}
    or a temporary directory) and each screenshot checked.
    """

    LOAD_RECORDS = 1600   # records produced in all
    LOAD_BATCH = 20       # records every 0.1 s: the load lasts about 8 s, the console's 2 s samples see it
    LOAD_LIMIT_S = 30.0   # the load stops by then whatever happened

    def setUp(self) -> None:
        super().setUp()
        if self.screenshots:
            os.makedirs(self.screenshots, exist_ok=True)
        else:
            self.screenshots = tempfile.mkdtemp(prefix="kafkatw-console-screenshots-")
            self.addCleanup(shutil.rmtree, self.screenshots, True)
        self.taken: list[str] = []

    def screenshot(self, name: str) -> None:
        path = os.path.join(self.screenshots, f"console-cluster-{name}.png")
        self.assertTrue(self.driver.save_screenshot(path))
        self.taken.append(path)
        with open(path, "rb") as f:
            data = f.read()
        width, height, ratio = self.driver.execute_script(
            "return [window.innerWidth, window.innerHeight, window.devicePixelRatio];")
        self.assertEqual(png_size(data), (round(width * ratio), round(height * ratio)), name)
        # not blank: the browser decodes the PNG and counts its colours and the pixels unlike the first
        import base64

        colours, unlike = self.driver.execute_async_script(
            "var done = arguments[1], img = new Image();"
            "img.onload = function () { var c = document.createElement('canvas'); c.width = img.width;"
            "  c.height = img.height; var x = c.getContext('2d'); x.drawImage(img, 0, 0);"
            "  var d = x.getImageData(0, 0, c.width, c.height).data, seen = {}, n = 0, unlike = 0;"
            "  for (var i = 0; i < d.length; i += 4) { var k = d[i] + ',' + d[i + 1] + ',' + d[i + 2];"
            "    if (!seen[k]) { seen[k] = 1; n++; }"
            "    if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2]) unlike++; }"
            "  done([n, unlike / (d.length / 4)]); };"
            "img.onerror = function () { done([0, 0]); };"
            "img.src = 'data:image/png;base64,' + arguments[0];", base64.b64encode(data).decode("ascii"))
        self.assertGreater(colours, 20, f"{name}: a blank screenshot")
        self.assertGreater(unlike, 0.05, f"{name}: a blank screenshot")

    def test_every_page_of_a_three_broker_cluster(self) -> None:
        started = time.monotonic()
        import threading

        from kafkatw.client import BlockingAdminClient, NewTopic
        from kafkatw.web.console import format_topic_id

        with running_cluster(brokers=3, overrides={"metrics.port": "0", "metrics.lag.interval.ms": "500"}) \
                as brokers:
            ports = [int(re.search(r"metrics at http://127.0.0.1:(\d+)/metrics", b.log_text())[1]) for b in brokers]
            with BlockingAdminClient(brokers[0].bootstrap) as admin:
                # broker 2 leads nothing and holds no replica; "quiet" stays empty
                admin.create_topics([NewTopic("load", replica_assignment={0: [0, 1], 1: [1, 0]}),
                                     NewTopic("quiet", replica_assignment={0: [0]})])
                topic_id = admin.describe_topics(["load"])["load"].topic_id
            base = f"http://127.0.0.1:{ports[2]}/console/"

            produced: list[int] = []

            def load() -> None:
                producer = Producer({"bootstrap.servers": brokers[0].bootstrap, "linger.ms": 5})
                deadline = time.monotonic() + self.LOAD_LIMIT_S
                sent = 0
                while sent < self.LOAD_RECORDS and time.monotonic() < deadline:
                    for i in range(sent, sent + self.LOAD_BATCH):
                        producer.produce("load", key=b"k%d" % i, value=json.dumps({"n": i}).encode(),
                                         partition=i % 2)
                    sent += self.LOAD_BATCH
                    producer.poll(0)
                    time.sleep(0.1)
                assert producer.flush(15) == 0
                produced.append(sent)

            loader = threading.Thread(target=load, daemon=True)
            self.open(base + "#/overview", "overview")
            loader.start()
            try:
                # while the load runs: the cluster's rate is the sum of the brokers', broker 2's is 0
                read = ("var c = document.getElementById('cluster-messages');"
                        " var p = c && c.dataset.points ? JSON.parse(c.dataset.points)[0].points : [];"
                        " var rows = Array.prototype.map.call(document.querySelectorAll('.broker-records-in-rate'),"
                        "   function (e) { return Number(e.dataset.rate); });"
                        " return p.length && p[p.length - 1][1] > 0 && rows.length === 3 ? [p[p.length - 1][1], rows]"
                        "   : null;")
                cluster_rate, broker_rates = self.wait_js(read, "a non-zero cluster rate", timeout_s=20)
                self.assertAlmostEqual(cluster_rate, sum(broker_rates), places=6)
                self.assertEqual(broker_rates[2], 0)
                self.assertGreater(broker_rates[0] + broker_rates[1], 0)
                self.screenshot("overview-under-load")
            finally:
                loader.join(self.LOAD_LIMIT_S + 20)
            self.assertEqual(produced, [self.LOAD_RECORDS])

            # after the load: the totals the page shows are the brokers' metrics and their sum
            metrics = [messages_in_total(port) for port in ports]
            self.assertEqual((sum(metrics), metrics[2]), (self.LOAD_RECORDS, 0))
            self.wait_js(f"var e = document.getElementById('cluster-records-in-total');"
                         f" return !!e && e.textContent === '{sum(metrics)}';", "the cluster's total")
            rows = [e.text for e in self.driver.find_elements("css selector", ".broker-records-in-total")]
            self.assertEqual(rows, [str(m) for m in metrics])
            status = self.driver.find_element("id", "status")
            self.assertEqual(status.text, "ready")
            self.assertGreaterEqual(contrast_ratio(status.value_of_css_property("color"),
                                                   status.value_of_css_property("background-color")), 4.5)
            self.screenshot("overview")

            # each broker's page: its own metric; broker 2's partitions table says why it is empty
            for broker_id in (0, 2):
                self.open(base + f"#/broker/{broker_id}", "broker")
                self.wait_js(f"var e = document.getElementById('broker-records-in-total');"
                             f" return !!e && e.textContent === '{metrics[broker_id]}';", f"broker {broker_id}'s total")
                self.screenshot(f"broker-{broker_id}")
            self.assertIn("Broker 2 holds no replica of any topic",
                          self.driver.find_element("css selector", "td.empty").text)

            # topics, and the topic id as Kafka's tools print it
            self.open(base + "#/topics", "topics")
            self.screenshot("topics")
            self.open(base + "#/topic/load", "topic")
            self.wait_js("return !!document.getElementById('topic-id')", "the topic id")
            self.assertEqual(self.driver.find_element("id", "topic-id").text, format_topic_id(topic_id))
            self.assertRegex(format_topic_id(topic_id), r"^[A-Za-z0-9_-]{22}$")
            self.screenshot("topic")

            # messages of a partition led by broker 1, from broker 2's console; an empty partition says why
            self.open(base + "#/messages?topic=load&partition=1&offset=11", "messages")
            self.wait_js("return document.querySelectorAll('.record-offset').length > 0", "records")
            offsets = [e.text for e in self.driver.find_elements("css selector", ".record-offset")]
            self.assertEqual(offsets[:2], ["11", "12"])
            self.assertIn('"n": 23', self.driver.find_element("id", "records").text)  # offset 11 of partition 1
            self.assertEqual(self.driver.find_element("id", "read-from").text, "broker 1")
            self.screenshot("messages")
            self.open(base + "#/messages?topic=quiet&partition=0", "messages")
            self.wait_js("var e = document.querySelector('td.empty'); return !!e &&"
                         " e.textContent.indexOf('The partition holds no records') === 0", "the empty partition")

            # groups: one committed, its page
            consumer = Consumer({"bootstrap.servers": brokers[0].bootstrap, "group.id": "readers"})
            consumer.commit(offsets=[TopicPartition("load", 0, 100), TopicPartition("load", 1, 300)],
                            asynchronous=False)
            consumer.close()
            self.open(base + "#/groups", "groups")
            self.wait_js("return document.body.innerText.indexOf('readers') >= 0", "the group listed")
            self.screenshot("groups")
            self.open(base + "#/group/readers", "group")
            lag = self.LOAD_RECORDS - 400
            self.wait_js(f"var e = document.getElementById('group-total-lag'); return e && e.textContent === '{lag}';",
                         f"lag {lag}")
            self.assertIn("No members", self.driver.find_element("css selector", "td.empty").text)
            self.screenshot("group")
        self.assertEqual(len(self.taken), 9)
        self.assertLess(time.monotonic() - started, 120, "the test's wall time")
