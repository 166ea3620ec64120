"""Secret masking across chunk boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tcl.runner.masking import MASK, Masker


def run(secrets: list[str], chunks: list[str]) -> str:
    m = Masker(secrets)
    return "".join(m.feed(c) for c in chunks) + m.flush()


def test_secret_split_across_two_chunks() -> None:
    assert run(["hunter2"], ["password: hun", "ter2\n"]) == f"password: {MASK}\n"


def test_nothing_of_a_split_secret_is_emitted_early() -> None:
    m = Masker(["hunter2"])
    first = m.feed("token=hunt")
    assert "hunt" not in first and first == "token="
    assert m.feed("er2 done\n") == f"{MASK} done\n"


def test_longest_secret_wins_and_every_occurrence_is_masked() -> None:
    out = run(["abc", "abcdef"], ["abcdef-abc-ab", "c-x"])
    assert out == f"{MASK}-{MASK}-{MASK}-x"


def test_a_prefix_that_never_completes_is_released() -> None:
    assert run(["hunter2"], ["hun", "gry\n"]) == "hungry\n"
    assert run(["hunter2"], ["the end hunt"]) == "the end hunt"


def test_no_secrets_is_a_passthrough() -> None:
    m = Masker(["", ""])
    assert m.feed("x") == "x" and not m.holding


@given(
    secret=st.text(alphabet="ab\n", min_size=2, max_size=6),
    text=st.text(alphabet="abc\n", max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=8),
)
def test_any_chunking_gives_the_same_result_as_one_chunk(
    secret: str, text: str, cuts: list[int]
) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    chunks = [text[i:j] for i, j in zip([0, *points], [*points, len(text)], strict=True)]
    whole = text.replace(secret, MASK)
    assert run([secret], chunks) == whole
    assert secret not in run([secret], chunks).replace(MASK, "\0")
