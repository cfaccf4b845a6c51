from twisted.application.service import ServiceMaker

kafkatw = ServiceMaker(
    "kafkatw", "kafkatw.tap", "A Kafka-protocol broker (kafkatw): partitioned logs coordinated by ZooKeeper.", "kafkatw"
)
