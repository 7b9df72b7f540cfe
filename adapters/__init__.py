"""How this project talks to Kafka and Redis: one adapter each, used by every edge and test.

``adapters.kafka``: partitions, offsets, reading ranges to their end, headers,
the throttled client error log, the log reader of every replay.
``adapters.redis``: the client types, one bytes/str decode policy, Lua scripts
called by SHA (loaded again on ``NOSCRIPT``).
"""
