"""The HTTP API: the same reads as the Python API and the CLI, live pushes, signed score intake.

An ASGI app on FastAPI (:mod:`api.app`) served by uvicorn (:mod:`api.server`),
bound to the loopback interface unless told otherwise. Routes in
:mod:`api.routes` (request/response) and :mod:`api.push` (WebSocket and SSE,
fed by :mod:`api.live`); models in :mod:`api.models`; errors in
:mod:`api.errors`; intake in :mod:`api.intake`; the live page in ``static/``.
``docs/API.md`` is the reference.
"""
