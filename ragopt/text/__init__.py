"""Language-aware text: sentence spans, word tokens, script shares and the analyzers BM25 and the stages
that match words share (see ragopt.text.analyzers)."""

from ragopt.text.analyzers import ANALYZERS, Analyzer, analyzer_for, detect_analyzer, holds_phrase, make_analyzer, plain_terms
from ragopt.text.script import ScriptShare, has_han
from ragopt.text.sentences import clause_spans, sentence_spans, sentences
from ragopt.text.words import char_boundary, word_matches, word_spans, word_units, words

__all__ = ["ANALYZERS", "Analyzer", "analyzer_for", "char_boundary", "clause_spans", "ScriptShare", "detect_analyzer", "has_han",
           "holds_phrase", "make_analyzer", "plain_terms", "sentence_spans", "sentences", "word_matches", "word_spans",
           "word_units", "words"]
