"""Player tokens: every claim checked, the key chosen by the key, not by the token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import jwt
import pytest

from api.auth.tokens import PlayerTokens, TokenError, parse_token_keys
from domain.errors import ConfigError
from tests.jwt_keys import (
    AUDIENCE,
    ISSUER,
    SECRET,
    claims,
    ec_key,
    hs256,
    jwk,
    public_pem,
    rsa_key,
    signed,
    write_jwks,
)


def tokens(**over: object) -> PlayerTokens:
    options: dict[str, object] = {"audience": AUDIENCE, "issuer": ISSUER, "secret": SECRET}
    options.update(over)
    return PlayerTokens(**options)


def test_a_valid_hs256_token_names_its_player() -> None:
    assert tokens().subject(hs256("ada")) == "ada"


#: Each token is made when its case runs, not when the tests are collected: the suite
#: may reach this file many minutes after collection, past the default ``exp``.
BAD_TOKENS: list[tuple[Callable[[], str], str]] = [
    (lambda: hs256("ada", exp=int(time.time()) - 120), "expired"),
    (lambda: hs256("ada", nbf=int(time.time()) + 600), "not valid yet"),
    (lambda: hs256("ada", aud="another-api"), r"not for this API \(aud\)"),
    (lambda: hs256("ada", iss="https://evil.example"), r"another issuer \(iss\)"),
    (lambda: hs256("ada", secret="another-secret-of-the-same-length-00000"), "signature"),
    (lambda: jwt.encode({k: v for k, v in claims("ada").items() if k != "exp"}, SECRET), "no exp"),
    (lambda: jwt.encode({k: v for k, v in claims("ada").items() if k != "aud"}, SECRET), "no aud"),
    (lambda: jwt.encode({k: v for k, v in claims("ada").items() if k != "sub"}, SECRET), "no sub"),
    (lambda: "not-a-token", "malformed"),
]


@pytest.mark.parametrize(("make", "reason"), BAD_TOKENS, ids=[why for _, why in BAD_TOKENS])
def test_a_bad_token_says_why(make: Callable[[], str], reason: str) -> None:
    with pytest.raises(TokenError, match=reason):
        tokens().subject(make())


def test_alg_none_is_refused() -> None:
    unsigned = jwt.encode(claims("ada"), None, algorithm="none")
    with pytest.raises(TokenError, match="no key verifies 'none'"):
        tokens().subject(unsigned)


def _hs256_by_hand(secret: bytes, payload: dict[str, object]) -> str:
    """An HS256 token made without PyJWT (which refuses a PEM key as an HMAC secret)."""

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    signing_input = b64(b'{"alg":"HS256","typ":"JWT"}') + b"." + b64(json.dumps(payload).encode())
    mac = hmac.new(secret, signing_input, hashlib.sha256).digest()
    return (signing_input + b"." + b64(mac)).decode()


def test_rs256_and_es256_from_a_jwks_file_picked_by_kid(tmp_path: Path) -> None:
    rsa_private, ec_private = rsa_key(), ec_key()
    keys = write_jwks(tmp_path / "jwks.json", jwk(rsa_private, "r1"), jwk(ec_private, "e1"))
    verifier = tokens(secret=None, keys_file=keys)
    assert verifier.subject(signed(rsa_private, "ada", "r1")) == "ada"
    assert verifier.subject(signed(ec_private, "bob", "e1")) == "bob"
    with pytest.raises(TokenError, match="not a known key"):
        verifier.subject(signed(rsa_key(), "ada", "r9"))
    with pytest.raises(TokenError, match="signature"):
        verifier.subject(signed(rsa_key(), "ada", "r1"))  # another key under a known kid
    with pytest.raises(TokenError, match="algorithm"):
        verifier.subject(signed(ec_private, "ada", "r1"))  # ES256 under the RSA key's kid
    with pytest.raises(TokenError):
        verifier.subject(hs256("ada"))  # no secret configured here


def test_a_pem_key_file_and_the_confusion_attack(tmp_path: Path) -> None:
    private = rsa_key()
    pem = public_pem(private)
    (tmp_path / "key.pem").write_bytes(pem)
    verifier = tokens(secret=None, keys_file=tmp_path / "key.pem")
    assert verifier.subject(signed(private, "ada", None)) == "ada"
    # HS256 whose "secret" is the public key anyone can read: the confusion attack.
    with pytest.raises(TokenError, match="no key verifies 'HS256'"):
        verifier.subject(_hs256_by_hand(pem, claims("mallory")))


def test_removing_a_key_from_the_file_ends_its_tokens_even_when_remembered(
    tmp_path: Path,
) -> None:
    first, second = ec_key(), ec_key()
    path = write_jwks(tmp_path / "jwks.json", jwk(first, "k1"), jwk(second, "k2"))
    verifier = tokens(secret=None, keys_file=path, reload_s=0.0)
    token = signed(first, "ada", "k1")
    assert verifier.subject(token) == "ada"
    write_jwks(path, jwk(second, "k2"))
    os.utime(path, ns=(10**18, 10**18))
    with pytest.raises(TokenError, match="not a known key"):
        verifier.subject(token)


def test_a_remembered_token_still_expires() -> None:
    now = [time.time()]
    verifier = tokens(clock=lambda: now[0], leeway_s=0)
    token = hs256("ada", exp=int(now[0]) + 60)
    assert verifier.subject(token) == "ada"
    now[0] += 61
    with pytest.raises(TokenError, match="expired"):
        verifier.subject(token)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('{"keys": []}', "at least one key"),
        ('{"keys": [{"kty": "oct", "k": "c2VjcmV0", "alg": "HS512"}]}', "HS512"),
        ("-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n", "neither"),
    ],
)
def test_a_bad_key_file_is_a_config_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_token_keys(text)
