"""Benchmarks of the leaderboard job (scripts, not tests).

Run from the repository root with the project's virtualenv::

    .venv/bin/python -m bench.ingest      # throughput: lb run --until-end vs baselines
    .venv/bin/python -m bench.freshness   # produce-to-visible latency at a steady rate

Each script uses its own throwaway topics, Redis namespace and state
directory, deletes them afterwards, prints progress on stderr and a JSON
summary on stdout, and replaces its own section of ``docs/BENCHMARKS.md``.
"""
