"""The judges themselves: the support baseline's thresholds, the in-process grammar judge's labels, and the HTTP
judge against a server without structured output (it falls back to short plain labels; what it cannot read is a
failure). The real llama-server path is in tests/cli/test_judge.py."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragopt.judge.judges import HttpJudge, JudgeConfig, LlamaJudge, SupportJudge
from ragopt.judge.judging import JudgeItem, judge_items
from ragopt.judge.verdicts import VerdictRequest
from ragopt.resources import Resources
from ragopt.backends.llama_server import LlamaServer, find_binary

CLAIM = VerdictRequest("claim", "Where is the tower?", ("The Eiffel Tower is in Paris.",), "The tower is in Paris.")


def test_the_support_threshold_decides_a_partial_overlap() -> None:
    partial = VerdictRequest("claim", "q", ("The Eiffel Tower is in Paris.",), "The Eiffel Tower is in Rome near Milan.")
    assert SupportJudge(JudgeConfig(kind="support", min_support=0.3)).judge(partial).supported is True
    assert SupportJudge(JudgeConfig(kind="support", min_support=0.8)).judge(partial).supported is False


def test_the_grammar_judge_answers_only_yes_or_no(tiny_gguf: Path) -> None:
    with Resources() as resources:
        judge = LlamaJudge(JudgeConfig(kind="llama", model=str(tiny_gguf)), resources)
        verdicts = [judge.judge(VerdictRequest("claim", "q?", ("passage one", "passage two"), f"claim {i}")) for i in range(4)]
    assert all(v.raw in ("yes", "no") and v.supported == (v.raw == "yes") for v in verdicts)
    assert all(v.tokens_in > 0 and v.tokens_out >= 1 for v in verdicts)


class _PlainServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible server without structured output: 400 on response_format, else a fixed reply."""

    reply = "No, it is not."
    bodies: list[dict] = []

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, data: dict) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        self._send(200, {"data": [{"id": "plain-model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        if "response_format" in body:
            self._send(400, {"error": "response_format is not supported"})
            return
        self._send(200, {"choices": [{"message": {"content": type(self).reply}}], "usage": {"prompt_tokens": 40, "completion_tokens": 2}})


@pytest.fixture
def plain_server() -> Iterator[str]:
    _PlainServer.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PlainServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_without_structured_output_the_http_judge_reads_a_short_plain_label(plain_server: str) -> None:
    with Resources() as resources:
        judge = HttpJudge(JudgeConfig(kind="http", url=plain_server), resources)
        judge.check()
        first, second = judge.judge(CLAIM), judge.judge(CLAIM)
    assert first.supported is False and second.supported is False and judge.structured is False
    assert first.tokens_in == 40 and first.tokens_out == 2
    # structured once (refused), plain from then on, each plain request asking for a few tokens only
    assert ["response_format" in b for b in _PlainServer.bodies] == [True, False, False]
    assert all(b["max_tokens"] <= 3 for b in _PlainServer.bodies[1:])
    assert "plain-model" in judge.served


def test_an_unreadable_http_verdict_is_a_failure_and_is_not_averaged(plain_server: str, tmp_path: Path) -> None:
    from ragopt.cache import Cache

    _PlainServer.reply = "Perhaps."
    try:
        with Resources() as resources:
            judge = HttpJudge(JudgeConfig(kind="http", url=plain_server), resources)
            judge.check()
            item = JudgeItem("a", CLAIM.question, CLAIM.passages, "The tower is in Paris.")
            judged, totals = judge_items([item], judge, Cache(tmp_path / "c"), metrics=("faithfulness",))
    finally:
        _PlainServer.reply = "No, it is not."
    assert judged[0].faithfulness is None and judged[0].sentences[0].supported is None
    assert totals.failures == 1 and totals.calls == 1


@pytest.mark.skipif(find_binary() is None and not os.environ.get("CI"), reason="llama-server not built (scripts/build_llama_server.sh)")
def test_llama_server_takes_the_json_schema_and_every_verdict_parses(tiny_gguf: Path) -> None:
    with LlamaServer(tiny_gguf, ctx_per_slot=1024) as server, Resources() as resources:
        judge = HttpJudge(JudgeConfig(kind="http", url=server.base_url), resources)
        judge.check()
        verdicts = [judge.judge(VerdictRequest("claim", "q?", ("passage one",), f"claim {i}")) for i in range(4)]
    assert judge.structured is True  # the server accepted response_format: json_schema
    assert all(json.loads(v.raw)["verdict"] in ("yes", "no") and v.supported is not None for v in verdicts)
    assert all(str(tiny_gguf) in m for m in judge.served)
