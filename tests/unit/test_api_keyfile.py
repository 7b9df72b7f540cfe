"""The server API key file: parsing, hashing, and re-reading on change (api/auth/keyfile.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from api.auth.keyfile import KEY_PREFIX, ApiKeys, key_line, new_key, parse_key_file
from domain.errors import ConfigError


def test_a_line_holds_the_name_and_the_keys_sha256_never_the_key() -> None:
    key = new_key()
    line = key_line("backend-eu", key)
    assert key.startswith(KEY_PREFIX) and key not in line
    assert line == f"backend-eu sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    assert parse_key_file(f"# servers\n{line}  # since May\n\n") == {line[-64:]: "backend-eu"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("backend " + "ab" * 32, "line 1: expected 'NAME sha256:"),
        ("backend sha256:" + "AB" * 32, "line 1: expected"),
        ("backend sha256:" + "ab" * 31, "line 1: expected"),
        ("bad/name sha256:" + "ab" * 32, "line 1: expected"),
        ("a sha256:" + "ab" * 32 + "\na sha256:" + "cd" * 32, "line 2: the name 'a' appears twice"),
        ("a sha256:" + "ab" * 32 + "\nb sha256:" + "ab" * 32, "line 2: the same key appears twice"),
    ],
)
def test_a_bad_line_is_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_key_file(text)


def test_an_edit_takes_effect_at_the_next_check_and_a_broken_file_keeps_the_last_keys(
    tmp_path: Path,
) -> None:
    now = [100.0]
    old, new = new_key(), new_key()
    path = tmp_path / "keys"
    path.write_text(key_line("old", old) + "\n")
    keys = ApiKeys(path, every_s=1.0, clock=lambda: now[0])
    assert keys.name_of(old) == "old" and keys.name_of(new) is None

    path.write_text(key_line("old", old) + "\n" + key_line("new", new) + "\n")
    assert keys.name_of(new) is None  # not checked again yet
    now[0] += 1.0
    assert keys.name_of(new) == "new" and keys.name_of(old) == "old"

    path.write_text(key_line("new", new) + "\n")  # the old key is revoked
    os.utime(path, ns=(10**18, 10**18))  # a different mtime even within one clock tick
    now[0] += 1.0
    assert keys.name_of(old) is None and keys.name_of(new) == "new"

    path.write_text("garbage\n")
    now[0] += 1.0
    assert keys.name_of(new) == "new"


def test_an_unreadable_file_at_start_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        ApiKeys(tmp_path / "missing")
