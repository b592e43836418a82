"""Kafka and Avro connectors: schemas, the embedded broker launcher, producers and consumers
(``privstream.connectors``)."""
