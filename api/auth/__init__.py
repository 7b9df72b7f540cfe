"""Who is calling: player bearer tokens (JWT), server API keys, and what each may do.

:mod:`api.auth.policy` is pure (route classes, the decision for one request);
:mod:`api.auth.tokens` verifies player tokens, :mod:`api.auth.keyfile` server
keys; :mod:`api.auth.guard` is the ASGI middleware that applies them (and the
rate limits of :mod:`api.limits`) before any route runs.
"""
