"""bench.dedupe's summary: medians per layout, ratios to full ids, the section's rows."""

from __future__ import annotations

from typing import Any

from bench.common import machine
from bench.dedupe import COMMANDS, markdown, summarize


def _pass(job: float, redis_us: float, per_id: float) -> dict[str, Any]:
    return {
        "job_cpu_us_per_event": job,
        "redis_cpu_us_per_event": redis_us,
        "commands_per_event": dict.fromkeys(COMMANDS, 0.5),
        "memory": {
            "keys": 16,
            "ids": 1000,
            "encodings": {"hashtable": 16},
            "bytes_per_id_used_memory": per_id,
            "bytes_per_id_memory_usage": per_id - 1,
        },
    }


def test_medians_and_ratios_to_full_ids() -> None:
    runs = {
        "full ids": [_pass(10, 5, 90), _pass(12, 6, 88), _pass(11, 50, 89)],
        "fingerprints": [_pass(11, 6, 12), _pass(13, 6, 13), _pass(12, 7, 12)],
    }
    out = summarize(runs)
    assert out["full ids"]["job_cpu_us_per_event"] == 11
    assert out["full ids"]["redis_cpu_us_per_event"] == 6  # the outlier does not move it
    assert out["fingerprints"]["bytes_per_id_used_memory"] == 12
    assert out["fingerprints"]["job_cpu_ratio"] == round(12 / 11, 2)
    assert out["fingerprints"]["redis_cpu_ratio"] == 1.0
    for name, split in (("full ids", 0), ("fingerprints", 262_144)):
        out[name]["split"] = split
    section = markdown(
        {"machine": machine(), "events": 1000, "rounds": 3, "accepted": 990, "layouts": out}
    )
    assert "| fingerprints | 262,144 | 16 | 12.0 | 11.0 | 12.0 (1.09x) | 6.0 (1.0x) |" in section
    assert "| full ids | - |" in section
