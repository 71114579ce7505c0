"""docs/python.md's Python is true: every ```python block parses, and the
backend of "Writing a backend in Python" is one a reader can paste: it
constructs as written (``Store(memory)``), serves an engine, and passes the
conformance kit through the doc's own test function (as test_readme.py does
for README.md's program)."""

from __future__ import annotations

import pathlib
import re

import kvready
from conftest import SLOT

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python.md"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """Every ```python block of text, with the line it starts on."""
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)]


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def test_every_python_block_in_the_docs_parses():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line, code in python_blocks(doc.read_text()):
            compile(code, f"{doc.relative_to(ROOT)}:{line}", "exec")


def the_backend_section() -> dict:
    """Run the section's blocks in order in one namespace, as a reader
    pasting them into a module would."""
    blocks = python_blocks(section(DOC.read_text(), "## Writing a backend in Python"))
    assert len(blocks) >= 2, "docs/python.md's backend section has lost its class or its test"
    ns: dict = {"kvready": kvready}
    for line, code in blocks:
        exec(compile(code, f"docs/python.md:{line}", "exec"), ns)
    assert "Store" in ns and "test_my_backend_conforms" in ns, sorted(ns)
    return ns


def test_the_docs_backend_serves_an_engine(rig):
    Store = the_backend_section()["Store"]
    store = Store(rig.mem)  # as the doc says an engine takes it
    eng = rig.engine(store)
    rows = rig.rows(2, fill=0x41)
    with eng.lend(kvready.Request.publish(rows)) as pub:
        assert pub.wait().outcome == kvready.OutcomeKind.SERVED
    back = rig.rows(2)
    with eng.lend(kvready.Request.fetch(back)) as fetch:
        info = fetch.wait()
        assert info.outcome == kvready.OutcomeKind.SERVED, info
    assert rig.dev.read(back[1].device, SLOT) == bytes([0x42]) * SLOT
    assert store.callback_errors == []


def test_the_docs_backend_passes_the_conformance_kit():
    the_backend_section()["test_my_backend_conforms"]()
