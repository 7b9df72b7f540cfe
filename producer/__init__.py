"""Writing score events to Kafka: the idempotent producer and the deterministic load generator.

``producer.score_producer`` is what ``lb produce``, the HTTP intake, the
dead-letter re-drive and the benchmarks write through; ``producer.loadgen``
makes the signed records (with their expected outcomes) that the demo, the
tests and the benchmarks send.
"""
