"""Jittered exponential backoff (shared by the SSH pool and log following)."""

from __future__ import annotations

import random


def backoff_s(attempt: int, base_s: float = 0.25, cap_s: float = 5.0) -> float:
    """Full-jitter exponential backoff for the ``attempt``-th retry (0-based)."""
    return random.uniform(0, min(cap_s, base_s * 2**attempt))
