"""Query rewrite: rules first, the LLM only for follow-ups that need the conversation to be understood.

Order of work on `query.text` (the query's tenant and scopes are never touched):

1. normalize: Unicode NFC, straight quotes, one space between words, no space before punctuation, repeated
   ?/! collapsed, an all-capitals question put in sentence case (identifiers such as LAB_K keep theirs);
2. resolve a follow-up, only when the question depends on the conversation (`follow_up_rule`): a referring
   pronoun (it, its, they, this, that...), an ellipsis ("And the range?", "What about LAB_K?") or a very short
   question, with a history to resolve against. Rules: the entity named in the last user turn goes into the
   pronoun slot, and entities the last answer added go after the question as context; "What about X?"
   repeats the last question with X in place of its entity. The other names of the last exchange follow the
   question as context ("(about ...)"), so retrieval still sees them when the slot got the wrong one. Mode "llm" lets the LLM (SmolLM2 by default,
   through the generator's llama.cpp engine) choose the referent instead, when the conversation names more
   than one thing: its answer is constrained by a grammar to one of the names in the conversation, so a
   small model classifies rather than writes (SmolLM2-135M asked to write the whole question rewrote few of
   the shipped follow-ups and invented facts in most: "LAB_CRP is a metabolite of LAB_CHEF");
3. expand the user's glossary: "ICU" becomes "ICU (intensive care unit)", so both spellings match; whole words
   as the BM25 analyzer sees them, so "请问ICU在哪" and Chinese abbreviations match too.

Mode "multi" also produces query variants (`QueryRewrite.variants`); `MultiQueryRetrieve`
(ragopt.stages.multi_query) retrieves for each and fuses the lists with RRF. LLM rewrites are cached under a
`CacheKey` with tenant, scopes, model fingerprint and prompt version (rules cost less than a cache lookup).
The trace shows `original_query`, `rewritten_query` and `rewrite`: the rules that fired, e.g. "normalize+pronoun",
"pronoun:llm" where the LLM chose the referent, or "none"; with `llm_referent` / `llm_rejected` in mode llm.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterator, Literal, Mapping, Sequence

from pydantic import Field

from ragopt.cache import Cache, CacheKey
from ragopt.config import StrictModel, fingerprint, knob
from ragopt.errors import ContextOverflow, InputError, QueueTimeout
from ragopt.pipeline import RequestState, Stage
from ragopt.resources import Resources
from ragopt.stages.generate_llama import GeneratorConfig, get_engine
from ragopt.stages.multi_query import MultiQueryRetrieve
from ragopt.stages.spec import BuildContext, ModelFile, Plan, StageSpec
from ragopt.text import Analyzer, analyzer_for
from ragopt.trace import Usage
from ragopt.types import Query, Turn

RewriteMode = Literal["off", "rules", "llm", "multi"]

LLM_SYSTEM = "You resolve references in a conversation. Answer with the name only, copied exactly from the conversation."
LLM_QUESTION = "What is the last question about?"


class RewriteConfig(StrictModel):
    mode: RewriteMode = knob("rules", sweep=["off", "rules", "llm", "multi"],
                             description="off; rules; llm (the LLM picks what a follow-up refers to); multi (rules plus query variants fused with RRF)")
    glossary: str | dict[str, str] | None = Field(
        None, description="abbreviations to expand: a mapping, or a file (JSON object, or `ABBR = expansion` lines)")
    prompt_version: str = Field("rewrite-v1", description="bump when the LLM prompt changes: it is part of cache keys")
    llm: GeneratorConfig = Field(
        GeneratorConfig(n_ctx=1536, max_tokens=48),
        description="the model for mode llm; a context size unlike the generator's gives it an engine of its own "
                    "(shared with history summaries), so a rewrite does not evict the generator's cached prompt prefix")
    llm_history_turns: int = Field(4, ge=1, description="most recent turns shown to the LLM")
    max_variants: int = Field(3, ge=1, description="query variants retrieved in mode multi (the rewrite included)")


@dataclass(frozen=True)
class Rewrite:
    text: str
    rule: str  # "+"-joined rules that fired ("llm" where the LLM chose the referent), or "none"
    variants: tuple[str, ...]  # mode multi: the texts to retrieve with, best first; else (text,)
    tokens_in: int = 0
    tokens_out: int = 0
    cache_hit: bool | None = None  # None: no LLM involved
    llm_referent: str | None = None  # what the LLM said the follow-up is about
    llm_rejected: str | None = None  # why the LLM's answer was not used


# --- glossary ---------------------------------------------------------------------------------------


def load_glossary(source: str | Path | Mapping[str, str] | None) -> dict[str, str]:
    """Abbreviation -> expansion, from a mapping or a file; an empty or malformed file is an InputError."""
    if source is None:
        return {}
    if isinstance(source, Mapping):
        entries = {str(k).strip(): str(v).strip() for k, v in source.items()}
        if any(not k or not v for k, v in entries.items()):
            raise InputError("glossary entries need a non-empty abbreviation and expansion", field="glossary")
        return entries
    path = Path(source)
    try:
        raw = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError("glossary file not found", path=path, field="glossary") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the glossary: {exc}", path=path, field="glossary") from None
    entries: dict[str, str] = {}
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg}", path=path, line=exc.lineno, field="glossary") from None
        if not isinstance(data, dict) or not all(isinstance(v, str) and v.strip() for v in data.values()):
            raise InputError("a JSON glossary is one object of abbreviation -> expansion strings", path=path, field="glossary")
        entries = {k.strip(): v.strip() for k, v in data.items() if k.strip()}
    else:
        for n, line in enumerate(raw.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            abbr, sep, expansion = line.partition("=")
            if not sep or not abbr.strip() or not expansion.strip():
                raise InputError("expected `ABBR = expansion`", path=path, line=n, field="glossary")
            entries[abbr.strip()] = expansion.strip()
    if not entries:
        raise InputError("the glossary is empty", path=path, field="glossary")
    return entries


def _whole_word(text: str, start: int, end: int, abbr: str, starts: set[int], ends: set[int]) -> bool:
    """Whether text[start:end] (an occurrence of `abbr`) stands as whole words: where the abbreviation begins or
    ends with a letter or digit, that edge is a word edge of the analyzer; elsewhere no word continues it; never
    inside a dotted or hyphenated name."""
    before, after = text[start - 1 : start], text[end : end + 1]
    if before in (".", "-") or after == "-":
        return False
    head_ok = start in starts if abbr[0].isalnum() else not before.isalnum()
    tail_ok = end in ends if abbr[-1].isalnum() else not after.isalnum()
    return head_ok and tail_ok


def expand_glossary(text: str, glossary: Mapping[str, str], analyzer: Analyzer | None = None) -> tuple[str, bool]:
    """"ABBR" -> "ABBR (expansion)" for whole-word matches (case-insensitive), unless the expansion is there.

    Words are the analyzer's (the BM25 one; by default the one the text's script calls for): "ICU" matches in
    "请问ICU在哪" and "医保" in "医保卡在哪办" (jieba's search mode finds it inside the longer word), not in "ICUs"."""
    analyzer = analyzer or analyzer_for([text])
    changed = False
    for abbr, expansion in sorted(glossary.items(), key=lambda kv: -len(kv[0])):
        if expansion.casefold() in text.casefold():
            continue
        spans = analyzer.word_spans(text)
        starts, ends = {s for s, _ in spans}, {e for _, e in spans}
        found = next((m.end() for m in re.finditer(re.escape(abbr), text, re.IGNORECASE)
                      if _whole_word(text, m.start(), m.end(), abbr, starts, ends)), None)
        if found is not None:
            text, changed = f"{text[:found]} ({expansion}){text[found:]}", True
    return text, changed


# --- normalization ----------------------------------------------------------------------------------

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "})
# snake_case, digits, CamelCase or dotted names (not units such as mL/min or mmol/L), and acronyms
_IDENTIFIER = re.compile(r"\b[\w.\-]*(?:_|\d|[a-z][A-Z][a-z]|\.[a-z])[\w.\-]*\b|\b[A-Z][A-Z0-9]+\b")
_PROPER = re.compile(r"(?<![.?!]\s)(?<!^)\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")
_CITATION = re.compile(r"\s*\[\d+\]")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFC", text).translate(_QUOTES)
    text = " ".join(text.split())
    text = re.sub(r"\s+([?.!,;:])", r"\1", text)
    text = re.sub(r"([?!])[?!]+", r"\1", text)
    letters = [w for w in re.findall(r"[^\W\d_]+", text) if len(w) > 1]
    if len(letters) >= 3 and all(w.isupper() for w in letters):  # shouting: sentence case, identifiers kept
        words = [w if ("_" in w or any(c.isdigit() for c in w)) else w.lower() for w in text.split(" ")]
        text = " ".join(words)
        text = text[:1].upper() + text[1:]
    return text


# --- follow-up detection and rule-based resolution ----------------------------------------------------

_REFERRING = {"it", "its", "they", "them", "their", "he", "she", "him", "his", "her"}
_DEMONSTRATIVE = {"this", "that", "these", "those"}  # also relativizers: they refer only in a question without its own entity
_POSSESSIVE = {"its", "their", "his"}  # "her" is taken as an object: "ask her"
_ELLIPSIS = re.compile(r"^(?:and|also|what about|how about|same for|and what about|and how about)\b", re.IGNORECASE)
_SHORT_WORDS = 3


def entities(text: str) -> list[str]:
    """Identifier-like tokens (LAB_K, lab_chem_ingest, HbA1c, ICU, ndw.lab_result) first, then capitalized names
    that do not start a sentence; citation markers ignored."""
    text = _CITATION.sub("", text)
    found = [m.group(0).strip(".-/") for m in _IDENTIFIER.finditer(text)]
    found += [m.group(0) for m in _PROPER.finditer(text) if m.group(0) not in {"I"}]
    return list(dict.fromkeys(e for e in found if e[:1].isalpha()))  # not 3rd, 1.73 or 15min


def follow_up_rule(text: str, history: list[Turn]) -> str | None:
    """"pronoun", "ellipsis" or "short" when the question needs the conversation to be understood, else None."""
    if not any(t.role in ("user", "assistant") for t in history):
        return None
    tokens = re.findall(r"[\w']+", text.lower())
    own = entities(text)
    if any(t in _REFERRING for t in tokens) or (not own and any(t in _DEMONSTRATIVE for t in tokens)):
        return "pronoun"
    if _ELLIPSIS.match(text):
        return "ellipsis"
    if len(tokens) <= _SHORT_WORDS and not own:
        return "short"
    return None


def _last(history: list[Turn], role: str) -> Turn | None:
    return next((t for t in reversed(history) if t.role == role), None)


def resolve_by_rules(text: str, history: list[Turn], rule: str, referent: str | None = None) -> str:
    """A stand-alone question from a follow-up (see the module docstring); `referent` overrides the rules' choice."""
    user = _last(history, "user")
    user_entities = entities(user.content) if user else []
    answer = history[-1] if history and history[-1].role == "assistant" else None
    answer_entities = [e for e in entities(answer.content) if e not in user_entities] if answer else []
    own = entities(text)
    if rule == "ellipsis" and own and user is not None and user_entities:
        # "What about LAB_K?" after "What unit is LAB_NA in?" -> "What unit is LAB_K in?"
        return normalize(user.content.replace(user_entities[0], own[0], 1))
    referent = referent or (user_entities[0] if user_entities else (answer_entities[0] if answer_entities else None))
    if referent is None:  # nothing named: the last question itself is the best context there is
        return f"{text} (after: {normalize(user.content)})" if user is not None else text
    out = text
    if rule == "pronoun":
        pronouns = _REFERRING | (set() if own else _DEMONSTRATIVE)
        pattern = re.compile(r"\b(" + "|".join(sorted(pronouns, key=len, reverse=True)) + r")\b", re.IGNORECASE)
        out = pattern.sub(lambda m: f"{referent}'s" if m.group(1).lower() in _POSSESSIVE else referent, text, count=1)
    context = list(dict.fromkeys(e for e in [referent, *user_entities, *answer_entities] if e not in out))
    if context:
        out = f"{out} (about {', '.join(context[:3])})"
    return out


# --- the stage --------------------------------------------------------------------------------------


class QueryRewrite:
    """Pipeline stage: rewrites `state.query.text` (see the module docstring); tenant and scopes are kept."""

    reads = ("query",)
    writes = ("query",)

    def __init__(self, config: RewriteConfig | None = None, cache: Cache | None = None, name: str = "rewrite",
                 resources: Resources | None = None, analyzer: Analyzer | None = None):
        self.config = config or RewriteConfig()
        self.name = name
        self.analyzer = analyzer  # the BM25 index's, so a glossary word is a word as retrieval sees it
        self.resources = resources if resources is not None else Resources()  # the LLM, in llm mode
        self.glossary = load_glossary(self.config.glossary)  # bad input fails here, before any request
        if self.config.mode == "llm":
            from ragopt.gguf_meta import resolve_model

            resolve_model(self.config.llm.model)  # a missing model too
        self.cache = cache if cache is not None else Cache(None)

    def run(self, state: RequestState) -> RequestState:
        original = state.query
        result = self.rewrite(original, timeout_s=state.remaining_s())
        state.query = original.model_copy(update={"text": result.text})
        self.report(state.usage, original.text, result)
        return state

    @staticmethod
    def report(usage: Usage, original: str, result: Rewrite) -> None:
        usage.attrs.update({"original_query": original, "rewritten_query": result.text, "rewrite": result.rule})
        if len(result.variants) > 1:
            usage.attrs["query_variants"] = list(result.variants)
        if result.llm_referent:
            usage.attrs["llm_referent"] = result.llm_referent
        if result.llm_rejected:
            usage.attrs["llm_rejected"] = result.llm_rejected
        usage.tokens_in += result.tokens_in
        usage.tokens_out += result.tokens_out
        if result.cache_hit is not None:
            usage.cache_hits += int(result.cache_hit)
            usage.cache_misses += int(not result.cache_hit)

    def rewrite(self, query: Query, timeout_s: float | None = None) -> Rewrite:
        mode = self.config.mode
        if mode == "off":
            return Rewrite(text=query.text, rule="off", variants=(query.text,))
        rules: list[str] = []
        text = normalize(query.text)
        if text != query.text:
            rules.append("normalize")
        follow_up = follow_up_rule(text, query.history)
        llm: Rewrite | None = None
        if follow_up is not None and mode == "llm" and not (follow_up == "ellipsis" and entities(text)):
            llm = self._llm_referent(text, query, timeout_s)
        if follow_up is not None:
            chosen = llm.llm_referent if llm is not None and llm.llm_rejected is None else None
            text = resolve_by_rules(text, query.history, follow_up, chosen)
            rules.append(f"{follow_up}:llm" if chosen else follow_up)
        text, expanded = expand_glossary(text, self.glossary, self.analyzer)
        if expanded:
            rules.append("glossary")
        variants = self.variants(query, text, follow_up) if mode == "multi" else (text,)
        extra = {} if llm is None else {"tokens_in": llm.tokens_in, "tokens_out": llm.tokens_out, "cache_hit": llm.cache_hit,
                                         "llm_referent": llm.llm_referent, "llm_rejected": llm.llm_rejected}
        return Rewrite(text=text, rule="+".join(rules) or "none", variants=variants, **extra)

    def variants(self, query: Query, rewritten: str, follow_up: str | None) -> tuple[str, ...]:
        """The rewrite, then the question as asked (normalized, unexpanded) unless it is a follow-up that cannot
        stand alone, then the last user turn joined to the question (follow-ups only)."""
        asked = normalize(query.text)
        out = [rewritten]
        if follow_up is None:
            out.append(asked)
        else:
            user = _last(query.history, "user")
            if user is not None:
                out.append(f"{normalize(user.content)} {asked}")
        return tuple(dict.fromkeys(out))[: self.config.max_variants]

    # --- LLM resolution ---

    @cached_property
    def _model_fingerprint(self) -> str:
        from ragopt.gguf_meta import model_fingerprint, resolve_model

        return model_fingerprint(resolve_model(self.config.llm.model))

    def _llm_referent(self, text: str, query: Query, timeout_s: float | None) -> Rewrite | None:
        """The LLM's choice among the names in the recent conversation (None when there is no choice to make)."""
        from ragopt.stages.llm_text import Completion, complete

        cfg = self.config
        turns = [t for t in query.history if t.role in ("user", "assistant")][-cfg.llm_history_turns :]
        candidates = list(dict.fromkeys(e for t in turns for e in entities(t.content)))
        if len(candidates) < 2:
            return None
        shown = "\n".join(f"{t.role.capitalize()}: {' '.join(t.content.split())[:400]}" for t in turns)
        user = f"{shown}\nUser: {text}\n\n{LLM_QUESTION}"
        key = CacheKey(
            namespace="rewrite",
            tenant=query.tenant,
            scopes=query.scopes,
            model=self._model_fingerprint,
            prompt_version=f"{cfg.prompt_version}-{fingerprint([LLM_SYSTEM, LLM_QUESTION, cfg.llm.max_tokens])}",
            payload={"text": text, "history": [t.model_dump() for t in turns]},
        )
        done: list[Completion] = []

        def ask(_: list[int]) -> Iterator[tuple[int, str]]:
            done.append(complete(get_engine(cfg.llm, self.resources), LLM_SYSTEM, user, (query.tenant, tuple(query.scopes)),
                                 max_tokens=cfg.llm.max_tokens, timeout_s=timeout_s, choices=candidates))
            yield 0, done[0].text

        try:
            found = self.cache.get_or_compute([key], ask)
        except (QueueTimeout, ContextOverflow) as exc:  # busy model or an oversized prompt: the rules answer
            return Rewrite(text=text, rule="llm", variants=(text,), cache_hit=False, llm_rejected=f"{type(exc).__name__}: {exc}")
        out, hit = found.values[0], found.cache_hits == 1
        tokens_in, tokens_out = (done[0].tokens_in, done[0].tokens_out) if done else (0, 0)
        rejected = None if out in candidates else f"not a name from the conversation: {out[:80]!r}"
        return Rewrite(text=text, rule="llm", variants=(text,), tokens_in=tokens_in, tokens_out=tokens_out,
                       cache_hit=hit, llm_referent=out, llm_rejected=rejected)


def with_rewrite(rewriter: QueryRewrite, retrieval: Sequence[Stage]) -> list[Stage]:
    """The stages for a rewrite mode: the retrieval alone ("off"), the rewrite then the retrieval ("rules",
    "llm"), or one `MultiQueryRetrieve` around the retrieval ("multi")."""
    mode = rewriter.config.mode
    if mode == "off":
        return list(retrieval)
    if mode == "multi":
        return [MultiQueryRetrieve(rewriter, retrieval)]
    return [rewriter, *retrieval]


def _build(config: RewriteConfig, ctx: BuildContext) -> list[Stage]:
    """The rewrite stage before retrieval, or (mode "multi") one stage retrieving for every variant."""
    from ragopt.cache import workspace_cache

    cache = ctx.resources.get(("cache", str(ctx.workspace)), lambda: workspace_cache(ctx.workspace))
    return with_rewrite(QueryRewrite(config, cache=cache, resources=ctx.resources, analyzer=ctx.analyzer()), ctx.retrieval)


def _check(config: RewriteConfig, plan: Plan) -> None:
    QueryRewrite(config)  # reads the glossary, finds the model in llm mode


SPEC = StageSpec("rewrite", RewriteConfig, _build, slot="rewrite", replaces_retrieval=True, check=_check,
                 models=lambda config: {"rewrite": config.llm.model_file()} if config.mode == "llm" else {})
