"""The citation grammar: llama.cpp's own GBNF parser accepts it for one and for many passages."""

from __future__ import annotations

import pytest

from ragopt.backends.citation_grammar import citation_grammar


def test_numbers_are_exactly_the_passages_given():
    text = citation_grammar(12)
    number_rule = next(line for line in text.splitlines() if line.startswith("number ::="))
    assert number_rule.split("::=")[1].split("|") == [f' "{n}" ' for n in range(12, 1, -1)] + [' "1"']
    assert 'root ::= sentence (" " sentence){0,2}' in text
    assert citation_grammar(3, max_sentences=1).splitlines()[0] == "root ::= sentence"


def test_no_passages_no_grammar():
    with pytest.raises(ValueError, match="at least one passage"):
        citation_grammar(0)


@pytest.mark.parametrize("n_passages", [1, 12])
def test_llama_cpp_parses_it(tiny_gguf, n_passages):
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(tiny_gguf), n_ctx=256, n_threads=1, verbose=False)
    try:
        sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, citation_grammar(n_passages).encode(), b"root")
        assert sampler  # a NULL pointer (falsy) when the grammar does not parse
        llama_cpp.llama_sampler_free(sampler)
        broken = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, b"root ::= [", b"root")
        assert not broken  # the check above can fail
    finally:
        llm.close()
