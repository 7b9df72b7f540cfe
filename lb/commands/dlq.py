"""``lb dlq show`` and ``lb dlq redrive``: look into the dead-letter topic, send letters back.

``show`` reads LB_DLQ_TOPIC from the beginning and prints the count of letters
by error code and the last ``--last`` letters: code and detail, where the
original record sits (topic, partition, offset, key) and its record time in
UTC, then where the letter sits in the dead-letter topic (``--json``: one
document with the raw headers, times in epoch ms).

``redrive`` is for after a fix (a game added to LB_GAMES, a key id added to
LB_HMAC_KEYS, a larger max_score): it sends the original record of every
letter with the given codes back to LB_TOPIC, with its original key and
timestamp, so the running job judges it again under the new settings (a
letter that still fails comes back as a new letter). Each code remembers how
far it got in the consumer group ``lb-redrive.<dlq topic>.<CODE>``: running it
again sends only letters that arrived since. The position is recorded after
Kafka acknowledged the records, so a re-drive interrupted in between may
send some again: the job drops a copy it still remembers (LB_DEDUPE_HORIZON_S)
as a duplicate, and operators best and set are idempotent anyway; an incr game
could count such a copy twice.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from config.clients import probe_kafka, quiet_kafka_config, quiet_kafka_extra
from config.settings import Settings
from domain.validation import CODES as DEAD_LETTER_CODES
from jobs.dead_letter_reader import Letter, commit_ends, read_letters
from lb.argtypes import non_negative_int
from producer.score_producer import ScoreProducer

FLUSH_TIMEOUT_S = 120.0


def _letter_doc(letter: Letter) -> dict[str, Any]:
    return {
        "partition": letter.partition,
        "offset": letter.offset,
        "timestamp": letter.timestamp_ms,
        "key": None if letter.key is None else letter.key.decode("utf-8", "replace"),
        "bytes": 0 if letter.value is None else len(letter.value),
        "headers": letter.headers,
    }


def _show(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    probe_kafka(settings)
    letters, _ = read_letters(quiet_kafka_config(settings), settings.dlq_topic)
    if args.code:
        letters = [letter for letter in letters if letter.code in args.code]
    counts = Counter(letter.code for letter in letters)
    last = sorted(letters, key=lambda x: (x.timestamp_ms, x.partition, x.offset))[-args.last :]
    if args.last == 0:
        last = []
    if args.json:
        doc = {
            "topic": settings.dlq_topic,
            "total": len(letters),
            "byCode": dict(sorted(counts.items())),
            "last": [_letter_doc(letter) for letter in last],
        }
        print(json.dumps(doc))
        return 0
    print(f"{settings.dlq_topic}: {len(letters):,} dead letters")
    for code, count in sorted(counts.items()):
        print(f"  {code:<13} {count:>10,}")
    if any(_dev_signed(letter) for letter in letters):
        print(DEV_KEY_HINT)
    for letter in last:
        h = letter.headers
        print(
            f"\n{letter.code}: {h.get('error.detail', '')}\n"
            f"  the record at {h.get('source.topic')} partition {h.get('source.partition')} "
            f"offset {h.get('source.offset')}, key {_letter_doc(letter)['key']!r}, record time "
            f"{_when(h.get('source.timestamp'))}; this letter: {settings.dlq_topic} partition "
            f"{letter.partition} offset {letter.offset}"
        )
    return 0


#: Said under the counts when letters were signed with the built-in development key.
DEV_KEY_HINT = (
    "  UNKNOWN_KEY letters with keyId 'dev1' were signed with the built-in development key "
    "(LB_HMAC_KEYS unset when they were produced): keep dev1 in LB_HMAC_KEYS to accept them, "
    "then lb dlq redrive --code UNKNOWN_KEY"
)


def _dev_signed(letter: Letter) -> bool:
    return letter.code == "UNKNOWN_KEY" and "'dev1'" in letter.headers.get("error.detail", "")


def _when(epoch_ms: str | None) -> str:
    """A record timestamp (epoch ms) as UTC ISO time, the raw value beside it."""
    try:
        moment = datetime.fromtimestamp(int(epoch_ms or "") / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return str(epoch_ms)
    return f"{moment.isoformat(timespec='milliseconds')[:-6]}Z ({epoch_ms} ms)"


def redrive_group(settings: Settings, code: str) -> str:
    """The consumer group that remembers how far the re-drive of ``code`` got."""
    return f"lb-redrive.{settings.dlq_topic}.{code}"


def _redrive(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    probe_kafka(settings)
    config = quiet_kafka_config(settings)
    report: dict[str, Any] = {"topic": settings.topic, "dryRun": args.dry_run, "codes": {}}
    for code in dict.fromkeys(args.code):
        group = redrive_group(settings, code)
        letters, ends = read_letters(config, settings.dlq_topic, group=group, from_committed=True)
        chosen = [x for x in letters if x.code == code and x.value is not None]
        report["codes"][code] = len(chosen)
        if args.dry_run:
            continue
        if chosen:
            with ScoreProducer(
                settings.kafka_bootstrap, settings.topic, quiet_kafka_extra(settings)
            ) as producer:
                for letter in chosen:
                    assert letter.value is not None
                    producer.produce_record(letter.key or b"", letter.value, letter.timestamp_ms)
                producer.flush(FLUSH_TIMEOUT_S)
        commit_ends(config, settings.dlq_topic, group, ends)
    print(json.dumps(report))
    return 0


def _code(raw: str) -> str:
    code = raw.strip().upper()
    if code not in DEAD_LETTER_CODES:
        raise argparse.ArgumentTypeError(
            f"unknown code {raw!r}; one of {', '.join(DEAD_LETTER_CODES)}"
        )
    return code


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``lb dlq show`` and ``lb dlq redrive``."""
    dlq = subparsers.add_parser(
        "dlq",
        help="inspect the dead-letter topic; re-drive letters after a fix",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = dlq.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser(
        "show",
        help="letters by code and the last N letters with their headers",
        description="Read LB_DLQ_TOPIC from the beginning: count the letters by error code "
        "and print the newest ones with their headers.",
    )
    show.add_argument("--last", type=non_negative_int, default=10, help="newest letters to print")
    show.add_argument(
        "--code", type=_code, action="append", help="only this code (repeatable; default all)"
    )
    show.add_argument("--json", action="store_true", help="one JSON document")
    show.set_defaults(handler=_show)

    redrive = actions.add_parser(
        "redrive",
        help="send the letters of some codes back to LB_TOPIC (after fixing the cause)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    redrive.add_argument(
        "--code", type=_code, action="append", required=True, help="a code to re-drive (repeatable)"
    )
    redrive.add_argument(
        "--dry-run", action="store_true", help="count what would be sent; send and record nothing"
    )
    redrive.set_defaults(handler=_redrive)
