"""The generate kind: which generator answers, with the llama settings of `GeneratorConfig` itself, declared there
once (citations, speculative and draft_tokens are its sweepable knobs):

- "none": retrieval only; "extractive": sentences of the passages, no LLM;
- "llama": llama.cpp in this process (ragopt.stages.generate_llama);
- "llama-server": the same GGUF in a child llama-server with `server_slots` parallel sequences, over HTTP;
- "http": any OpenAI-compatible server at `base_url` (ragopt.stages.generate_http).

An LLM generator brings the prompt stage that matches its model and falls back to the extractive answer when it
fails. With `route_small_max_words` > 0 it also routes: a short question that asks for no reasoning (the rule of
ragopt.text.routing) is answered by the extractive answer, the rest by the LLM; the trace says which ("route").
The extractive generator is the "always small" end of that range, route 0 the "always default" one. `ragopt ask`,
`ragopt serve --model/--engine` and a sweep trial all reach these through a plan.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ragopt.config import fingerprint, knob, knobs
from ragopt.pipeline import RequestState, Step
from ragopt.stages.generate_extractive import ExtractiveConfig
from ragopt.stages.generate_llama import GeneratorConfig
from ragopt.stages.spec import ROUTED, BuildContext, ModelFile, Plan, Served, StageSpec
from ragopt.text.routing import DEFAULT, SMALL, Router

# llama-server's own prompt lookup (build 0c1e570): drafts of up to 4 tokens after a matching 3-gram of the context
LOOKUP_ARGS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "4")


class GenerateConfig(GeneratorConfig, ExtractiveConfig):
    """Which generator answers; the llama settings (model, n_ctx, max_tokens, ...) are GeneratorConfig's, the
    extractive answer's (its sentence-score weights are knobs) ExtractiveConfig's: it answers for "extractive" and
    is every LLM generator's fallback."""

    generator: Literal["none", "extractive", "llama", "llama-server", "http"] = knob("none", sweep=["extractive", "llama"])
    base_url: str | None = Field(None, description='generator "http": the server\'s root, e.g. http://127.0.0.1:8080')
    server_slots: int = Field(4, ge=1, description='generator "llama-server": sequences the child server decodes at once')
    route_small_max_words: int = knob(0, sweep=[0, 8], ge=0, description="LLM generators: a question of at most this many "
                                      "words that asks for no reasoning is answered extractively instead (0: none)")

    @model_validator(mode="after")
    def _url_for_http(self) -> "GenerateConfig":
        if (self.generator == "http") != (self.base_url is not None):
            raise ValueError('generator "http" and base_url go together')
        return self

    def llama_config(self) -> GeneratorConfig:
        return GeneratorConfig.model_validate(self.model_dump(include=set(GeneratorConfig.model_fields)))

    def extractive_config(self) -> ExtractiveConfig:
        return ExtractiveConfig.model_validate(self.model_dump(include=set(ExtractiveConfig.model_fields)))

    def brings_prompt(self) -> bool:
        """Whether the generator lays out its own prompt (fitted to its model), so no prompt stage is needed."""
        return self.generator not in ("none", "extractive")

    def routes(self) -> bool:
        """Whether each question goes to the extractive answer or the LLM by the routing rule."""
        return self.brings_prompt() and self.route_small_max_words > 0


class RouteQuestion:
    """Writes `state.route`: "small" for a question the rule (ragopt.text.routing) calls small, else "default".
    The steps after it that carry a route run only for requests routed to theirs."""

    name = "route"
    reads = ("query",)
    writes = ("route",)

    def __init__(self, small_max_words: int):
        self.router = Router(small_max_words)

    def identity(self) -> dict[str, object]:
        return {"stage": "route", "small_max_words": self.router.small_max_words}

    def run(self, state: RequestState) -> RequestState:
        state.route = self.router.route(state.query.text)
        state.usage.attrs["route"] = state.route
        return state


def _http_generator(config: GenerateConfig, base_url: str, ctx: BuildContext) -> Any:
    from ragopt.stages.completion import CompletionConfig
    from ragopt.stages.generate_http import HttpGenerator, HttpGeneratorConfig

    http = HttpGeneratorConfig(base_url=base_url, **config.model_dump(include=set(CompletionConfig.model_fields)))
    return HttpGenerator(http, resources=ctx.resources)


def _llama_server(config: GenerateConfig, ctx: BuildContext) -> Any:
    """The child llama-server for this model and these settings, started once per process (its resources)."""
    from ragopt.backends.llama_server import LlamaServer
    from ragopt.gguf_meta import resolve_model

    path = resolve_model(config.model)
    extra = LOOKUP_ARGS if config.speculative == "prompt_lookup" else ()
    key = ("llama-server", str(path), config.server_slots, config.n_threads, config.n_ctx, extra)
    return ctx.resources.get(key, lambda: LlamaServer(path, parallel=config.server_slots, threads=config.n_threads,
                                                      ctx_per_slot=config.n_ctx, extra_args=extra).start())


def _build(config: GenerateConfig, ctx: BuildContext) -> Any:
    if config.generator == "none":
        return None
    from ragopt.stages.generate_extractive import ExtractiveGenerator

    extractive = ExtractiveGenerator(config.extractive_config(), analyzer=ctx.analyzer(), embedder=ctx.embedder)
    if config.generator == "extractive":
        return extractive
    if config.generator == "llama":
        from ragopt.stages.generate_llama import LlamaGenerator

        llm: Any = LlamaGenerator(config.llama_config(), ctx.resources)
    else:
        server = _llama_server(config, ctx) if config.generator == "llama-server" else None
        llm = _http_generator(config, server.base_url if server else str(config.base_url), ctx)
        llm.server = server  # a server's health and restarts, for serve (None over plain HTTP)
    if not config.routes():
        return [llm.prompt_stage(), Step(llm, fallback=extractive)]
    return [llm.prompt_stage(), RouteQuestion(config.route_small_max_words), Step(extractive, route=SMALL),
            Step(llm, fallback=extractive, route=DEFAULT)]


def _check(config: GenerateConfig, plan: Plan) -> None:
    """A local generator's model (a GGUF path, or the packaged default) must exist before any index is built;
    llama-server must be there to start."""
    if config.generator in ("llama", "llama-server"):
        from ragopt.gguf_meta import resolve_model

        resolve_model(config.model, field="model")  # check_plans prefixes "stages.generate"
    if config.generator == "llama-server":
        from ragopt.backends.llama_server import find_binary
        from ragopt.errors import InputError

        if find_binary() is None:
            raise InputError("llama-server not found: run scripts/build_llama_server.sh, or set $RAGOPT_LLAMA_SERVER",
                             field="generator")


def _models(config: GenerateConfig) -> dict[str, ModelFile]:
    return {"generator": config.model_file()} if config.generator in ("llama", "llama-server") else {}


def _served(config: GenerateConfig) -> Served | None:
    """What identifies this generator's answers in a server's answer cache, and the KV memory one sequence takes."""
    if config.generator == "none":
        return None
    if config.generator == "extractive":
        return Served(f"extractive:{config.extractive_config().fingerprint()}", None)
    if config.generator == "http":
        return Served(f"http:{fingerprint([config.base_url, config.model_dump(mode='json')])}", None)
    from ragopt import capacity
    from ragopt.gguf_meta import model_shape, resolve_model

    llama = config.llama_config()
    path = resolve_model(llama.model)
    n_ctx = capacity.llama_cpp_n_ctx(llama.n_ctx) if config.generator == "llama" else llama.n_ctx
    kv_type = llama.kv_type if config.generator == "llama" else "f16"  # llama-server's default cache type
    model_id = f"{config.generator}:{config.model_file().fingerprint}:{llama.fingerprint()}"
    return Served(model_id, capacity.kv_bytes(model_shape(path), n_ctx, kv_type))


def _ignores(config: GenerateConfig) -> set[str]:
    """The knobs without effect: all but the generator's when nothing answers, the LLM's when the extractive one does."""
    if config.generator == "none":
        return set(knobs(GenerateConfig)) - {"generator"}
    if config.generator == "extractive":
        return set(knobs(GeneratorConfig)) | {"route_small_max_words"}
    return set()


def _routing(config: GenerateConfig) -> str | None:
    """The extractive answer is the small backend, an LLM the default one, or both when it routes."""
    if config.generator == "none":
        return None
    if config.generator == "extractive":
        return SMALL
    return ROUTED if config.routes() else DEFAULT


SPEC = StageSpec("generate", GenerateConfig, _build, slot="generate", check=_check, models=_models, served=_served,
                 answers=lambda config: config.generator != "none", ignores=_ignores, routing=_routing)
