"""Text in and out of `InferenceJob.rollout`: encodings, chat templates, token lists.

An encoding is anything with `encode(text) -> list[int]` and `decode(tokens) -> str` (a
tiktoken `Encoding`, theseus' tokenizers, `ByteEncoding`); `encode` is given
`allowed_special="all"` when it takes it, so chat markers encode as their special tokens. A chat
template is a list of turns with `role` and `message` (theseus' `ChatTurn`, this module's, or
dicts with `role` and `content`), rendered as ChatML with the assistant's turn opened, unless
the encoding has its own `render_chat(turns) -> str`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any, Protocol


class Encoding(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: Sequence[int]) -> str: ...


class ByteEncoding:
    """UTF-8 bytes as tokens (vocab 256): the built-in GPT's encoding."""

    eot_token = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: Sequence[int]) -> str:
        return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


@dataclasses.dataclass(frozen=True)
class ChatTurn:
    role: str
    message: str


ChatTemplate = list[ChatTurn]


def _turn(item: Any) -> tuple[str, str] | None:
    if isinstance(item, dict):
        role, text = item.get("role"), item.get("content", item.get("message"))
    else:
        role, text = getattr(item, "role", None), getattr(item, "message", None)
    return (role, text) if isinstance(role, str) and isinstance(text, str) else None


def is_chat(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) > 0
        and all(_turn(t) is not None for t in value)
    )


def render_chat(turns: Sequence[Any], prompt: bool = True) -> str:
    """ChatML: `<|im_start|>role\\nmessage<|im_end|>\\n` per turn, then the assistant's turn."""
    parts = []
    for item in turns:
        turn = _turn(item)
        assert turn is not None
        parts.append(f"<|im_start|>{turn[0]}\n{turn[1]}<|im_end|>\n")
    if prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def encode_text(encoding: Any, text: str) -> list[int]:
    fn = encoding.encode
    try:
        special = "allowed_special" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        special = False
    tokens = fn(text, allowed_special="all") if special else fn(text)
    return [int(t) for t in tokens]


def to_tokens(item: Any, encoding: Any) -> list[int]:
    """One rollout input as token ids: a string, a chat template, or token ids already."""
    if isinstance(item, str):
        return encode_text(encoding, item)
    if is_chat(item):
        render = getattr(encoding, "render_chat", None)
        text = render(list(item)) if callable(render) else render_chat(item)
        return encode_text(encoding, text)
    if hasattr(item, "tolist"):
        item = item.tolist()
    if isinstance(item, list | tuple) and all(isinstance(t, int) for t in item):
        return [int(t) for t in item]
    raise TypeError(f"unsupported rollout input: {type(item).__name__}")


def decode_tokens(encoding: Any, tokens: Sequence[int]) -> str:
    return str(encoding.decode([int(t) for t in tokens]))
