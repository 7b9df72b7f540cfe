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


def test_no_collection_runs_inside_a_paused_block_and_its_cycles_go_after_it() -> None:
    out = _in_fresh_interpreter(
        """
        import gc, weakref
        from config.heap import collector_paused
        gc.set_threshold(700, 10, 10)  # CPython's: a collection every 700 allocations
        runs = []
        gc.callbacks.append(lambda phase, info: runs.append(phase) if phase == "start" else None)
        class Node:
            pass
        refs = []
        with collector_paused():
            for _ in range(20_000):  # many thresholds' worth of cycles
                a, b = Node(), Node()
                a.other, b.other = b, a
                refs.append(weakref.ref(a))
                del a, b
            inside = len(runs)
            kept = sum(ref() is not None for ref in refs)
        after = [[] for _ in range(2_000)]  # the next allocations start a collection
        print(inside, kept == len(refs), len(runs) > 0, sum(ref() is None for ref in refs) > 0,
              gc.isenabled())
        """
    )
    assert out == "0 True True True True"


def test_a_paused_block_restores_the_collector_after_an_error_and_nests() -> None:
    out = _in_fresh_interpreter(
        """
        import gc
        from config.heap import collector_paused
        try:
            with collector_paused():
                raise ValueError
        except ValueError:
            pass
        after_error = gc.isenabled()
        with collector_paused():
            with collector_paused():
                pass
            inner_left = gc.isenabled()
        gc.disable()
        with collector_paused():
            pass
        print(after_error, inner_left, gc.isenabled())
        """
    )
    assert out == "True False False"


def test_the_board_sink_the_replays_and_the_validate_step_run_paused() -> None:
    # Each entry point's own work, seen from inside: the collector is off there
    # and back on when it returns (a decorator form for the validate step).
    out = _in_fresh_interpreter(
        """
        import gc
        from config.heap import collector_paused
        from domain.records import RecordBatch
        from jobs.replay import apply_round
        from sinks.boards import BoardPartition
        seen = {}
        sink = object.__new__(BoardPartition)
        sink._write = lambda items: seen.setdefault("sink", gc.isenabled())
        sink.write_batch([])
        class Validator:
            def check_batch(self, batch):
                seen.setdefault("replay", gc.isenabled())
                return type("Valid", (), {"accepted": (), "last_offset": 0})()
        apply_round([RecordBatch("t", 0, ())], Validator(), None, None, None, "ns")
        validate = collector_paused()(lambda batch: seen.setdefault("validate", gc.isenabled()))
        validate(None)
        print(seen, gc.isenabled())
        """
    )
    assert out == "{'sink': False, 'replay': False, 'validate': False} True"
