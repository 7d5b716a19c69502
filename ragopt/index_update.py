"""Updates in place of a qdrant-edge index: when the corpus changes, the index of its previous version is changed
into the new one instead of rebuilt. Only the chunks whose record changed are embedded (the others keep their
points), removed chunks' points are deleted, and the graph is not rebuilt, so the cost follows the change.

Which index is the previous version: among the workspace's qdrant-edge indexes of the same lineage (chunker,
embedder and shard settings; ragopt/index.py), the one sharing the most points with the new chunk list, and only
when the change is at most half of the new list (an unrelated corpus gets an index of its own instead).

Steps, each safe to interrupt (a re-run finds the same previous version and completes the update):
  1. update.json records the point ids to delete and to add ("apply");
  2. the added chunks are embedded (cached block by block) and upserted, the removed ones deleted, flushed;
  3. chunks.jsonl, vectors/ids.npy and manifest.json are written beside the old ones (".next"), update.json says
     "commit", and each is renamed over the old one;
  4. the caller renames the folder to the new index id and update.json is removed.
A killed step 2 leaves a shard that opens; points it added that the old chunk list does not hold are skipped by
searches, and the re-run deletes and adds again what the interrupted run may have half done. An update is a new
index id, so the knowledge-base version in every cache key moves with it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ragopt.backends.edge_store import EdgeStore, point_ids
from ragopt.backends.embeddings import Embedder
from ragopt.backends.exact_store import save_npy
from ragopt.types import Chunk

JOURNAL = "update.json"
NEXT = ".next"
MAX_CHANGE_SHARE = 0.5  # more change than this: a new index, not an update


@dataclass
class UpdatePlan:
    folder: Path  # the previous version's index folder
    removed: list[int]  # point ids to delete
    added: list[int]  # positions (in the new chunk list) of the chunks to upsert


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def _journal(folder: Path) -> dict:
    path = folder / JOURNAL
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def plan_update(candidates: Sequence[Path], chunks: Sequence[Chunk]) -> UpdatePlan | None:
    """The update that turns the best candidate folder (an index of the same lineage) into `chunks`; None when
    no candidate shares enough of them."""
    new_ids = point_ids(chunks)
    new_set = set(new_ids.tolist())
    best: UpdatePlan | None = None
    for folder in candidates:
        old_set = set(np.load(folder / "vectors" / "ids.npy").tolist())
        pending = _journal(folder)  # an interrupted update: what it may have half done is done again
        removed = (old_set - new_set) | (set(pending.get("added", [])) - new_set)
        redo = set(pending.get("removed", [])) & new_set
        added = [i for i, pid in enumerate(new_ids.tolist()) if pid not in old_set or pid in redo]
        if len(removed) + len(added) > MAX_CHANGE_SHARE * len(chunks):
            continue
        if best is None or len(removed) + len(added) < len(best.removed) + len(best.added):
            best = UpdatePlan(folder, sorted(removed), added)
    return best


def apply_update(plan: UpdatePlan, chunks: Sequence[Chunk], embedder: Embedder, store: EdgeStore, manifest_json: str,
                 *, progress: bool) -> tuple[int, int]:
    """Steps 1-3 on `plan.folder` (its shard open in `store`); returns (texts embedded, cache hits)."""
    folder = plan.folder
    added_chunks = [chunks[i] for i in plan.added]
    _write_json(folder / JOURNAL, {"state": "apply", "removed": plan.removed,
                                   "added": point_ids(added_chunks).tolist()})
    encoded = embedder.encode([c.indexed_text for c in added_chunks], [(c.tenant, c.scopes) for c in added_chunks],
                              progress=progress)
    store.delete(plan.removed)
    if added_chunks:
        store.put_points(point_ids(added_chunks), added_chunks, encoded.vectors)
    store.flush()
    with open(folder / f"chunks.jsonl{NEXT}", "w", encoding="utf-8") as f:
        f.writelines(c.model_dump_json() + "\n" for c in chunks)
    save_npy(folder / "vectors" / f"ids.npy{NEXT}", point_ids(chunks))
    (folder / f"manifest.json{NEXT}").write_text(manifest_json, encoding="utf-8")
    _write_json(folder / JOURNAL, {"state": "commit"})
    finish_commit(folder)
    return encoded.cache_misses, encoded.cache_hits


def finish_commit(folder: Path) -> bool:
    """Step 3's renames, when update.json says "commit" (a killed run may have done some); whether it did."""
    if _journal(folder).get("state") != "commit":
        return False
    for name in ("chunks.jsonl", "vectors/ids.npy", "manifest.json"):
        nxt = folder / f"{name}{NEXT}"
        if nxt.exists():
            os.replace(nxt, folder / name)
    return True


def clear_journal(folder: Path) -> None:
    (folder / JOURNAL).unlink(missing_ok=True)
