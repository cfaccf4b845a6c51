kafkatw's clients take a security configuration (SecurityConfig) under kafka-python's names and read Kafka's client.properties; Kafka's JAAS strings are parsed.
