"""Start a job process's telemetry: logs, hooks, the metrics/health server, its registration.

Called by the flow factory in every Bytewax process (``lb run`` starts one per
``--processes``). The process id and the recovery directory come from the
process's own ``bytewax.run`` command line (``-i``, ``-r``), so a process
started by hand gets the same port rule: ``LB_METRICS_PORT + process id``.
"""

from __future__ import annotations

import sys

from config.settings import Settings
from telemetry import derive, hooks, logs, server

_serving: list[str] = []


def start(settings: Settings, flow: str, namespace: str | None = None) -> str | None:
    """Logs configured, hooks on, server up; the metrics URL (``None`` with metrics off).

    A flow writing another ``namespace`` than ``LB_NAMESPACE`` (``lb rebuild``'s
    staging one) always takes a free port: it runs beside the live job, which
    holds the configured one.
    Once per process: a second flow built in the same process reuses it.
    """
    logs.configure(settings.log_format)
    if settings.metrics_port is None:
        return None
    if _serving:
        return _serving[0]
    staging = namespace is not None and namespace != settings.namespace
    process, recovery = derive.process_args(sys.argv)
    processes = max(1, len(derive.cluster_args(sys.argv)))
    hooks.enable(
        recovery,
        ready_retry_s=settings.ready_retry_s,
        stall_s=max(60.0, 6.0 * settings.heal_check_s),
        process=process or 0,
        processes=processes,
    )
    base = 0 if staging else settings.metrics_port
    host = settings.metrics_host
    about = {"process": process or 0, "processes": processes}
    _, port = server.serve(host, derive.metrics_port(base, process), hooks.health_now, about)
    server.register(
        settings.state_dir,
        "job",
        host,
        port,
        {
            "flow": flow,
            "process": str(process or 0),
            "processes": str(processes),
            "topic": settings.topic,
            "namespace": namespace or settings.namespace,
            "kind": "rebuild" if staging else "live",
        },
    )
    url = f"http://{host}:{port}/metrics"
    _serving.append(url)
    return url
