"""Instructions are instructions, through `ragopt serve` and the openai SDK: a client's system message is the
prompt's system part. In a conversation of 10 turns that the history stage cuts to its last 2 (the rest
summarized by cue words, which keep nothing of "Reply in French."), the instruction is still in the prompt, whole,
and the trace shows it there; one that cannot fit the prompt's budget is a 400 naming `messages`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fixtures.serving import running_service

from ragopt.config import ChunkerConfig, RetrievalConfig
from ragopt.plan import PlanConfig
from ragopt.serve.build import ServeOptions
from ragopt.serve.service import ServeSettings
from ragopt.shipped import shipped_dataset

KEY = "key-north"
INSTRUCTION = "Reply in French."
TURNS = [
    ("user", "I am querying LAB_GLU_FAST."), ("assistant", "LAB_GLU_FAST is fasting plasma glucose [1]."),
    ("user", "What unit is it in?"), ("assistant", "Its values are in mmol/L [1]."),
    ("user", "And LAB_HBA1C?"), ("assistant", "LAB_HBA1C is glycated haemoglobin [2]."),
    ("user", "Which table holds it?"), ("assistant", "The chemistry results table holds it [3]."),
    ("user", "Thanks, that helps."), ("assistant", "Glad to help."),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("instructions")
    keys = root / "keys.json"
    keys.write_text(json.dumps({KEY: {"tenant": "north-hospital", "scopes": ["clinical", "ops"]}}), encoding="utf-8")
    plan = PlanConfig(chunker=ChunkerConfig(mode="tokens", size=64, overlap=16), retrieval=RetrievalConfig(retriever="bm25", top_k=5),
                      stages={"history": {"keep_turns": 2}, "prompt": {"budget_tokens": 2048},
                              "generate": {"generator": "extractive"}})
    opts = ServeOptions(settings=ServeSettings(), plan=plan, dataset=str(shipped_dataset() / "questions.jsonl"), cache=False)
    with running_service(opts, root / "ws", keys) as (url, _):
        import openai

        yield openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)


def _ask(client: Any, system: str | None, role: str = "system") -> dict[str, Any]:
    messages = ([{"role": role, "content": system}] if system else []) + [{"role": r, "content": c} for r, c in TURNS]
    done = client.chat.completions.create(model="ragopt", messages=[*messages, {"role": "user", "content": "Who loads it?"}])
    return done.model_extra["ragopt"]["trace"]


@pytest.mark.parametrize("role", ["system", "developer"])
def test_a_system_message_survives_ten_turns_cut_to_two_and_the_trace_shows_it_in_the_prompt(served: Any, role: str) -> None:
    trace = _ask(served, INSTRUCTION, role)
    assert trace["history"]["turns"] == 10 and trace["history"]["summarized_turns"] == 8  # 2 kept verbatim
    history = next(s for s in trace["spans"] if s["name"] == "history")["usage"]["attrs"]
    assert history["history_turns_in"] == 10  # the instruction is no history turn to summarize
    prompt = next(s for s in trace["spans"] if s["name"] == "prompt")["usage"]["attrs"]
    assert prompt["instructions"] == INSTRUCTION and prompt["instructions_tokens"] > 0
    assert trace["prompt"]["instructions_tokens"] == prompt["instructions_tokens"]
    without = _ask(served, None)
    assert "instructions" not in next(s for s in without["spans"] if s["name"] == "prompt")["usage"]["attrs"]
    assert without["prompt"]["tokens"] < trace["prompt"]["tokens"] and without["prompt"]["instructions_tokens"] == 0


def test_instructions_that_cannot_fit_the_budget_are_a_400_naming_messages(served: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as refused:
        _ask(served, "Always answer in French. " * 1000)
    assert refused.value.status_code == 400 and "messages" in json.dumps(refused.value.body)  # the field it names
    assert _ask(served, INSTRUCTION)["prompt"]["instructions_tokens"] > 0  # the service answers on
