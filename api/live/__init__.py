"""Live pushes: follow the job's change streams and fan changes out to subscribers.

One module per job:

- :mod:`api.live.hub`: the Redis Streams fan-out (one ``XREAD`` loop per
  watched stream, bounded per-subscriber queues, replay on reconnect);
- :mod:`api.live.reads`: the shared-read cache (one page or rank read per
  question and batch of changes, whatever the number of subscribers);
- :mod:`api.live.messages`: stream entries in, JSON messages and frames out;
- :mod:`api.live.relevance`: which changes a subscriber must hear about
  (pure rules, order-aware in one place);
- :mod:`api.live.throttle`: a subscriber's at-most-one-push-per-interval state;
- :mod:`api.live.subscription`: one subscriber's loop, tying them together.

The push endpoints that carry the messages are in :mod:`api.push`.
"""

from api.live.hub import MAX_PENDING, MAX_REPLAY, ChangeHub, Listener, Subscriber
from api.live.messages import Outgoing, StreamChange, outgoing, parse_entry, stream_id
from api.live.reads import SharedReads, TopRead
from api.live.subscription import LiveQuery, Subscription

#: How long one message may take to leave before the subscriber counts as stuck.
SEND_TIMEOUT_S = 5.0

__all__ = [
    "MAX_PENDING",
    "MAX_REPLAY",
    "SEND_TIMEOUT_S",
    "ChangeHub",
    "Listener",
    "LiveQuery",
    "Outgoing",
    "SharedReads",
    "StreamChange",
    "Subscriber",
    "Subscription",
    "TopRead",
    "outgoing",
    "parse_entry",
    "stream_id",
]
