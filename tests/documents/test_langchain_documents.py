"""LangChain documents in: loader.load()'s documents and --docs langchain:MODULE:ATTR."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

langchain_core = pytest.importorskip("langchain_core")
from langchain_core.documents import Document as LCDocument  # noqa: E402

from ragopt.documents import DocsOptions, load_documents  # noqa: E402
from ragopt.documents.langchain import from_langchain  # noqa: E402
from ragopt.errors import InputError  # noqa: E402
from ragopt.types import source_label  # noqa: E402


def test_ids_from_source_and_page_counted_from_one() -> None:
    docs = from_langchain([
        LCDocument(page_content="Page one.", metadata={"source": "g.pdf", "page": 0}),
        LCDocument(page_content="Page two.", metadata={"source": "g.pdf", "page": 1, "tenant": "north"}),
        LCDocument(page_content="Again page two.", metadata={"source": "g.pdf", "page": 1}),
        LCDocument(page_content="Own id.", id="mine", metadata={"source": "x.md"}),
    ])
    assert [(d.id, d.tenant) for d in docs] == [("g.pdf#page=1", None), ("g.pdf#page=2", "north"),
                                                ("g.pdf#page=2~2", None), ("mine", None)]
    assert source_label(docs[1].metadata) == "g.pdf, page 2"


def test_a_loader_named_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_loaders.py").write_text(
        "from langchain_core.documents import Document\n"
        "class Loader:\n"
        "    def load(self):\n"
        "        return [Document(page_content='Loaded text.', metadata={'source': 'a.txt'})]\n"
        "loader = Loader()\n"
        "def make():\n"
        "    return Loader()\n"
        "not_documents = 42\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_loaders", None)
    for attr in ("loader", "make"):
        docs = load_documents(DocsOptions(path=f"langchain:my_loaders:{attr}")).documents
        assert [(d.id, d.text) for d in docs] == [("a.txt", "Loaded text.")]
    with pytest.raises(InputError, match=r"\[--docs\].*expected a loader"):
        load_documents(DocsOptions(path="langchain:my_loaders:not_documents"))
    with pytest.raises(InputError, match=r"\[--docs\].*cannot load"):
        load_documents(DocsOptions(path="langchain:my_loaders:missing"))
