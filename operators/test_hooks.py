"""TESTS ONLY: the one switch for test-only behaviour of the jobs and operators.

:class:`TestHooks` is the single place test-only settings live (deterministic noise, an injected
failure, the pre-noise sketches topic, the sliding-window sketch states topic, a known submission
key). No production signature carries them (``ReleaseConfig``, ``ContinualSettings``,
``SlidingWindowConfig``, ``LdpJobConfig`` and the command line have no such fields; the job configs
carry ``hooks: TestHooks``); the code paths that honour them take ``hooks: TestHooks | None = None``
(None: production).
``privstream.jobs.config`` re-exports it, so ``from privstream.jobs.config import TestHooks``
keeps working.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from privstream.operators.faults import TestFaults

from privstream.noise.rng import KeyedRandomSource

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")  # Kafka's legal topic names


@dataclass(frozen=True)
class TestHooks:
    """TESTS ONLY, never set by an option: ``noise_seed`` makes release noise deterministic (a public
    seed: no privacy); ``fail_marker``/``fail_after`` make the sketch operator fail once, after
    ``fail_after`` events of shard 0 (:class:`~privstream.operators.faults.TestFaults`; the
    sliding-window and LDP operators honour it too, the LDP server counting its applied reports);
    ``expose_sketches_topic`` also publishes the PRE-NOISE sketches to that topic (NOT
    private: tests and audits only); ``expose_states_topic`` makes the sliding-window job also
    publish every shard's sketch state after every release to that topic (``SketchSnapshot``: raw
    counters and the noise key, NOT private: tests and audits only); ``submission_key`` replaces
    the launcher's per-submission CSPRNG noise key (a known key: no privacy), so a test can tell
    which key a release used."""

    __test__ = False  # not a pytest test class

    noise_seed: int | None = None
    fail_marker: str | None = None
    fail_after: int = 0
    expose_sketches_topic: str | None = None
    expose_states_topic: str | None = None
    submission_key: bytes | None = None

    def __post_init__(self) -> None:
        if self.submission_key is not None and len(self.submission_key) < KeyedRandomSource.MIN_KEY_BYTES:
            raise ValueError(f"submission_key: at least {KeyedRandomSource.MIN_KEY_BYTES} bytes")
        for name in ("expose_sketches_topic", "expose_states_topic"):
            topic = getattr(self, name)
            if topic is not None and (not isinstance(topic, str) or not _TOPIC_NAME.match(topic)):
                raise ValueError(
                    f"{name}: a Kafka topic name is 1-249 of letters, digits and . _ -, got {topic!r}"
                )

    @property
    def faults(self) -> TestFaults:
        return TestFaults(self.fail_marker, self.fail_after)

    def release_noise_context(self, epoch: int) -> str | None:
        """The public context of epoch ``epoch``'s seeded release noise
        (:class:`~privstream.noise.rng.SeededRandomSource`); None without ``noise_seed``."""
        if self.noise_seed is None:
            return None
        return f"privstream-test-noise:{self.noise_seed}:{epoch}"

    def continual_noise_key(self, node: int) -> bytes | None:
        """Continual-monitor node ``node``'s PCC noise key from the public ``noise_seed``; None
        without it."""
        import hashlib

        if self.noise_seed is None:
            return None
        return hashlib.sha256(f"privstream-test-continual:{self.noise_seed}:{node}".encode()).digest()
