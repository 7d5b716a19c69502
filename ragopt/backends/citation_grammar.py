"""A llama.cpp GBNF grammar that makes every answer sentence end with a citation of a passage it was given.

    Paris is the capital of France [1]. It lies on the Seine [1][3].

Each sentence: a non-blank first character, text without brackets or sentence-ending punctuation (a "." is
allowed only between two digits, as in 3.5: a free "." after a digit let SmolLM2 loop "0.0.0..."), then one to three markers [n] with n in 1..n_passages, then ".". At
most `max_sentences` sentences (the default instructions ask for one to three), after which the grammar
admits only end-of-generation. Each sentence's text is capped at `max_sentence_chars` so decoding always
reaches a citation, even from a model that would ramble.

SmolLM2-135M cites by itself in a minority of answers (../shared/NOTES.md: 17.5% on 40 questions); under
this grammar every complete sentence carries a valid marker. The cost is per decoded token (llama.cpp
checks the grammar against the vocabulary at every step): see benchmarks/bench_citation_grammar.py.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=64)
def citation_grammar(n_passages: int, max_sentences: int = 3, max_sentence_chars: int = 300) -> str:
    """The GBNF text for answers citing passages 1..n_passages (n_passages >= 1)."""
    if n_passages < 1:
        raise ValueError("a citation grammar needs at least one passage to cite")
    if max_sentences < 1 or max_sentence_chars < 2:
        raise ValueError("max_sentences must be >= 1 and max_sentence_chars >= 2")
    numbers = " | ".join(f'"{n}"' for n in range(n_passages, 0, -1))
    more = f' (" " sentence){{0,{max_sentences - 1}}}' if max_sentences > 1 else ""
    return "\n".join(
        [
            f"root ::= sentence{more}",
            'sentence ::= first rest cite "."',
            r"first ::= [^\[\] \n.!?]",
            rf'rest ::= ([^\[\]\n.!?] | [0-9] "." [0-9]){{0,{max_sentence_chars - 1}}}',
            r'cite ::= " "? ("[" number "]"){1,3}',
            f"number ::= {numbers}",
            "",
        ]
    )
