"""Pure leaderboard logic.

Nothing in this package performs I/O or imports bytewax, redis or
confluent_kafka (``tests/unit/test_domain_purity.py`` enforces it), so every
rule here is testable without services and replays deterministically.
"""
