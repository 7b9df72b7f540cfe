"""Test vectors of the score-event wire contract (one JSON file per schema version)."""
