"""Each job process's own HTTP endpoint: ``/metrics``, ``/livez``, ``/readyz``; and discovery.

Why not Bytewax's dataflow API server (``BYTEWAX_DATAFLOW_API_ENABLED``)? In
0.21 it binds ``0.0.0.0`` on one port read from the environment, so with
``--processes 2`` on one host the second process panics on the busy port, and
it has no health endpoints. Here each process serves ``prometheus_client``'s
own WSGI app (the exposition is the library's) on ``LB_METRICS_HOST``, port
``LB_METRICS_PORT + process id``, next to the two health routes.

Discovery: a serving process writes ``<LB_STATE_DIR>/run/<role>-<pid>.json``
in Prometheus' ``file_sd`` format (targets and labels), removed at exit. The
generated Prometheus config reads those files, and ``lb status`` lists them
(skipping, and deleting, files whose process is gone).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from domain.errors import ConfigError
from infra.process import pid_alive

#: (why not live or None, why not ready: empty when ready)
HealthCheck = Callable[[], tuple[str | None, list[str]]]

StartResponse = Callable[..., Any]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    """No access log: a scrape every second would drown the job's own lines."""

    def log_message(self, format: str, *args: Any) -> None:
        return


def wsgi_app(
    health: HealthCheck, about: Mapping[str, object] | None = None
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """``/livez`` and ``/readyz`` (200 or 503 with the reason), everything else the exposition.

    ``about`` (e.g. the process index) is added to both health answers.
    """
    exposition = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/livez", "/readyz"):
            not_live, not_ready = health()
            if path == "/livez":
                reasons = [not_live] if not_live else []
            else:
                reasons = ([not_live] if not_live else []) + not_ready
            body = json.dumps({"ok": not reasons, "reasons": reasons, **(about or {})}).encode()
            status = "200 OK" if not reasons else "503 Service Unavailable"
            start_response(status, [("Content-Type", "application/json")])
            return [body]
        return exposition(environ, start_response)  # type: ignore[no-any-return]

    return app


def serve(
    host: str, port: int, health: HealthCheck, about: Mapping[str, object] | None = None
) -> tuple[WSGIServer, int]:
    """Serve in a daemon thread; the bound port (``port`` 0: a free one).

    A busy port is a person's mistake (another job on the same
    ``LB_METRICS_PORT``): :class:`ConfigError` naming the setting.
    """
    try:
        server = make_server(
            host, port, wsgi_app(health, about), server_class=_Server, handler_class=_Quiet
        )
    except OSError as exc:
        raise ConfigError(
            f"LB_METRICS_PORT: cannot listen on {host}:{port} ({exc.strerror}); another job "
            "may use it: set LB_METRICS_PORT to a free base port, 0 for any free port, or off"
        ) from exc
    threading.Thread(target=server.serve_forever, name="lb-metrics", daemon=True).start()
    return server, server.server_port


def run_dir(state_dir: Path) -> Path:
    """Where serving processes register themselves."""
    return state_dir / "run"


def register(state_dir: Path, role: str, host: str, port: int, labels: dict[str, str]) -> Path:
    """Write this process's ``file_sd`` entry; it is removed when the process exits normally."""
    where = run_dir(state_dir)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{role}-{os.getpid()}.json"
    entry = [
        {
            "targets": [f"{host}:{port}"],
            "labels": {"role": role, "pid": str(os.getpid()), **labels},
        }
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry))
    tmp.replace(path)  # Prometheus never reads half a file
    atexit.register(_unregister, path)
    return path


def _unregister(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def registered(state_dir: Path, role: str | None = None) -> list[dict[str, Any]]:
    """Live registered processes (``role``: ``job``, ``api`` or all), oldest pid first.

    A file whose process is gone (killed, ``os._exit``) is deleted on the way.
    """
    out = []
    where = run_dir(state_dir)
    if not where.is_dir():
        return []
    for path in sorted(where.glob("*.json")):
        try:
            entry = json.loads(path.read_text())[0]
            pid = int(entry["labels"]["pid"])
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
        if not pid_alive(pid):
            _unregister(path)
            continue
        if role is None or entry["labels"].get("role") == role:
            out.append(
                {
                    "pid": pid,
                    "address": entry["targets"][0],
                    "metrics": f"http://{entry['targets'][0]}/metrics",
                    **{k: v for k, v in entry["labels"].items() if k != "pid"},
                }
            )
    return sorted(out, key=lambda e: (e.get("role", ""), e["pid"]))
