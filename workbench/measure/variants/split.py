"""The text split that keeps the answers honest: a search part and a check part.

The text is split into a **search part** (what the int8 searches guard on and the static int8
recipes calibrate on) and a **check part** (the answers that decide the tune's recommendation), so an
int8 model is never judged on the sentences it was tuned on. The built-in sentences have a fixed
split that keeps each group of paraphrases together (:data:`BUILTIN_CHECK`); a user's text puts
every third distinct sentence in the check part (every second below nine), and a text of three to
five distinct sentences is all check part, the search running on the built-in sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ...ort.task_parity import MIN_DISTINCT, too_small_line
from ...text import BUILTIN_SENTENCES, text_batches

#: The built-in sentences that form the check part (indices into ``text.BUILTIN_SENTENCES``):
#: whole groups of paraphrases (passwords, capitals, deep learning, phones, photosynthesis) and a
#: one-word line, so the check part has real nearest neighbours of its own.
BUILTIN_CHECK = (2, 3, 10, 11, 12, 19, 20, 25, 26, 30, 32, 33, 38)


@dataclass(frozen=True)
class Split:
    """The search part and the check part of a text, and where each came from."""

    search: tuple[str, ...]
    check: tuple[str, ...]
    source: str  # "built-in", "text" or "text (check) + built-in (search)"

    def describe(self) -> dict:
        return {"search": len(self.search), "check": len(self.check), "source": self.source}


def split(sentences=None) -> Split:
    """The fixed split (see the module doc); a text too small to check answers is refused in one line."""
    if sentences is None or tuple(sentences) == BUILTIN_SENTENCES:
        check = tuple(BUILTIN_SENTENCES[i] for i in BUILTIN_CHECK)
        search = tuple(s for i, s in enumerate(BUILTIN_SENTENCES) if i not in BUILTIN_CHECK)
        return Split(search, check, "built-in")
    distinct = list(dict.fromkeys(str(s) for s in sentences))
    if len(distinct) < MIN_DISTINCT:
        raise ConfigError(f"the text is {too_small_line(len(distinct))} (tune checks answers on a part it did not "
                          f"tune on: give at least {2 * MIN_DISTINCT}, or leave out --text for the built-in "
                          f"sentences)")
    if len(distinct) < 2 * MIN_DISTINCT:
        search = tuple(s for i, s in enumerate(BUILTIN_SENTENCES) if i not in BUILTIN_CHECK)
        return Split(search, tuple(distinct), "text (check) + built-in (search)")
    every = 3 if len(distinct) >= 3 * MIN_DISTINCT else 2
    check = tuple(s for i, s in enumerate(distinct) if i % every == every - 1)
    search = tuple(s for i, s in enumerate(distinct) if i % every != every - 1)
    return Split(search, check, "text")


def one_at_a_time(src, sentences):
    """TextBatches of one sentence each at its own length (no padding), in the order given."""
    return text_batches(src, list(sentences), batch_size=1, buckets=tuple(range(1, 513)))


__all__ = ["BUILTIN_CHECK", "Split", "split", "one_at_a_time"]
