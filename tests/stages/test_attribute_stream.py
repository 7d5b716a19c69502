"""A streamed answer is the answer: through `Pipeline.run(on_token=...)`, what the client receives, concatenated,
equals the final text that citation attribution (and the tool's live sentence) made, whatever the generator's
pieces, while most of it is still sent before the generator ends."""

from __future__ import annotations

import random
import time

import pytest

from ragopt.pipeline import Pipeline, RequestState, Step
from ragopt.stages.attribute import AttributeCitations, AttributeConfig
from ragopt.stages.citations import parse_citations
from ragopt.stages.prompt import number_passages
from ragopt.stages.tool import LiveAnswer
from ragopt.types import Answer, Chunk, Hit, Query

from test_attribute import hits

ANSWERS = [
    "Glycated haemoglobin is stored in mmol/mol. Fasting glucose is measured in mmol/L.",
    "Fasting glucose is measured in mmol/L [2]. [1] Version 4 renamed two glucose fields [3][7].",
    "  The unit is mmol/L [1, 3].\n\nIt was 3.5 hours (after food) [Passage 2]. See [note] below!  ",
    "Version 4 retired LAB_GLU_OLD [1-3]. The HbA1c average covers three months [2",
    "I cannot answer from the sources.",
    "[2] Fasting plasma glucose. [1]. Glycated haemoglobin [2] is the three month average.\"",
    "空腹血糖以 mmol/L 计 [1]。糖化血红蛋白是三个月的平均值 [2]！版本 4 重命名了字段",
    "LAB_GLU_FAST: fasting plasma glucose\nLAB_HBA1C: glycated haemoglobin [2]\n",
]


class Scripted:
    """A generator as the real ones behave: each piece goes to `on_token`, the answer is their text stripped."""

    name = "generate"
    reads = ("query", "hits")
    writes = ("answer",)

    def __init__(self, pieces: list[str], sent: list[str]):
        self.pieces, self.sent = pieces, sent
        self.sent_while_generating = 0

    def run(self, state: RequestState) -> RequestState:
        for piece in self.pieces:
            state.on_token(piece)
        self.sent_while_generating = len("".join(self.sent))
        text = "".join(self.pieces).strip()
        numbered = {p.number: p.hit.chunk for p in number_passages(state.hits)}
        state.answer = Answer(text=text, citations=parse_citations(text, numbered), generator="scripted")
        return state


def _pieces(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 30))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


def _live_hits(missing: bool) -> list[Hit]:
    meta = {"live": True, "tool": "collection_status", "read_at": "2026-12-06T00:00:00+00:00", "subject": "lab"}
    meta |= {"missing": "tool_connection"} if missing else {}
    text = "unavailable (tool_connection)" if missing else "job: lab; status: failed"
    live = Chunk(id="live:collection_status:lab", doc_id="live:collection_status", start=0, end=len(text), text=text,
                 title="Live data", metadata=meta)
    return [*hits(), Hit(chunk=live, score=0.0, rank=4, retriever="tool:collection_status")]


@pytest.mark.parametrize("mode", ["replace", "repair", "answer"])
def test_the_streamed_text_is_the_attributed_answer_for_any_split(mode: str) -> None:
    rng = random.Random(7)
    for text in ANSWERS:
        for split in ["chars", "random", "random", "whole"]:
            pieces = list(text) if split == "chars" else [text] if split == "whole" else _pieces(text, rng)
            sent: list[str] = []
            generator = Scripted(pieces, sent)
            result = Pipeline([generator, AttributeCitations(AttributeConfig(mode=mode))], inputs=("query", "hits")).run_state(
                RequestState(query=Query(text="q"), hits=hits(), on_token=sent.append))
            assert "".join(sent) == result.answer.text, (mode, split, text)
            assert not result.trace.degraded
            if split == "chars" and mode != "answer" and text.count(". ") >= 1:
                assert generator.sent_while_generating > 0  # closed sentences went out before the generator ended


@pytest.mark.parametrize("missing", [True, False])
def test_the_live_sentence_and_the_docs_only_notice_are_streamed(missing: bool) -> None:
    text = "Fasting glucose is measured in mmol/L [1]. Version 4 renamed two glucose fields."
    sent: list[str] = []
    generator = Scripted(list(text), sent)
    pipeline = Pipeline([generator, AttributeCitations(), LiveAnswer()], inputs=("query", "hits"))
    result = pipeline.run_state(RequestState(query=Query(text="q"), hits=_live_hits(missing), on_token=sent.append))
    assert "".join(sent) == result.answer.text
    assert ("this answer covers the documents only" in result.answer.text) == missing
    assert ("Live data (collection_status" in result.answer.text) == (not missing)
    assert 0 < generator.sent_while_generating < len(result.answer.text)


def test_a_rewriter_that_cannot_say_what_is_settled_holds_the_stream_to_the_end() -> None:
    class Upper:
        name, reads, writes = "upper", ("answer",), ("answer",)

        def run(self, state: RequestState) -> RequestState:
            state.answer = state.answer.model_copy(update={"text": state.answer.text.upper()})
            return state

    sent: list[str] = []
    generator = Scripted(list("Paris is big. It is old."), sent)
    result = Pipeline([generator, Upper()], inputs=("query", "hits")).run_state(
        RequestState(query=Query(text="q"), hits=hits(), on_token=sent.append))
    assert sent == ["PARIS IS BIG. IT IS OLD."] and generator.sent_while_generating == 0


class Failing(Scripted):
    """A generator that breaks after sending its pieces (a server that dies mid-answer)."""

    def run(self, state: RequestState) -> RequestState:
        for piece in self.pieces:
            state.on_token(piece)
        raise ConnectionError("the server went away")


def test_past_the_deadline_attribution_still_runs_on_a_streamed_answer_and_a_late_fallback_is_named() -> None:
    class Late(Scripted):  # the deadline passes during generation: the answer is cut there
        def run(self, state: RequestState) -> RequestState:
            state = super().run(state)
            state.deadline = time.monotonic() - 1
            return state

    sent: list[str] = []
    late = Late(list("Fasting glucose is measured in mmol/L [3]. Version 4 renamed"), sent)
    result = Pipeline([late, AttributeCitations()], inputs=("query", "hits")).run_state(
        RequestState(query=Query(text="q"), hits=hits(), on_token=sent.append))
    assert "".join(sent) == result.answer.text and "[1]" in result.answer.text  # attributed, as what was sent
    sent.clear()
    failing = Failing(list("Fasting glucose is measured in mmol/L. Version"), sent)
    fallback = Scripted(list("Version 4 retired LAB_GLU_OLD."), sent)
    result = Pipeline([Step(failing, fallback=fallback), AttributeCitations()], inputs=("query", "hits")).run_state(
        RequestState(query=Query(text="q"), hits=hits(), on_token=sent.append))
    assert result.answer.text == "Version 4 retired LAB_GLU_OLD [3]."
    assert "".join(sent).startswith("Fasting glucose is measured in mmol/L [1].")  # sent before the failure
    assert result.trace.degraded[-1].startswith("stream: ") and "differs from the answer" in result.trace.degraded[-1]
