"""Sources of uniformly random bits for privacy noise.

Every privacy-relevant random choice in privstream (release noise, local randomisers) draws from a
:class:`RandomSource`. Production code uses :class:`CryptoRandomSource` (the operating system's
CSPRNG through :mod:`secrets`). Tests may inject :class:`SeededRandomSource`, a deterministic
SHAKE-256 stream; production code never defaults to it. Python's standard-library generator and
NumPy's generators are never used for privacy noise.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Protocol, runtime_checkable


@runtime_checkable
class RandomSource(Protocol):
    """Uniform random integers; the only randomness interface the privacy code uses."""

    def randbits(self, n: int) -> int:
        """A uniform integer in [0, 2**n)."""
        ...

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n), for n >= 1."""
        ...


class CryptoRandomSource:
    """The operating system's CSPRNG (``secrets``). The default everywhere."""

    def randbits(self, n: int) -> int:
        return secrets.randbits(n) if n > 0 else 0

    def randbelow(self, n: int) -> int:
        if n < 1:
            raise ValueError(f"randbelow: n must be >= 1, got {n}")
        return secrets.randbelow(n)


class SeededRandomSource:
    """Deterministic bits from SHAKE-256(seed || counter). For tests and reproducible audits only."""

    _BLOCK = 4096

    def __init__(self, seed: int | bytes | str) -> None:
        if isinstance(seed, int):
            seed = seed.to_bytes((seed.bit_length() + 8) // 8, "big", signed=True)
        elif isinstance(seed, str):
            seed = seed.encode()
        self._seed = bytes(seed)
        self._counter = 0
        self._buffer = b""
        self._pos = 0

    def _take(self, nbytes: int) -> bytes:
        short = nbytes - (len(self._buffer) - self._pos)
        if short > 0:  # append whole blocks, joined once (linear in nbytes, same byte stream)
            blocks = [self._buffer[self._pos :]]
            for _ in range(-(-short // self._BLOCK)):
                blocks.append(
                    hashlib.shake_256(self._seed + self._counter.to_bytes(8, "big")).digest(self._BLOCK)
                )
                self._counter += 1
            self._buffer = b"".join(blocks)
            self._pos = 0
        out = self._buffer[self._pos : self._pos + nbytes]
        self._pos += nbytes
        return out

    def randbits(self, n: int) -> int:
        if n <= 0:
            return 0
        value = int.from_bytes(self._take((n + 7) // 8), "big")
        return value >> (8 * ((n + 7) // 8) - n)

    def randbelow(self, n: int) -> int:
        if n < 1:
            raise ValueError(f"randbelow: n must be >= 1, got {n}")
        bits = n.bit_length()
        while True:  # rejection sampling: exact uniformity
            r = self.randbits(bits)
            if r < n:
                return r


class KeyedRandomSource(SeededRandomSource):
    """A deterministic random bit generator keyed by a secret: SHAKE-256(key || context || counter).

    With a key of at least 256 bits drawn from the OS CSPRNG (:func:`new_noise_key`) and kept
    secret, its output is computationally indistinguishable from uniform, like any DRBG. A streaming
    job keeps the key in checkpointed state and derives one source per epoch, so an epoch that is
    replayed after a failure redraws *identical* noise: a release left in an aborted Kafka
    transaction then equals its committed replay and reveals nothing more.
    """

    MIN_KEY_BYTES = 32

    def __init__(self, key: bytes, context: str) -> None:
        if not isinstance(key, bytes | bytearray) or len(key) < self.MIN_KEY_BYTES:
            raise ValueError(f"key: must be at least {self.MIN_KEY_BYTES} secret random bytes")
        super().__init__(bytes(key) + b"\x00" + context.encode())


def new_noise_key() -> bytes:
    """A fresh 256-bit secret from the OS CSPRNG, for :class:`KeyedRandomSource`."""
    return secrets.token_bytes(KeyedRandomSource.MIN_KEY_BYTES)


_DEFAULT = CryptoRandomSource()


def default_source() -> RandomSource:
    """The production source: always the CSPRNG."""
    return _DEFAULT


def resolve(source: RandomSource | None) -> RandomSource:
    """``source`` if given (tests inject one), else the CSPRNG."""
    return _DEFAULT if source is None else source
