"""Answer metrics through ragas, the ones that need no LLM: exact match, string presence, ROUGE-L, string
similarity, BLEU, chrF, and non-LLM context recall.

ragas is an optional dependency (`pip install "ragopt[answers]"`), imported only when a score is asked for,
with its usage telemetry switched off (RAGAS_DO_NOT_TRACK=true) before the import.

LLM-judged metrics are not answer metrics here: ragopt's own judges (ragopt.judge: `ragopt sweep --judge ...`,
`ragopt judge`) measure faithfulness, answer_correctness and context_relevance. Asking for a judged metric in
`answer_metrics` is an InputError that says so (and names the string metrics that need no judge).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from functools import cache
from typing import Any

from pydantic import BaseModel

from ragopt.errors import AnswerMetricsUnavailable, InputError
from ragopt.progress import host_logging_kept

# ragopt name -> what it measures (all in [0, 1]; higher is better)
NO_LLM_METRICS: dict[str, str] = {
    "exact_match": "1 when the answer equals the reference exactly (ragas ExactMatch; case-sensitive)",
    "string_presence": "1 when the reference occurs in the answer (ragas StringPresence)",
    "rouge_l": "ROUGE-L F-measure against the reference (ragas RougeScore)",
    "string_similarity": "1 - normalized Levenshtein distance to the reference (ragas NonLLMStringSimilarity)",
    "bleu": "sentence BLEU against the reference (ragas BleuScore)",
    "chrf": "chrF against the reference (ragas CHRFScore)",
    "context_recall_nonllm": "share of reference contexts matched by a retrieved context (ragas NonLLMContextRecall)",
}
LLM_METRICS = (
    "faithfulness", "answer_relevancy", "answer_correctness", "answer_accuracy", "factual_correctness",
    "context_precision", "context_recall", "context_relevance", "response_groundedness", "noise_sensitivity",
    "semantic_similarity",
)
DEFAULT_ANSWER_METRICS = ("exact_match", "string_presence", "rouge_l", "string_similarity")
CONTEXT_METRICS = {"context_recall_nonllm"}


class AnswerSample(BaseModel):
    response: str
    reference: str | None = None
    retrieved_contexts: list[str] | None = None
    reference_contexts: list[str] | None = None


def check_metrics(metrics: Sequence[str]) -> list[str]:
    """Validate metric names before any work is done; returns them lower-cased."""
    from ragopt.judge.judging import METRICS as JUDGED

    names = [m.strip().lower() for m in metrics]
    for name in names:
        if name in NO_LLM_METRICS:
            continue
        if name in LLM_METRICS:
            how = ("configure a judge (ragopt sweep --judge support|llama|http, or [judge] kind in the sweep TOML): it "
                   "reports it beside the answer metrics" if name in JUDGED else
                   f"ragopt's judges measure {', '.join(JUDGED)} (ragopt sweep --judge ...)")
            raise InputError(f"{name!r} is judged by an LLM, not an answer metric: {how}; answer metrics that need no "
                             "judge: " + ", ".join(NO_LLM_METRICS), field="answer_metrics")
        raise InputError(
            f"unknown answer metric {name!r}; known: {', '.join(NO_LLM_METRICS)} "
            f"(judged by an LLM: {', '.join(LLM_METRICS)})",
            field="answer_metrics",
        )
    return names


@cache
def load_ragas() -> dict[str, Any]:
    os.environ["RAGAS_DO_NOT_TRACK"] = "true"
    try:
        with warnings.catch_warnings(), host_logging_kept():
            warnings.simplefilter("ignore")
            from ragas import SingleTurnSample
            from ragas.metrics import NonLLMContextRecall  # only in the older API in ragas 0.4
            from ragas.metrics.collections import (
                BleuScore,
                CHRFScore,
                ExactMatch,
                NonLLMStringSimilarity,
                RougeScore,
                StringPresence,
            )
    except ImportError as exc:
        raise AnswerMetricsUnavailable(
            f"answer metrics need ragas and its string libraries: pip install 'ragopt[answers]' ({exc})"
        ) from exc
    return {
        "SingleTurnSample": SingleTurnSample,
        "exact_match": ExactMatch,
        "string_presence": StringPresence,
        "rouge_l": lambda: RougeScore(rouge_type="rougeL", mode="fmeasure"),
        "string_similarity": NonLLMStringSimilarity,
        "bleu": BleuScore,
        "chrf": CHRFScore,
        "context_recall_nonllm": NonLLMContextRecall,
    }


def score_answers(
    samples: Sequence[AnswerSample], metrics: Sequence[str] = DEFAULT_ANSWER_METRICS
) -> dict[str, list[float | None]]:
    """{metric: [score per sample]}; None where a sample lacks what the metric needs (a reference, contexts).
    String metrics score all samples in one batch (one event loop, not one per sample)."""
    with host_logging_kept():
        names = check_metrics(metrics)
        lib = load_ragas()
        out: dict[str, list[float | None]] = {}
        for name in names:
            scorer = lib[name]()
            values: list[float | None] = [None] * len(samples)
            if name in CONTEXT_METRICS:
                for i, s in enumerate(samples):
                    if s.reference_contexts and s.retrieved_contexts is not None:
                        sample = lib["SingleTurnSample"](
                            retrieved_contexts=s.retrieved_contexts, reference_contexts=s.reference_contexts
                        )
                        values[i] = float(scorer.single_turn_score(sample))
            else:
                scored = [i for i, s in enumerate(samples) if s.reference is not None]
                results = scorer.batch_score([{"reference": samples[i].reference, "response": samples[i].response}
                                              for i in scored]) if scored else []
                for i, result in zip(scored, results):
                    values[i] = float(result.value)
            out[name] = values
        return out


def score_answer(
    response: str,
    reference: str | None,
    metrics: Sequence[str] = DEFAULT_ANSWER_METRICS,
    retrieved_contexts: list[str] | None = None,
    reference_contexts: list[str] | None = None,
) -> dict[str, float | None]:
    sample = AnswerSample(
        response=response,
        reference=reference,
        retrieved_contexts=retrieved_contexts,
        reference_contexts=reference_contexts,
    )
    return {name: values[0] for name, values in score_answers([sample], metrics).items()}
