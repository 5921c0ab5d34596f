"""The protocol is drawn once, in ``spawnkit.protocol``'s docstring; the docs include it.

docs/architecture.md holds each drawing between ``<!-- protocol-drawing N -->``
and ``<!-- /protocol-drawing -->``; this test fails when the two drift.  To
refresh the docs after changing the docstring, run this file as a script.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import spawnkit.protocol

_DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
_BLOCK = re.compile(r"(<!-- protocol-drawing (\d+) -->\n)(.*?)(<!-- /protocol-drawing -->)", re.S)


def drawings() -> list[str]:
    """The docstring's literal blocks (after ``::``), dedented."""
    lines = (spawnkit.protocol.__doc__ or "").splitlines()
    found: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].rstrip().endswith("::"):
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            found.append(textwrap.dedent("\n".join(block)).strip("\n"))
            continue
        i += 1
    return found


def rendered(text: str) -> str:
    """``text`` with each marked block replaced by the docstring's drawing."""
    pictures = drawings()
    return _BLOCK.sub(
        lambda m: f"{m.group(1)}```\n{pictures[int(m.group(2))]}\n```\n{m.group(4)}", text
    )


def test_the_docs_include_the_docstrings_drawings_unchanged() -> None:
    text = _DOC.read_text()
    marked = [int(n) for _, n, _, _ in _BLOCK.findall(text)]
    assert marked == list(range(len(drawings()))), "every drawing is included, once, in order"
    assert text == rendered(text), f"docs drifted: run python {Path(__file__).name} to refresh"


if __name__ == "__main__":
    _DOC.write_text(rendered(_DOC.read_text()))
    sys.exit(0)
