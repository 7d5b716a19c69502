"""The registry collects every stage kind from where it is declared, and nothing else names them: no stage-kind
string outside the stage modules and the registry, each knob declared once, third-party kinds from entry points."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragopt.config import knobs
from ragopt.plan import stage_specs
from ragopt.stages.spec import StageSpec

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "ragopt"
# where a kind may be named: the modules that declare kinds, and the registry that collects them
DECLARING = ("ragopt/stages/", "ragopt/plan/registry.py")


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def kind_literals(source: str, kinds: set[str], other_meanings: set[str]) -> list[tuple[int, str]]:
    """(line, word) of every string constant that names a stage kind. Not counted: docstrings, a stage's span name
    (`name="generate"`), and a word that also names a request-state or query field ("prompt", "history") where
    the statement around it says nothing of stages."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    skip |= {id(kw.value) for node in ast.walk(tree) if isinstance(node, ast.Call) for kw in node.keywords if kw.arg == "name"}
    found = []
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.stmt):
            continue
        about_stages = "stage" in ast.unparse(stmt).lower()
        for node in ast.iter_child_nodes(stmt):
            if isinstance(node, ast.stmt):
                continue  # a nested statement is judged on its own
            for const in ast.walk(node):
                if (isinstance(const, ast.Constant) and const.value in kinds and id(const) not in skip
                        and (const.value not in other_meanings or about_stages)):
                    found.append((const.lineno, const.value))
    return sorted(set(found))


def _other_meanings(kinds: set[str]) -> set[str]:
    """Kind names that are also request fields, query fields or chat roles ("tool", an OpenAI message's role)."""
    from typing import get_args

    from ragopt.pipeline import FIELDS
    from ragopt.serve.openai_shape import ChatMessage
    from ragopt.types import Query

    roles = set(get_args(ChatMessage.model_fields["role"].annotation))
    return kinds & (set(FIELDS) | set(Query.model_fields) | roles)


def test_the_check_finds_a_kind_named_outside_its_module() -> None:
    kinds = {"rerank", "prompt", "generate"}
    other = {"prompt"}
    assert kind_literals('x = plan.stages.get("rerank", {})\n', kinds, other) == [(1, "rerank")]
    assert kind_literals('stages.setdefault("prompt", {})\n', kinds, other) == [(1, "prompt")]
    assert kind_literals('if "prompt" in plan.stages:\n    pass\n', kinds, other) == [(1, "prompt")]
    assert kind_literals('if name == "prompt":\n    y = state.prompt\n', kinds, other) == []  # the state field
    assert kind_literals('g = Serial(stages, name="generate")\n', kinds, other) == []  # a span name
    assert kind_literals('def f():\n    """Rerank, then "generate"."""\n', kinds, other) == []


def test_no_stage_kind_is_named_outside_the_stage_modules_and_the_registry() -> None:
    kinds = set(stage_specs())
    other = _other_meanings(kinds)
    named = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(DECLARING[0]) or rel == DECLARING[1]:
            continue
        if hits := kind_literals(path.read_text(encoding="utf-8"), kinds, other):
            named[rel] = hits
    assert named == {}


def test_every_builtin_kind_is_declared_in_a_stage_module_beside_its_config() -> None:
    for kind, spec in stage_specs().items():
        module = inspect.getmodule(spec.build)
        assert module is not None and module.__name__.startswith("ragopt.stages."), kind
        assert getattr(module, "SPEC", None) is spec, kind


def test_each_knob_is_declared_once() -> None:
    """A knob lives in one class: every class that declares knobs is some kind's config (or one it extends),
    and no kind's config declares a knob twice along its bases. (GenerateConfig once repeated the generator's
    citations, speculative and draft_tokens; it now extends GeneratorConfig.)"""
    specs = stage_specs()
    related = {cls for spec in specs.values() for cls in spec.config.__mro__}
    declaring = set()
    for module_name in sorted({inspect.getmodule(spec.build).__name__ for spec in specs.values()}):  # type: ignore[union-attr]
        for _, cls in inspect.getmembers(sys.modules[module_name], inspect.isclass):
            own = set(cls.__dict__.get("__annotations__", {}))
            if hasattr(cls, "model_fields") and own & set(knobs(cls)):
                declaring.add(cls)
    assert declaring and declaring <= related, sorted(c.__name__ for c in declaring - related)
    for kind, spec in specs.items():
        owners: dict[str, list[str]] = {}
        for cls in spec.config.__mro__:
            for name in set(cls.__dict__.get("__annotations__", {})) & set(knobs(spec.config)):
                owners.setdefault(name, []).append(cls.__name__)
        assert all(len(v) == 1 for v in owners.values()), (kind, owners)


def test_the_generators_declare_their_shared_settings_once() -> None:
    """Every setting the HTTP generator shares with the llama.cpp one (max_tokens, n_ctx, ...) is declared in one
    class both extend, so it has one default. (HttpGeneratorConfig once declared max_tokens again, 256 against the
    generator's 128; the knob check above sees only sweepable knobs.)"""
    from ragopt.stages.generate_http import HttpGeneratorConfig
    from ragopt.stages.generate_llama import GeneratorConfig

    def owner(cls: type, name: str) -> type:
        return next(c for c in cls.__mro__ if name in c.__dict__.get("__annotations__", {}))

    shared = set(HttpGeneratorConfig.model_fields) & set(GeneratorConfig.model_fields)
    assert "max_tokens" in shared
    twice = {name: (owner(HttpGeneratorConfig, name).__name__, owner(GeneratorConfig, name).__name__) for name in shared
             if owner(HttpGeneratorConfig, name) is not owner(GeneratorConfig, name)}
    assert twice == {}


def test_serve_options_repeat_no_generator_setting() -> None:
    from ragopt.serve.build import ServeOptions
    from ragopt.stages.generate_llama import GeneratorConfig

    assert {f.name for f in dataclasses.fields(ServeOptions)} & set(GeneratorConfig.model_fields) == set()


def test_a_kind_installed_as_an_entry_point_is_collected(tmp_path: Path) -> None:
    """A package that declares `[project.entry-points."ragopt.stages"]` adds its kind, with no edit to ragopt."""
    (tmp_path / "ragopt_echo_stage.py").write_text(
        "from ragopt.config import StrictModel, knob\n"
        "from ragopt.stages.spec import StageSpec\n"
        "class EchoConfig(StrictModel):\n"
        "    loud: bool = knob(False, sweep=[False, True])\n"
        "SPEC = StageSpec('echo', EchoConfig, lambda config, ctx: None, slot='compress')\n", encoding="utf-8")
    dist = tmp_path / "ragopt_echo_stage-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ragopt-echo-stage\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[ragopt.stages]\necho = ragopt_echo_stage\n", encoding="utf-8")
    code = "from ragopt.plan import stage_specs; s = stage_specs(); print(s['echo'].slot, sorted(s))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    slot, listed = done.stdout.split(" ", 1)
    assert slot == "compress" and "'rerank'" in listed  # ragopt's own kinds are still there


def test_a_broken_entry_point_is_one_input_error(tmp_path: Path) -> None:
    dist = tmp_path / "ragopt_broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ragopt-broken\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[ragopt.stages]\nbroken = no_such_module:SPEC\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "ragopt", "stages"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "broken = no_such_module:SPEC" in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("slot", ["nowhere"])
def test_a_spec_names_a_known_slot(slot: str) -> None:
    from ragopt.config import StrictModel

    with pytest.raises(ValueError, match="slot must be one of"):
        StageSpec("x", StrictModel, lambda config, ctx: None, slot=slot)


def test_help_imports_no_stage_module() -> None:
    """The registry collects the stage modules on the first lookup, never for `ragopt --help`."""
    probe = ("import contextlib, io, sys\nfrom ragopt.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    main(['--help'])\n"
             "print(sorted(m for m in sys.modules if m.startswith('ragopt.stages') or m.startswith('ragopt.plan')))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
