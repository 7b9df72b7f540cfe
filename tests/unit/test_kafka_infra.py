"""The local broker's set-up helpers (no broker needed)."""

from __future__ import annotations

import base64

from infra.kafka import new_cluster_id


def test_kraft_cluster_ids_never_look_like_an_option() -> None:
    """1 in 64 random ids began with '-', and the storage tool refused it."""
    for _ in range(2000):
        cluster_id = new_cluster_id()
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
