import os

import pytest

from ragopt.errors import InputError
from ragopt.eval.answers import NO_LLM_METRICS, AnswerSample, check_metrics, score_answer, score_answers


@pytest.fixture(scope="module")
def ragas_ok():
    os.environ["RAGAS_DO_NOT_TRACK"] = "true"
    try:
        import ragas.metrics.collections  # noqa: F401
        import rapidfuzz  # noqa: F401
        import rouge_score  # noqa: F401
        import sacrebleu  # noqa: F401
    except Exception as exc:  # a broken ragas install fails in many ways, not only ImportError
        pytest.skip(f"ragas unavailable: {exc}")


def test_unknown_and_llm_metrics_rejected_before_import():
    with pytest.raises(InputError) as e:
        check_metrics(["faithfulness"])
    assert "judge" in str(e.value) and "rouge_l" in str(e.value)
    with pytest.raises(InputError) as e:
        check_metrics(["bogus"])
    assert "exact_match" in str(e.value) and e.value.field == "answer_metrics"
    with pytest.raises(InputError, match="--judge"):  # ragopt's judges measure it, outside answer_metrics
        check_metrics(["answer_relevancy"])
    assert check_metrics(["ROUGE_L"]) == ["rouge_l"]


def test_scores(ragas_ok):
    same = score_answer("Paris is the capital.", "Paris is the capital.", metrics=list(NO_LLM_METRICS))
    assert same["exact_match"] == 1.0
    assert same["string_presence"] == 1.0
    assert same["rouge_l"] == pytest.approx(1.0)
    assert same["string_similarity"] == pytest.approx(1.0)
    assert same["context_recall_nonllm"] is None  # no contexts given
    assert os.environ["RAGAS_DO_NOT_TRACK"] == "true"

    out = score_answers(
        [
            AnswerSample(response="The capital of France is Paris.", reference="Paris"),
            AnswerSample(response="I do not know.", reference="Paris"),
            AnswerSample(response="no reference"),
            AnswerSample(
                response="x",
                retrieved_contexts=["the cat sat on the mat", "dogs bark"],
                reference_contexts=["the cat sat on the mat", "birds fly high"],
            ),
        ],
        metrics=["exact_match", "string_presence", "rouge_l", "context_recall_nonllm"],
    )
    assert out["exact_match"][:3] == [0.0, 0.0, None]
    assert out["string_presence"][:2] == [1.0, 0.0]
    assert 0 < out["rouge_l"][0] < 1 and out["rouge_l"][1] == 0.0
    assert out["context_recall_nonllm"] == [None, None, None, pytest.approx(0.5)]


def test_scoring_leaves_the_host_logging_alone(ragas_ok):
    # In a fresh interpreter: within this one an earlier test may already have imported ragas.
    import subprocess
    import sys

    script = (
        "import logging\n"
        "from ragopt.eval.answers import AnswerSample, score_answers\n"
        "score_answers([AnswerSample(response='The unit is mmol/L.', reference='mmol/L')], ['string_presence', 'rouge_l'])\n"
        "print(len(logging.getLogger().handlers), logging.getLogger().level)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "30"]  # no root handler, level still WARNING
