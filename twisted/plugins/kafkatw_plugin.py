from twisted.application.service import ServiceMaker

kafkatw = ServiceMaker("kafkatw", "kafkatw.tap", "A Kafka-protocol broker (kafkatw).", "kafkatw")
