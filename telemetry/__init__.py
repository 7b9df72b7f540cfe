"""Operability: metrics, health, discovery and logs of the job and the API (issue 13).

Split like the rest of the project: :mod:`telemetry.derive` holds the pure
arithmetic (lag, readiness, rates, weighted histogram buckets, argv and
exposition parsing) with no I/O; :mod:`telemetry.hooks` is the only module the
hot path calls, once per batch; :mod:`telemetry.metrics` wires both to
``prometheus_client``; :mod:`telemetry.server` serves ``/metrics``, ``/livez``
and ``/readyz`` and registers the process for discovery;
:mod:`telemetry.prometheus` runs Debian's Prometheus server on loopback.
"""
