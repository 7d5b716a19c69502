"""Stream = answer, through `ragopt serve` and the openai SDK as real clients call it (caches off): every shipped
main-job question's streamed text, concatenated, equals the same question's unstreamed answer, with the same
citations, under citation attribution that renumbers the markers; with a tool stage whose service is down, the
docs-only notice is streamed too; a real llama.cpp generator streams token by token what its answer says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fixtures.serving import running_service

from ragopt.backends.child_server import free_port
from ragopt.backends.collection_status import SCHEMA
from ragopt.config import ChunkerConfig, RetrievalConfig
from ragopt.data import load_evalset
from ragopt.plan import PlanConfig
from ragopt.serve.build import ServeOptions
from ragopt.serve.service import ServeSettings
from ragopt.shipped import shipped_dataset

MAIN_JOB = shipped_dataset() / "questions.jsonl"
TOOL_QUESTIONS = shipped_dataset() / "tool_questions.jsonl"
NOTICE = "this answer covers the documents only"


def _key(tenant: str | None, scopes: tuple[str, ...]) -> str:
    return f"key-{tenant}-{'-'.join(scopes) or 'none'}"


def _keys(tmp_path: Path, *evalsets: Any) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({_key(q.query.tenant, q.query.scopes): {"tenant": q.query.tenant, "scopes": list(q.query.scopes)}
                                for e in evalsets for q in e.queries}), encoding="utf-8")
    return path


def _plan(generate: dict[str, Any], tool_down: bool) -> PlanConfig:
    """The main job's chunks (64 tokens) and K = 5 over BM25, a generator, attribution replacing its markers and,
    with `tool_down`, the collection-status tool at a port nothing listens on."""
    stages: dict[str, dict[str, Any]] = {"generate": generate, "cite": {"mode": "replace"}}
    if tool_down:
        stages["tool"] = {"call": "rule", "url": f"http://127.0.0.1:{free_port()}/status", "result_schema": json.dumps(SCHEMA),
                          "timeout_s": 0.5, "breaker_failures": 10_000}  # every answer says why: the connection, not the breaker
    return PlanConfig(chunker=ChunkerConfig(mode="tokens", size=64, overlap=16),
                      retrieval=RetrievalConfig(retriever="bm25", top_k=5), stages=stages)


def _chat(url: str, q: Any, stream: bool) -> tuple[str, list[dict[str, Any]]]:
    """(text, citations) as the openai SDK gives them, streamed or not."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key=_key(q.query.tenant, q.query.scopes), max_retries=0, timeout=120)
    messages = [{"role": "user", "content": q.query.text}]
    if not stream:
        done = client.chat.completions.create(model="ragopt", messages=messages)
        return done.choices[0].message.content, done.model_extra["ragopt"]["citations"]
    pieces, citations = [], None
    for chunk in client.chat.completions.create(model="ragopt", messages=messages, stream=True):
        pieces += [c.delta.content for c in chunk.choices if c.delta.content]
        if chunk.model_extra.get("ragopt"):
            citations = chunk.model_extra["ragopt"]["citations"]
    return "".join(pieces), citations


def _compare(url: str, queries: list[Any]) -> tuple[int, list[str]]:
    """(how many streamed answers equal the unstreamed ones, citations included; the unstreamed answers)."""
    same = 0
    answers: list[str] = []
    for q in queries:
        whole, cited = _chat(url, q, stream=False)
        streamed, streamed_cited = _chat(url, q, stream=True)
        same += streamed == whole and streamed_cited == cited
        if streamed != whole or streamed_cited != cited:
            print(f"{q.query.id}:\n  whole    {whole!r} {cited}\n  streamed {streamed!r} {streamed_cited}")
        answers.append(whole)
    return same, answers


def test_streamed_answers_equal_the_unstreamed_ones_for_every_main_job_question(tmp_path: Path) -> None:
    main, tools = load_evalset(MAIN_JOB), load_evalset(TOOL_QUESTIONS)
    keys = _keys(tmp_path, main, tools)
    plain = ServeOptions(settings=ServeSettings(slots=2), plan=_plan({"generator": "extractive"}, tool_down=False),
                         dataset=str(MAIN_JOB), cache=False)
    with running_service(plain, tmp_path / "ws", keys) as (url, _):
        same, answers = _compare(url, main.queries)
    print(f"main job: {same}/{len(main.queries)} streamed = unstreamed")
    assert len(main.queries) == 249 and same == 249
    assert sum("[" in a for a in answers) >= 200  # cited: the markers were streamed
    down = ServeOptions(settings=ServeSettings(slots=2), plan=_plan({"generator": "extractive"}, tool_down=True),
                        dataset=str(TOOL_QUESTIONS), cache=False)
    with running_service(down, tmp_path / "ws", keys) as (url, _):
        same, answers = _compare(url, tools.queries)
    print(f"tool down: {same}/{len(tools.queries)} streamed = unstreamed; {sum(NOTICE in a for a in answers)} with the notice")
    assert same == len(tools.queries)
    assert sum(NOTICE in a for a in answers) >= 10  # the tool was wanted and down: the notice is part of the stream


def _ask_sse(url: str, q: Any) -> tuple[list[str], dict[str, Any]]:
    """/v1/ask streamed: its token pieces, and its done event (the answer the request ended with)."""
    import httpx

    pieces, done = [], None
    headers = {"Authorization": f"Bearer {_key(q.query.tenant, q.query.scopes)}"}
    with httpx.stream("POST", f"{url}/v1/ask", json={"question": q.query.text, "stream": True}, headers=headers,
                      timeout=300) as response:
        event = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "token":
                    pieces.append(data["text"])
                elif event == "done":
                    done = data
    assert done is not None
    return pieces, done


def test_a_llama_answer_streams_token_by_token_what_it_says(tmp_path: Path, smollm2: Path) -> None:
    tools = load_evalset(TOOL_QUESTIONS)
    wanted = [q for q in tools.queries if "last" in q.query.text.lower()][:2]
    main = load_evalset(MAIN_JOB).queries[::124]  # 3 main-job questions, spread over the set
    keys = _keys(tmp_path, tools, load_evalset(MAIN_JOB))
    generate = {"generator": "llama", "model": str(smollm2), "n_ctx": 2048, "max_tokens": 48}
    opts = ServeOptions(settings=ServeSettings(slots=1), plan=_plan(generate, tool_down=True), dataset=str(TOOL_QUESTIONS),
                        cache=False)
    with running_service(opts, tmp_path / "ws", keys) as (url, _):
        asked = [(q, *_ask_sse(url, q)) for q in [*main, *wanted]]
        chats = [(_chat(url, q, stream=True), _chat(url, q, stream=False)) for q in main]
    for q, pieces, done in asked:
        assert "".join(pieces) == done["answer"], q.query.id
        assert len(pieces) > 2  # streamed, not sent whole at the end
    attributed = [next(s["usage"]["attrs"] for s in done["trace"]["spans"] if s["name"] == "attribute") for *_, done in asked]
    assert any(a["added"] or a["replaced"] or a["repaired"] for a in attributed)  # SmolLM2's markers were rewritten
    assert all(NOTICE in done["answer"] for _, _, done in asked[len(main):])
    for streamed, whole in chats:
        assert streamed == whole
