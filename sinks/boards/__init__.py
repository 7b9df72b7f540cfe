"""The board sink: accepted batches -> Redis boards, exactly once per effect.

==========================  ====================================================
:mod:`.sink`                the Bytewax output: one :class:`BoardPartition` per worker
:mod:`.partition`           rounds of batches, one round trip each, writes in flight
:mod:`.healing`             what the worker knows Redis holds; healing lost writes
:mod:`.resume`              where a partition resumes after a restart
:mod:`.store`               the Redis commands: batched reads, atomic group writes
:mod:`.reads`               a round trip's read commands and their reply parser
:mod:`.encoding`            a group write as the script's arguments; its answers
``apply_group.lua``         the atomic group write itself
==========================  ====================================================
"""

from sinks.boards.encoding import refused_at
from sinks.boards.partition import BoardPartition
from sinks.boards.resume import ResumeFromRedis, read_resume_state
from sinks.boards.sink import RedisBoardSink
from sinks.boards.store import NO_RETRY, RedisBoardStore, connect

__all__ = [
    "NO_RETRY",
    "BoardPartition",
    "RedisBoardSink",
    "RedisBoardStore",
    "ResumeFromRedis",
    "connect",
    "read_resume_state",
    "refused_at",
]
