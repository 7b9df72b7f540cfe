"""``python -m bench --render``: the published run's JSON renders every section again."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from bench import freshness
from bench import ingest as ingest_module
from bench.__main__ import main
from bench.common import ROOT

PUBLISHED = ROOT / "docs" / "benchmarks.json"


def _section(text: str, name: str) -> str:
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    assert begin in text and end in text, name
    return text.split(begin, 1)[1].split(end, 1)[0]


def test_the_published_json_renders_every_section_and_the_chart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LB_BENCH_DOC", raising=False)
    environment = dict(os.environ)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        assert main(["--quick", "--render", str(PUBLISHED), "--out", str(tmp_path)]) == 0
    finally:
        signal.signal(signal.SIGTERM, handler)
    # The scratch doc is handed to the benchmarks it starts, not to this process.
    assert dict(os.environ) == environment

    saved = json.loads(PUBLISHED.read_text())
    doc = (tmp_path / "BENCHMARKS.md").read_text()
    assert (tmp_path / "benchmarks.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = _section(doc, "bench.summary")
    assert f"({saved['run']['minutes']:.0f} min)" in summary
    ingest = saved["benchmarks"]["ingest"][0]
    steady = f"{ingest['jobs']['1']['steady_eps']:,.0f} events/s"
    assert steady in summary
    assert f"| {ingest['jobs']['1']['steady_eps']:,.0f} |" in _section(doc, "bench.ingest")
    for summary in saved["benchmarks"].get("ingest", []):
        workload = summary["args"].get("workload", "zipf")
        assert "Machine:" in _section(doc, ingest_module.section_of(workload))
    for summary in saved["benchmarks"].get("freshness", []):
        assert "Machine:" in _section(doc, freshness.section_of(summary["args"]))
    for name in ("reads", "rebuild"):
        if saved["benchmarks"].get(name):
            assert "Machine:" in _section(doc, f"bench.{name}")
