"""Updates in place of a qdrant-edge index: when the corpus changes, the index of its previous version is changed
into the new one instead of rebuilt. Only the chunks whose record changed are embedded (the others keep their
points), removed chunks' points are deleted, and the graph is not rebuilt, so the cost follows the change.

Which index is the previous version: among the workspace's qdrant-edge indexes of the same lineage (chunker,
embedder and shard settings; ragopt/index/manifest.py), the one sharing the most points with the new chunk list, and only
when the change is at most half of the new list (an unrelated corpus gets an index of its own instead).

Steps, each safe to interrupt (a re-run finds the same previous version and completes the update):
  1. update.json records the point ids to delete and to add ("apply");
  2. the added chunks are embedded (cached block by block) and upserted, the removed ones deleted, flushed;
  3. chunks.jsonl, vectors/ids.npy and keys.npy, and manifest.json are written beside the old ones (".next"),
     update.json says "commit", and each is renamed over the old one;
  4. the caller renames the folder to the new index id and update.json is removed.
A killed step 2 leaves a shard that opens; points it added that the old chunk list does not hold are skipped by
searches, and the re-run deletes and adds again what the interrupted run may have half done. A plan made over a
pending journal carries it (every point that journal added or was removing and the new list does not keep is
deleted), so interrupted updates add up, even with the corpus changed between them. The steps are named for crash
tests (ragopt.workspace.kill_point; tests/test_index_kill.py kills a real `ragopt index` at each). The caller
changes only versions it holds exclusively (ragopt/index/build.py): one another process has open is left alone.
An update is a new index id, so the knowledge-base version in every cache key moves with it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ragopt.backends.edge_store import IDS, KEYS, EdgeStore, chunk_keys
from ragopt.backends.embeddings import Embedder
from ragopt.types import Chunk
from ragopt.workspace import kill_point

JOURNAL = "update.json"
NEXT = ".next"
MAX_CHANGE_SHARE = 0.5  # more change than this: a new index, not an update


@dataclass
class UpdatePlan:
    folder: Path  # the previous version's index folder
    removed: list[int]  # point ids to delete
    added: list[int]  # positions (in the new chunk list) of the chunks to upsert
    ids: np.ndarray  # the point id of every position of the new list
    keys: np.ndarray  # the key of every position of the new list


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _journal(folder: Path) -> dict:
    path = folder / JOURNAL
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _plan_one(folder: Path, keys: np.ndarray) -> UpdatePlan:
    """The update of `folder` into the chunk list whose keys are `keys`. What an interrupted update may have half
    done is done again: its new points are deleted or upserted again, its deletions of kept chunks undone."""
    store = EdgeStore(folder / "vectors")
    pending = _journal(folder)
    id_of = dict(zip(store.keys.tolist(), store.ids.tolist()))  # key -> point id
    half_added = {int(k): i for k, i in pending.get("added", {}).items()}
    half_removed = set(pending.get("removed", []))
    wanted = set(keys.tolist())
    next_id = max([*id_of.values(), *half_added.values(), *half_removed, -1]) + 1
    ids = np.empty(len(keys), dtype=np.int64)
    added = []
    for p, k in enumerate(keys.tolist()):
        i = id_of.get(k, half_added.get(k))
        if i is None:
            i, next_id = next_id, next_id + 1
        if k not in id_of or k in half_added or i in half_removed:
            added.append(p)
        ids[p] = i
    # every point the pending journal names that the new list does not keep is deleted (again): the ones it added
    # and the ones it was removing, so a journal carries the one it replaces and interrupted updates add up
    removed = sorted(({i for k, i in {**half_added, **id_of}.items() if k not in wanted} | half_removed) - set(ids.tolist()))
    return UpdatePlan(folder, removed, added, ids, keys)


def plan_update(candidates: Sequence[Path], chunks: Sequence[Chunk]) -> UpdatePlan | None:
    """The update that turns the best candidate folder (an index of the same lineage) into `chunks`; None when
    no candidate shares enough of them."""
    keys = chunk_keys(chunks)
    plans = [_plan_one(folder, keys) for folder in candidates]
    plans = [p for p in plans if len(p.removed) + len(p.added) <= MAX_CHANGE_SHARE * len(chunks)]
    return min(plans, key=lambda p: len(p.removed) + len(p.added), default=None)


def apply_update(plan: UpdatePlan, chunks: Sequence[Chunk], embedder: Embedder, store: EdgeStore, manifest_json: str,
                 *, progress: bool) -> tuple[int, int]:
    """Steps 1-3 on `plan.folder` (its shard open in `store`); returns (texts embedded, cache hits)."""
    folder = plan.folder
    added_chunks = [chunks[i] for i in plan.added]
    added_ids = plan.ids[plan.added]
    _write_json(folder / JOURNAL, {"state": "apply", "removed": plan.removed,
                                   "added": {str(k): int(i) for k, i in zip(plan.keys[plan.added].tolist(), added_ids)}})
    kill_point("apply")
    encoded = embedder.encode([c.indexed_text for c in added_chunks], [(c.tenant, c.scopes) for c in added_chunks],
                              progress=progress)
    store.apply(plan.removed, added_ids, added_chunks, encoded.vectors)
    with open(folder / f"chunks.jsonl{NEXT}", "w", encoding="utf-8") as f:
        f.writelines(c.model_dump_json() + "\n" for c in chunks)
    kill_point("writing")
    store.write_ids(plan.ids, plan.keys, suffix=NEXT)
    (folder / f"manifest.json{NEXT}").write_text(manifest_json, encoding="utf-8")
    _write_json(folder / JOURNAL, {"state": "commit"})
    finish_commit(folder)
    return encoded.cache_misses, encoded.cache_hits


def finish_commit(folder: Path) -> bool:
    """Step 3's renames, when update.json says "commit" (a killed run may have done some); whether it did."""
    if _journal(folder).get("state") != "commit":
        return False
    for name in ("chunks.jsonl", f"vectors/{IDS}", f"vectors/{KEYS}", "manifest.json"):
        nxt = folder / f"{name}{NEXT}"
        if nxt.exists():
            os.replace(nxt, folder / name)
            kill_point("commit")
    return True


def clear_journal(folder: Path) -> None:
    (folder / JOURNAL).unlink(missing_ok=True)
