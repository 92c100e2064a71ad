"""How much one client may ask of the server: the configurable limits and the fixed bounds.

One client must not be able to freeze or bloat a server that others share. The limits below
bound what a single request can cost (its body, what the body inflates to, its tokens, the
tokens it asks to sample) and what a session, or everyone together, can keep in memory
(adapters). Each is a flag of ``rtc serve``; a request over a limit gets a 4xx whose detail
names the flag. How long one request may hold the engine is the engine's to slice; these
limits bound the total work one request can ask for.

The fixed bounds (``MAX_*``) are values no real request reaches, and past which a number
overflows or means nothing (a seed beyond 64 bits, a learning rate of 1e300).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20

# Fixed bounds on single values.
MAX_RANK = 512
MAX_SAMPLES = 128  # num_samples of one asample
MAX_TOPK = 1024  # top-K prompt logprobs, and K of [N, K] training targets
MAX_SEED = 2**63 - 1
MAX_SEQ_ID = 2**62
MAX_LEARNING_RATE = 10.0
MAX_TEMPERATURE = 1000.0
MIN_TEMPERATURE = 1e-4  # above 0 and below this, logits / temperature overflows float32
MAX_STOPS = 64
MAX_STOP_CHARS = 1024
MAX_ID_CHARS = 256  # session, model, sampler and request ids, base model names
MAX_PATH_CHARS = 1024

# The SDK splits forward_backward into chunks of at most this many estimated bytes by default.
SDK_DEFAULT_CHUNK_BYTES = 5_000_000
# The SDK's estimate counts each model-input token as this many bytes (tinker 0.38).
SDK_BYTES_PER_TOKEN = 4


@dataclass(frozen=True)
class Limits:
    """The configurable limits; defaults fit a loop on a laptop with room to spare."""

    max_body_bytes: int = 16 * MIB
    max_inflated_bytes: int = 64 * MIB
    max_request_tokens: int = 65536
    max_sample_tokens: int = 65536  # num_samples x max_tokens of one asample
    max_adapters_per_session: int = 8
    max_adapters: int = 32

    def check(self) -> None:
        """Raise ``ValueError`` naming the flag of a limit that cannot work."""
        for flag, value in (
            ("--max-body-mb", self.max_body_bytes),
            ("--max-inflated-mb", self.max_inflated_bytes),
            ("--max-request-tokens", self.max_request_tokens),
            ("--max-sample-tokens", self.max_sample_tokens),
            ("--max-adapters-per-session", self.max_adapters_per_session),
            ("--max-adapters", self.max_adapters),
        ):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1")
        if self.max_inflated_bytes < self.max_body_bytes:
            raise ValueError("--max-inflated-mb must be at least --max-body-mb")
        if self.max_adapters < self.max_adapters_per_session:
            raise ValueError("--max-adapters must be at least --max-adapters-per-session")

    def fwdbwd_chunk_bytes(self) -> int:
        """The chunk size the SDK is told to split ``forward_backward`` into.

        The SDK estimates at least :data:`SDK_BYTES_PER_TOKEN` bytes per token, so a chunk
        under this many estimated bytes has at most ``max_request_tokens`` tokens; half the
        body limit leaves room for the protobuf framing the estimate leaves out. A loop using
        the SDK therefore never meets these two limits, whatever its batch size.
        """
        return max(
            1,
            min(
                SDK_DEFAULT_CHUNK_BYTES,
                self.max_body_bytes // 2,
                self.max_request_tokens * SDK_BYTES_PER_TOKEN,
            ),
        )
