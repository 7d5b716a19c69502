from ragopt.data import EvalQuery, EvalSet, Evidence
from ragopt.eval.executor import QueryOutcome
from ragopt.eval.scoring import citation_scores, contains_reference
from ragopt.types import Answer, Citation, Document, Query

# passage "a" is chars 0-50, "b" chars 50-100; the reference "mmol/L" is at chars 14-20, in "a"'s lead
DOC_TEXT = "Glucose is in mmol/L in the north lab, stored as".ljust(50) + "decimal value with one digit after the point.".ljust(50)


def _outcome(qid: str, text: str, cited: str) -> QueryOutcome:
    # two passages: "a" (chars 0-50 of doc d1) ranks first, "b" (chars 50-100) second; the gold span lies in "b"
    ranking = [("a", "d1", 0, 50, 0.9), ("b", "d1", 50, 100, 0.8)]
    answer = Answer(text=text, citations=[Citation(marker=1 if cited == "a" else 2, chunk_id=cited, doc_id="d1")])
    return QueryOutcome(query_id=qid, ranking=ranking, stage_ms={}, answer=answer.model_dump())


def _evalset(references: dict[str, str | None]) -> EvalSet:
    queries = [EvalQuery(query=Query(text="q", id=qid), relevance={"d1": 1}, evidence=[Evidence(doc_id="d1", start=60, end=70)],
                         reference_answer=ref) for qid, ref in references.items()]
    return EvalSet(name="t", source="t", documents=[Document(id="d1", text=DOC_TEXT)], queries=queries)


def test_contains_reference_ignores_case_and_whitespace():
    assert contains_reference("Values are in  MMOL/l.", "mmol/L")
    assert contains_reference("Type:\nDECIMAL(3,1)", "decimal(3,1)")
    assert not contains_reference("Values are in mg/dL.", "mmol/L")


def test_precision_if_correct_counts_only_answers_that_state_their_reference():
    outcomes = [_outcome("right", "It is in mmol/L [2].", "b"), _outcome("wrong", "It is in mg/dL [1].", "a")]
    scores = citation_scores(outcomes, _evalset({"right": "mmol/L", "wrong": "mmol/L"}))
    assert scores["answer_contains_reference"] == [1.0, 0.0]
    assert scores["citation_span_precision"] == [1.0, 0.0]
    assert scores["citation_span_precision_if_correct"] == [1.0, None]
    # the floor cites passage 1 ("a"), which misses the span, over the same (correct) answers
    assert scores["citation_floor_span_precision_if_correct"] == [0.0, None]


def test_the_lead_floor_is_the_top_passage_cut_to_the_answers_length_without_markers():
    long_answer = _outcome("long", "It is in mmol/L [2].", "b")  # 15 characters without its marker
    short_answer = _outcome("short", "mg/dL [1].", "a")  # 5: the lead "Gluco" misses the reference
    scores = citation_scores([long_answer, short_answer], _evalset({"long": "mmol/L", "short": "mmol/L"}))
    assert scores["answer_lead_contains_reference"] == [0.0, 0.0]  # "Glucose is in m": cut before the reference
    longer = _outcome("longer", "The value is in mmol/L here [2].", "b")  # 27 characters: the lead holds it
    assert citation_scores([longer], _evalset({"longer": "mmol/L"}))["answer_lead_contains_reference"] == [1.0]


def test_no_reference_answer_leaves_the_correctness_pair_undefined():
    scores = citation_scores([_outcome("q1", "It is in mmol/L [2].", "b")], _evalset({"q1": None}))
    assert scores["answer_contains_reference"] == [None] and scores["answer_lead_contains_reference"] == [None]
    assert scores["citation_span_precision_if_correct"] == [None]
    assert scores["citation_span_precision"] == [1.0]


def test_an_answer_scored_once_is_scored_the_same_in_a_later_trial_without_asking_the_cache(tmp_path):
    from ragopt.cache import Cache
    from ragopt.eval.answers import AnswerSample, score_answers
    from ragopt.eval.scoring import answer_scores

    evalset = _evalset({"q1": "mmol/L", "q2": "decimal value", "q3": "mmol/L"})
    first = [_outcome("q1", "It is in mmol/L [2].", "b"), _outcome("q2", "It is a decimal [1].", "a"),
             _outcome("q3", "Glucose in mg/dL [1].", "a")]
    later = [first[1], _outcome("q1", "Stored as mmol/L values [2].", "b"), first[2]]  # two answers seen before
    cache = Cache(tmp_path / "c")
    scored = answer_scores(first, evalset, ["string_presence", "rouge_l"], cache)
    asked = cache.cache_hits + cache.cache_misses
    again = answer_scores(later, evalset, ["string_presence", "rouge_l"], cache)
    fresh = score_answers([AnswerSample(response=o.answer["text"], reference=q.reference_answer)
                           for o, q in zip(later, [evalset.queries[1], evalset.queries[0], evalset.queries[2]])],
                          ["string_presence", "rouge_l"])  # ragas itself, past every cache
    assert again == fresh and again["string_presence"] == [0.0, 1.0, 0.0] and scored["string_presence"] == [1.0, 0.0, 0.0]
    assert again["rouge_l"][2] == scored["rouge_l"][2] and 0 < again["rouge_l"][0] < 1
    assert cache.cache_hits + cache.cache_misses - asked == 2  # the new answer's two metrics only
    cache.close()
