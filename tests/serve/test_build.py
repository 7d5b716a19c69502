"""`ragopt serve` over your own documents (ServeOptions.docs): citations name the file and page, and an answer
cached before a document changes is not served after it (the knowledge-base version moves with the content)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fixtures.documents import write_knowledge_base
from fixtures.serving import running_service, served_plan
from ragopt.documents import DocsOptions
from ragopt.serve.build import ServeOptions
from ragopt.serve.service import ServeSettings

STAFF = {"Authorization": "Bearer key-acme-staff"}
QUESTION = {"question": "How long does the backup generator run on one tank of diesel?"}


def _opts(folder: Path) -> ServeOptions:
    return ServeOptions(settings=ServeSettings(), plan=served_plan("extractive"), docs=DocsOptions(path=str(folder)))


def test_citations_name_the_file_and_page(serve_files: dict[str, Path], tmp_path: Path) -> None:
    kb = write_knowledge_base(tmp_path / "kb")
    with running_service(_opts(kb), tmp_path / "ws", serve_files["keys"]) as (url, _):
        out = httpx.post(f"{url}/v1/ask", json=QUESTION, headers=STAFF, timeout=60).json()
    assert "72 hours" in out["answer"]
    assert out["citations"][0]["source"] == "manual.pdf, page 2" and out["citations"][0]["doc_id"] == "manual.pdf#page=2"


def test_an_answer_cached_before_an_edit_is_not_served_after_it(serve_files: dict[str, Path], tmp_path: Path) -> None:
    kb, ws = write_knowledge_base(tmp_path / "kb"), tmp_path / "ws"

    def ask() -> dict:  # type: ignore[type-arg]
        with running_service(_opts(kb), ws, serve_files["keys"]) as (url, service):
            out = httpx.post(f"{url}/v1/ask", json=QUESTION, headers=STAFF, timeout=60).json()
            return {**out, "kb_version": service.kb_version}

    first = ask()
    assert first["trace"]["cache"]["answer"] is False and "72 hours" in first["answer"]
    (kb / "guide.md").touch()  # a new mtime, the same content: the same knowledge base, the cached answer holds
    (kb / "visiting.html").write_bytes((kb / "visiting.html").read_bytes())
    again = ask()
    assert again["trace"]["cache"]["answer"] is True and again["kb_version"] == first["kb_version"]
    pdf = kb / "manual.pdf"
    pdf.write_bytes(pdf.read_bytes().replace(b"72 hours", b"96 hours"))  # same length: the PDF's offsets hold
    edited = ask()
    assert edited["kb_version"] != first["kb_version"]
    assert edited["trace"]["cache"]["answer"] is False and "96 hours" in edited["answer"]


def test_a_named_hybrid_retriever_on_a_chinese_corpus_embeds_with_the_multilingual_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """`ragopt serve --retriever hybrid` without --embedder on a mostly Chinese corpus: e5, said in one line."""
    from contextlib import ExitStack

    from fixtures.tiny_corpus import write_beir

    from ragopt.config import MULTILINGUAL_E5
    from ragopt.serve.build import build_service

    docs = [{"_id": "city", "title": "上海", "text": "上海是中国的经济中心，位于长江入海口。"},
            {"_id": "power", "title": "长江电力", "text": "中国长江电力股份有限公司是中国最大的电力上市公司之一。"}]
    dataset = write_beir(tmp_path / "zh", docs=docs, queries=[{"_id": "q1", "text": "上海在哪里？"}], qrels=[("q1", "city", 1)])
    opts = ServeOptions(settings=ServeSettings(), plan=served_plan(generator="extractive", retriever="hybrid"), dataset=str(dataset))
    with ExitStack() as stack:
        service = build_service(opts, tmp_path / "ws", stack)
        embed = next(s.stage for s in service.retrieve.steps if hasattr(s.stage, "embedder"))
        assert embed.embedder.config.model == MULTILINGUAL_E5
    notes = [line for line in capsys.readouterr().err.splitlines() if MULTILINGUAL_E5 in line]
    assert len(notes) == 1 and notes[0].startswith("note: --retriever hybrid embeds with")
