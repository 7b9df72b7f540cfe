"""The collector settings a streaming process runs with (config/heap.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _in_fresh_interpreter(code: str) -> str:
    # gc settings are process-wide: never change the test runner's own.
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_tuned_process_collects_the_young_generation_less_often_and_freezes_startup() -> None:
    out = _in_fresh_interpreter(
        """
        import gc
        from config.heap import STREAM_YOUNG_THRESHOLD, tune_for_streaming
        before = gc.get_threshold()
        tune_for_streaming()
        after = gc.get_threshold()
        print(after[0] == STREAM_YOUNG_THRESHOLD > before[0], after[1:] == before[1:],
              gc.get_freeze_count() > 1000)
        """
    )
    assert out == "True True True"


def test_cycles_made_after_tuning_are_still_collected() -> None:
    out = _in_fresh_interpreter(
        """
        import gc, weakref
        from config.heap import tune_for_streaming
        tune_for_streaming()
        class Node:
            pass
        refs = []
        for _ in range(200_000):  # several young collections' worth of allocations
            a, b = Node(), Node()
            a.other, b.other = b, a
            refs.append(weakref.ref(a))
            del a, b
        print(sum(ref() is None for ref in refs) > 100_000)
        """
    )
    assert out == "True"
