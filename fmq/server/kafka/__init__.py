"""Kafka's wire protocol as a second front door to the same :class:`~fmq.engine.broker.Broker`
(docs/kafka.md): a Kafka topic is an FMQ topic, a partition is a queue, a Kafka offset is the
queue offset; key / value / headers are key / body / properties.

Layers: :mod:`.framing` reads and writes size-prefixed frames and request/response headers;
:mod:`.entities` turns plain values into the generated request and response entities of
``kio`` (built from Kafka's own JSON schemas); :mod:`.apis` is the table of implemented APIs
and their version ranges, and :mod:`.dispatch` answers each request with its handler or with
the protocol's own error; one module per API family (:mod:`.api_versions`, :mod:`.metadata`,
:mod:`.produce`, :mod:`.fetch`, :mod:`.list_offsets`, :mod:`.topics`); :mod:`.records` and
:mod:`.compression` are the record batch v2 codec; :mod:`.mapping` maps Kafka records to FMQ
messages and back; :mod:`.connection` serves one socket and :mod:`.listener` the port.
"""

from fmq.server.kafka.listener import KafkaListener, open_kafka_door

__all__ = ["KafkaListener", "open_kafka_door"]
