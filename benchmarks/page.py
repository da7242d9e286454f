"""One helper the benchmark scripts share: replace their own section of a docs page."""

from __future__ import annotations

import re
from pathlib import Path


def replace_section(page: Path, begin: str, end: str, section: str) -> None:
    """Put ``section`` (which starts with ``begin`` and ends with ``end``) where the page has
    those markers, or at its end the first time, leaving the rest of the page as it is."""
    text = page.read_text() if page.exists() else ""
    if begin in text:
        text = re.sub(
            re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text, flags=re.S
        )
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    page.write_text(text)


def publish(page: Path, begin: str, end: str, lines: list[str]) -> None:
    """Close ``lines`` (which start with ``begin``) with ``end``, put them in ``page`` with
    :func:`replace_section`, and print them."""
    section = "\n".join([*lines, "", end])
    replace_section(page, begin, end, section)
    print(section)
