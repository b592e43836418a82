"""Shared fixtures: the embedded Kafka broker (tests/kafka_fixtures.py) and Flink helpers
(tests/flink_fixtures.py) are loaded as plugins so every test module can use them."""

pytest_plugins = ["tests.kafka_fixtures", "tests.flink_fixtures"]
