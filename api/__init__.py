"""The HTTP API: the same reads as the Python API and the CLI, plus signed score intake.

``api.http`` holds a transport-free request handler (:class:`api.http.Api`)
and a standard-library ``ThreadingHTTPServer`` around it, bound to the
loopback interface unless told otherwise. ``docs/API.md`` is the reference.
"""
