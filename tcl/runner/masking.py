"""Secret masking for a stream of text chunks.

A secret may be split across two chunks (``"hun"`` + ``"ter2"``): the masker holds back the
longest tail of what it has seen that could still be the start of a secret, and releases it with
the next chunk (or at ``flush``). Every occurrence of a secret value becomes ``***``.
"""

from __future__ import annotations

from collections.abc import Iterable

MASK = "***"


class Masker:
    """One per output stream (the held-back tail is per stream)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._max_len = max((len(s) for s in self._secrets), default=0)
        self._pending = ""

    def feed(self, chunk: str) -> str:
        """Masked text that is safe to emit now (possibly empty)."""
        if not self._secrets:
            return chunk
        text = self._pending + chunk
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        hold = self._held_tail(text)
        self._pending = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        """The held-back tail (the stream ended, so it cannot become a secret any more)."""
        text, self._pending = self._pending, ""
        return text

    @property
    def holding(self) -> bool:
        return bool(self._pending)

    def _held_tail(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a secret."""
        for n in range(min(self._max_len - 1, len(text)), 0, -1):
            tail = text[-n:]
            if any(s.startswith(tail) for s in self._secrets):
                return n
        return 0
