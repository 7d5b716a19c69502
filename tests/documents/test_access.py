"""Tenant and scopes from a mapping file: first matching glob wins; in a corpus with tenants a file no rule
covers is an error naming it; bad rules name their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragopt.documents import DocsOptions, load_documents
from ragopt.errors import InputError

RULES = """
[[files]]
glob = "north/*"
tenant = "north"
scopes = ["clinical", "admin"]

[[files]]
glob = "shared/*"
"""


def _folder(root: Path) -> Path:
    for rel in ("north/a.txt", "north/deep/b.txt", "shared/c.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"Text of {rel}.", encoding="utf-8")
    return root


def _load(root: Path, rules: str) -> list:  # type: ignore[type-arg]
    (root.parent / "access.toml").write_text(rules, encoding="utf-8")
    return load_documents(DocsOptions(path=str(root), tenant_map=str(root.parent / "access.toml"))).documents


def test_rules_give_tenant_and_scopes_and_shared_files_stay_shared(tmp_path: Path) -> None:
    docs = _load(_folder(tmp_path / "kb"), RULES)
    assert [(d.id, d.tenant, d.scopes) for d in docs] == [
        ("north/a.txt", "north", ("admin", "clinical")),
        ("north/deep/b.txt", "north", ("admin", "clinical")),
        ("shared/c.txt", None, ()),
    ]


def test_a_file_no_rule_covers_is_an_error_naming_it(tmp_path: Path) -> None:
    root = _folder(tmp_path / "kb")
    (root / "south").mkdir()
    (root / "south" / "d.txt").write_text("Southern text.", encoding="utf-8")
    with pytest.raises(InputError) as err:
        _load(root, RULES)
    assert str(err.value).startswith("south/d.txt [--tenant-map]: no rule in") and "access.toml covers it" in str(err.value)


def test_a_corpus_with_tenants_needs_a_map_for_its_other_files(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text('{"id": "t1", "text": "Owned.", "tenant": "north"}\n', encoding="utf-8")
    (tmp_path / "loose.txt").write_text("Whose is this?", encoding="utf-8")
    with pytest.raises(InputError, match="loose.txt .*no --tenant-map gives it a tenant"):
        load_documents(DocsOptions(path=str(tmp_path)))


@pytest.mark.parametrize("rules, key", [
    ('[[files]]\nglob = "*"\ntenant = "*"\n', "files[0]"),
    ('[[files]]\nglob = "*"\nscope = ["x"]\n', "files.0.scope"),
    ("files = []\n", "files"),
])
def test_bad_rules_name_their_key(tmp_path: Path, rules: str, key: str) -> None:
    with pytest.raises(InputError) as err:
        _load(_folder(tmp_path / "kb"), rules)
    assert f"access.toml [{key}]" in str(err.value)
