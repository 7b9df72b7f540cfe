"""``bench.common.Scratch`` against the real Kafka: a run leaves none of its topics behind."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient

from bench.common import Scratch, base_settings, run_id
from config.settings import profiles_topic_for
from producer.score_producer import ensure_topic
from tests.poll import poll


def test_a_run_deletes_its_topic_and_the_profiles_topics_a_job_made_beside_it(
    services: dict[str, Any],
) -> None:
    settings = base_settings()
    with Scratch(settings, f"bench-scratch-{run_id()}") as scratch:
        topic = scratch.topic(f"{scratch.prefix}-t", 1)
        # What `lb run` creates beside its score topic.
        profiles = profiles_topic_for(topic)
        for name in (profiles, f"{profiles}.dlq"):
            ensure_topic(settings.kafka_bootstrap, name, 1, settings.kafka_extra, {})
        admin = AdminClient(settings.kafka_config())
        made = set(admin.list_topics(timeout=10).topics)
        assert {topic, profiles, f"{profiles}.dlq"} <= made

    def mine() -> set[str]:
        return {t for t in admin.list_topics(timeout=10).topics if t.startswith(scratch.prefix)}

    poll("the run's topics deleted", lambda: not mine(), 30)
