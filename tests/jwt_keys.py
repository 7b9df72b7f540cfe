"""Real signing keys and tokens for the tests of player tokens (made fresh, never stored)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

AUDIENCE = "leaderboard-api"
ISSUER = "https://auth.example.test"
SECRET = "hs256-test-secret-0123456789abcdef0123"


def claims(sub: str, **over: Any) -> dict[str, Any]:
    """Valid claims for ``sub`` (an hour to live) with ``over`` applied."""
    now = int(time.time())
    return {"sub": sub, "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 3600, **over}


def hs256(sub: str, secret: str = SECRET, **over: Any) -> str:
    return jwt.encode(claims(sub, **over), secret, algorithm="HS256")


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def jwk(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    """The public JWK of ``key`` under ``kid``."""
    algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    public = jwt.get_algorithm_by_name(algorithm).to_jwk(key.public_key())
    entry: dict[str, Any] = json.loads(public)
    return {**entry, "kid": kid, "alg": algorithm, "use": "sig"}


def write_jwks(path: Path, *entries: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"keys": list(entries)}))
    return path


def signed(
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, sub: str, kid: str | None, **over: Any
) -> str:
    algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    headers = {"kid": kid} if kid else None
    return jwt.encode(claims(sub, **over), key, algorithm=algorithm, headers=headers)
