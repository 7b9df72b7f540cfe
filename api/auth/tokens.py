"""Player bearer tokens: JSON Web Tokens verified with PyJWT.

A token is accepted when its signature verifies with a configured key, its
``exp`` is in the future and its ``nbf`` (when present) in the past (both with
``LB_JWT_LEEWAY_S`` of skew), its ``aud`` includes ``LB_JWT_AUDIENCE`` and its
``iss`` equals ``LB_JWT_ISSUER``; its ``sub`` is the player it speaks for.

Keys: HS256 with the shared secret ``LB_JWT_SECRET``, and/or ``LB_JWT_KEYS``,
either one PEM public key (RSA: RS256, EC P-256: ES256) or a JWKS document
(``{"keys": [...]}``, RSA, EC and ``oct`` keys, picked by the token's ``kid``).
The algorithm is the key's, never the token's choice: a token whose header
names another algorithm than its key's is refused (no ``none``, no HS256
signed with a public key). The key file is re-read when it changes, like the
API key file, so a JWKS key is rotated by publishing the new key next to the
old one and removing the old one once its tokens have expired.

Verified tokens are remembered (their subject and validity period) so a
client's next request with the same token costs a dictionary look-up instead of
a signature check; ``exp``/``nbf`` are still checked on every use.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from api.auth.keyfile import RELOAD_S, WatchedFile
from domain.errors import ConfigError, LeaderboardError

#: The signature algorithms player tokens may use.
ALGORITHMS = frozenset({"HS256", "RS256", "ES256"})
#: Verified tokens remembered per process (the cache is emptied when full).
CACHE_SIZE = 10_000


class TokenError(LeaderboardError):
    """A player token that is missing, malformed, expired, forged or not for this API."""


@dataclass(frozen=True)
class TokenKeys:
    """The public keys of ``LB_JWT_KEYS``: by ``kid`` (a JWKS), or one PEM key."""

    by_kid: dict[str, jwt.PyJWK] = field(default_factory=dict)
    single: jwt.PyJWK | None = None


def _pem_key(text: str) -> jwt.PyJWK:
    try:
        public = serialization.load_pem_public_key(text.encode())
    except ValueError as exc:
        raise ConfigError("LB_JWT_KEYS is neither a JWKS document nor a PEM public key") from exc
    if isinstance(public, rsa.RSAPublicKey):
        algorithm = "RS256"
    elif isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp256r1":
        algorithm = "ES256"
    else:
        raise ConfigError("LB_JWT_KEYS: the PEM key must be RSA (RS256) or EC P-256 (ES256)")
    jwk = json.loads(jwt.get_algorithm_by_name(algorithm).to_jwk(public))
    return jwt.PyJWK(jwk, algorithm)


def _jwks(document: Any) -> TokenKeys:
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list) or not keys:
        raise ConfigError('LB_JWT_KEYS: a JWKS document is {"keys": [...]} with at least one key')
    by_kid: dict[str, jwt.PyJWK] = {}
    for number, entry in enumerate(keys, start=1):
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"LB_JWT_KEYS: key {number} is not usable: {exc}") from exc
        if key.algorithm_name not in ALGORITHMS:
            raise ConfigError(
                f"LB_JWT_KEYS: key {number} is for {key.algorithm_name}; "
                f"allowed: {', '.join(sorted(ALGORITHMS))}"
            )
        kid = entry.get("kid")
        if not isinstance(kid, str) or not kid:
            if len(keys) > 1:
                raise ConfigError(f"LB_JWT_KEYS: key {number} has no kid (needed with several)")
            return TokenKeys(single=key)
        if kid in by_kid:
            raise ConfigError(f"LB_JWT_KEYS: the kid {kid!r} appears twice")
        by_kid[kid] = key
    return TokenKeys(by_kid=by_kid)


def parse_token_keys(text: str) -> TokenKeys:
    """The keys of a JWKS document or of one PEM public key; ConfigError otherwise."""
    if text.lstrip().startswith("{"):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"LB_JWT_KEYS is not valid JSON: {exc}") from exc
        return _jwks(document)
    return TokenKeys(single=_pem_key(text))


_CLAIM_ERRORS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.ImmatureSignatureError, "the token is not valid yet (nbf)"),
    (jwt.InvalidAudienceError, "the token is not for this API (aud)"),
    (jwt.InvalidIssuerError, "the token is from another issuer (iss)"),
    (jwt.InvalidSignatureError, "the token's signature does not verify"),
    (jwt.InvalidAlgorithmError, "the token's algorithm is not its key's"),
)


def _reason(exc: jwt.InvalidTokenError) -> str:
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the token has no {exc.claim} claim"
    for kind, reason in _CLAIM_ERRORS:
        if isinstance(exc, kind):
            return reason
    return "the token is malformed"


@dataclass(frozen=True)
class _Verified:
    subject: str
    exp: float
    nbf: float


class PlayerTokens:
    """Verifies player tokens against the configured keys, audience and issuer.

    ``clock`` (epoch seconds) judges remembered tokens; PyJWT reads the wall
    clock itself for the first check of each token.
    """

    def __init__(
        self,
        *,
        audience: str,
        issuer: str,
        secret: str | None = None,
        keys_file: Path | None = None,
        leeway_s: int = 30,
        clock: Callable[[], float] = time.time,
        reload_s: float = RELOAD_S,
    ) -> None:
        if secret is None and keys_file is None:
            raise ConfigError("player tokens need LB_JWT_SECRET or LB_JWT_KEYS")
        self._audience = audience
        self._issuer = issuer
        self._secret = jwt.PyJWK({"kty": "oct", "k": _b64(secret)}, "HS256") if secret else None
        self._keys = (
            WatchedFile(keys_file, parse_token_keys, every_s=reload_s) if keys_file else None
        )
        self._leeway_s = leeway_s
        self._clock = clock
        self._cache: dict[str, _Verified] = {}
        self._generation = 0

    def subject(self, token: str) -> str:
        """The player a valid token speaks for; TokenError saying why it is not valid."""
        if self._keys is not None:
            self._keys.current()
            if self._keys.generation != self._generation:
                self._generation = self._keys.generation
                self._cache.clear()  # a removed key must not live on in the cache
        now = self._clock()
        known = self._cache.get(token)
        if known is not None:
            if now >= known.exp + self._leeway_s:
                raise TokenError("the token has expired")
            if now < known.nbf - self._leeway_s:
                raise TokenError("the token is not valid yet (nbf)")
            return known.subject
        claims = self._verify(token)
        verified = _Verified(str(claims["sub"]), float(claims["exp"]), float(claims.get("nbf", 0)))
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[token] = verified
        return verified.subject

    def _key_for(self, header: dict[str, Any]) -> jwt.PyJWK:
        alg, kid = header.get("alg"), header.get("kid")
        keys = self._keys.current() if self._keys is not None else TokenKeys()
        if isinstance(kid, str) and kid in keys.by_kid:
            return keys.by_kid[kid]
        if alg == "HS256" and self._secret is not None:
            return self._secret
        if keys.single is not None and alg == keys.single.algorithm_name:
            return keys.single
        if kid is not None and keys.by_kid:
            raise TokenError(f"the token's key id {str(kid)[:40]!r} is not a known key")
        raise TokenError(f"no key verifies {str(alg)[:20]!r} tokens here")

    def _verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
            key = self._key_for(header)
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway_s,
                options={"require": ["exp", "sub", "aud", "iss"]},
            )
        except jwt.InvalidTokenError as exc:
            raise TokenError(_reason(exc)) from exc
        if not isinstance(claims.get("sub"), str) or not claims["sub"]:
            raise TokenError("the token's sub is not a player id")
        return claims


def _b64(secret: str) -> str:
    """A secret as a JWK ``k`` (base64url without padding)."""
    return base64.urlsafe_b64encode(secret.encode()).rstrip(b"=").decode()
