"""`ragopt synth --like QUERIES`: questions shaped like a user's examples, in real subprocesses on an eighth of
the shipped hospital corpus; byte-identical for a seed in fresh processes, the same set after a kill; bad
examples files are one line naming the file, exit 2, nothing written. The reader and the joiner directly."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from fixtures.cli import one_line_error, ragopt
from fixtures.synth import hospital_slice, synth_killed_at
from ragopt.errors import InputError
from ragopt.synth import SynthConfig
from ragopt.synth.like import StyledQuestionGenerator, _named, join_words, read_examples
from ragopt.text import words
from ragopt.types import Document

ARGS = ("synth", "--questions", "12", "--seed", "3")
KEYWORDS = ["glucose unit", "creatinine valid range", "hba1c warehouse", "sodium table", "potassium dictionary",
            "fasting glucose", "lab range quarantine", "random glucose meaning"]
SENTENCES = ["What is the unit of the fasting glucose field in the lab dictionary?",
             "Which table is the creatinine value loaded from in the warehouse?",
             "How are the values outside of the valid range handled by the quality checks?",
             "Where is the random glucose field stored in the north hospital?"]

@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hospital_slice(tmp_path_factory.mktemp("corpus"), every=8)


def examples(folder: Path, lines: list[str], name: str = "queries.txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(f"{q}\n" for q in lines), encoding="utf-8")
    return folder / name


def questions(out: Path) -> list[str]:
    return [json.loads(line)["question"] for line in (out / "questions.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def keyword_set(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kw")
    done = ragopt(*ARGS, "--docs", str(corpus), "--like", str(examples(root, KEYWORDS)), "--out", str(root / "set"),
                  workspace=root / "ws", timeout=900)
    assert done.returncode == 0, done.stderr
    assert "trust check (with --like)" in done.stderr
    return root / "set"


def test_keyword_examples_give_short_keyword_questions(keyword_set: Path) -> None:
    asked = questions(keyword_set)
    assert len(asked) == 12
    assert all(1 <= len(words(q)) <= 3 and not q.endswith("?") for q in asked), asked  # examples: 2 or 3 content words
    record = json.loads((keyword_set / "synth.json").read_text(encoding="utf-8"))
    assert record["like"]["examples"] == len(KEYWORDS) and record["like"]["sentence_form_share"] == 0
    assert record["prompt_version"] == "extractive-like-3" and "like" not in record["config"]


def warm_copy(keyword_set: Path, tmp_path: Path) -> Path:
    """A copy of the keyword run's workspace: its embeddings are cached, the rest of the run is not."""
    shutil.copytree(keyword_set.parent / "ws", tmp_path / "ws")
    return tmp_path / "ws"


def test_sentence_examples_give_longer_questions_in_sentence_form(corpus: Path, keyword_set: Path, tmp_path: Path) -> None:
    done = ragopt(*ARGS, "--docs", str(corpus), "--like", str(examples(tmp_path, SENTENCES)), "--out", str(tmp_path / "set"),
                  workspace=warm_copy(keyword_set, tmp_path), timeout=900)
    assert done.returncode == 0, done.stderr
    asked = questions(tmp_path / "set")
    assert all(q.endswith("?") for q in asked), asked
    mean = sum(len(words(q)) for q in asked) / len(asked)
    assert mean > 1.5 * sum(len(words(q)) for q in questions(keyword_set)) / len(asked), asked


def test_same_seed_same_bytes_in_a_fresh_process_and_workspace(corpus: Path, keyword_set: Path, tmp_path: Path) -> None:
    done = ragopt(*ARGS, "--docs", str(corpus), "--like", str(examples(tmp_path, KEYWORDS)), "--out", str(tmp_path / "set"),
                  workspace=tmp_path / "ws", timeout=900)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "set" / "questions.jsonl").read_bytes() == (keyword_set / "questions.jsonl").read_bytes()


def test_killed_halfway_then_run_again_gives_the_same_set(corpus: Path, keyword_set: Path, tmp_path: Path) -> None:
    ws, out = warm_copy(keyword_set, tmp_path), tmp_path / "set"
    args = (*ARGS, "--docs", str(corpus), "--like", str(examples(tmp_path, KEYWORDS)), "--out", str(out))
    killed = synth_killed_at("ragopt.synth.like.StyledQuestionGenerator", 8, args, ws)  # while generating
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not out.exists()
    done = ragopt(*args, workspace=ws, timeout=900)
    assert done.returncode == 0, done.stderr
    assert (out / "questions.jsonl").read_bytes() == (keyword_set / "questions.jsonl").read_bytes()


@pytest.mark.parametrize("content, expect", [
    (None, "file not found"),
    (b"\n  \n12\n345\n", "no usable line"),
    (b"%PDF-1.4\n1 0 obj\n", "not queries one per line"),
    (b'[{"text": "a query"}]\n', "not queries one per line"),
    (b'{"_id": "d1", "title": "Aspirin", "text": "Aspirin is a drug."}\n', "a corpus, not queries"),
    (b'{"_id": "q1", "text": "fine"}\nnot json\n', "not a JSON object"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "a binary file"),
    ("caf\u00e9 query\n".encode("latin-1"), "not UTF-8 text"),
])
def test_bad_examples_are_one_line_naming_the_file_and_nothing_is_written(corpus: Path, tmp_path: Path, content: bytes | None,
                                                                          expect: str) -> None:
    path = tmp_path / "queries.jsonl"
    if content is not None:
        path.write_bytes(content)
    ws, out = tmp_path / "ws", tmp_path / "set"
    line = one_line_error(ragopt(*ARGS, "--docs", str(corpus), "--like", str(path), "--out", str(out), workspace=ws), "synth")
    assert f"{path}" in line and "[--like]" in line and expect in line, line
    assert not out.exists() and not (ws / "indexes").exists() and not (ws / "synth").exists()


def test_like_goes_with_the_extractive_generator(corpus: Path, tmp_path: Path) -> None:
    line = one_line_error(ragopt(*ARGS, "--docs", str(corpus), "--generator", "llm", "--like", str(examples(tmp_path, KEYWORDS)),
                                 "--out", str(tmp_path / "set"), workspace=tmp_path / "ws"), "synth")
    assert "[--like]: goes with --generator extractive" in line


def test_reader_takes_text_logs_and_beir_queries(tmp_path: Path) -> None:
    text = examples(tmp_path, ["  glucose   unit ", "glucose unit", "", "what is " * 40])  # duplicate, blank, a passage
    assert read_examples(text) == ["glucose unit"]
    log = examples(tmp_path, ["2026-12-01T10:00\tu17\thow to renew a passport", "1042\tanthropological definition of environment"],
                   "log.tsv")
    assert read_examples(log) == ["how to renew a passport", "anthropological definition of environment"]
    beir = examples(tmp_path, [json.dumps({"_id": "1", "text": "0-dimensional biomaterials show inductive properties.",
                                           "metadata": {}}), json.dumps({"_id": "2", "text": "糖尿病 的 诊断 标准"})], "q.jsonl")
    assert read_examples(beir) == ["0-dimensional biomaterials show inductive properties.", "糖尿病 的 诊断 标准"]
    with pytest.raises(InputError, match="no query text"):
        read_examples(examples(tmp_path, [json.dumps({"_id": "1"})], "ids.jsonl"))


def test_words_are_joined_as_their_script_writes_them() -> None:
    assert join_words(["糖尿病", "诊断", "标准"]) == "糖尿病诊断标准"
    assert join_words(["HbA1c", "糖尿病", "test", "unit"]) == "HbA1c 糖尿病 test unit"


PASSAGE = Document(id="glu", title="Fasting glucose", text=(
    "Fasting glucose is measured in the morning before breakfast. The result is stored in millimoles per litre. "
    "Values outside the valid range are quarantined by the warehouse loader. Nobody reads the archive tables."))


def test_an_example_is_measured_by_what_its_passage_names_and_how_much_of_it_that_spans() -> None:
    generator = StyledQuestionGenerator([PASSAGE], None, SynthConfig(), Path("unused"))
    named, spread = _named(["glucose", "warehouse", "budget", "millimoles"], PASSAGE, generator)
    assert named == 0.75  # budget is not in the passage
    words_of_passage = generator.words(PASSAGE.text)
    first, last = words_of_passage.index("glucose"), words_of_passage.index("warehouse")
    assert spread == (last - first + 1) / len(words_of_passage)
    assert _named(["budget"], PASSAGE, generator) == (0.0, 0.0)


@pytest.mark.parametrize("spread", [0.0, 0.5, 1.0])
def test_a_question_draws_on_a_stretch_around_its_sentence_as_long_as_its_example_s_spread(spread: float) -> None:
    generator = StyledQuestionGenerator([PASSAGE], None, SynthConfig(), Path("unused"))
    second = generator.sentences(PASSAGE)[1]
    start, end = generator._stretch(PASSAGE, second, spread)
    assert start <= second[0] and second[1] <= end  # the sentence is inside
    n = len(generator.words(PASSAGE.text))
    covered = len(generator.words(PASSAGE.text[start:end]))
    assert abs(covered - max(spread * n, len(generator.words(PASSAGE.text[second[0]:second[1]])))) <= 0.5  # to the nearest word
    if spread == 0.0:
        assert (start, end) == second
