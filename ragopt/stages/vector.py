"""Vector retrieval through qdrant-client: embedded local mode in the index folder, or a server by URL.

Points get deterministic ids (a uuid5 of the chunk id), so indexing the same chunk twice changes nothing.
Permission filtering is a payload filter inside Qdrant: tenant and scopes are stored on every point, with
"*" standing for shared data, and a query matches its own tenant/scopes or "*".
"""

from __future__ import annotations

import atexit
import uuid
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ragopt.config import StoreConfig
from ragopt.errors import InputError
from ragopt.pipeline import RequestState
from ragopt.types import EVERYONE, Chunk, Query

if TYPE_CHECKING:
    from ragopt.index import Index

_POINT_NAMESPACE = uuid.UUID("7b0c6a43-3f9b-4d38-9a5e-2a1c5f0e8d11")
_clients: dict[str, Any] = {}  # local mode allows one client per folder, so share it within the process


@atexit.register
def _close_clients() -> None:
    """Close while the interpreter is whole; qdrant's own __del__ at shutdown prints a spurious traceback."""
    for client in _clients.values():
        client.close()
    _clients.clear()


def point_id(chunk_id: str) -> str:
    return str(uuid.uuid5(_POINT_NAMESPACE, chunk_id))


def _stored_tenant(tenant: str | None) -> str:
    """Only None means shared: a tenant named "" is a tenant (`or` would have made it everyone's)."""
    return EVERYONE if tenant is None else tenant


def permission_filter(query: Query) -> Any:
    from qdrant_client import models

    return models.Filter(
        must=[
            models.FieldCondition(key="tenant", match=models.MatchAny(any=[_stored_tenant(query.tenant), EVERYONE])),
            models.FieldCondition(key="scopes", match=models.MatchAny(any=[*query.scopes, EVERYONE])),
        ]
    )


class QdrantStore:
    def __init__(self, collection: str, local_path: str | None, config: StoreConfig | None = None):
        self.collection = collection
        self.local_path = local_path
        self.config = config or StoreConfig()

    @property
    def client(self) -> Any:
        from qdrant_client import QdrantClient

        key = self.config.url or str(self.local_path)
        if key not in _clients:
            if self.config.url:  # a server URL, or ":memory:" for an in-process stand-in with the same API
                _clients[key] = QdrantClient(location=self.config.url, api_key=self.config.api_key)
            else:
                try:
                    _clients[key] = QdrantClient(path=str(self.local_path))
                except RuntimeError as exc:  # local mode locks its folder against a second process
                    raise InputError(
                        f"{exc}; another ragopt process is using this workspace: wait for it, "
                        "or give this run its own --workspace / RAGOPT_HOME", path=self.local_path,
                    ) from None
        return _clients[key]

    def close(self) -> None:
        key = self.config.url or str(self.local_path)
        client = _clients.pop(key, None)
        if client is not None:
            client.close()

    def create(self, dim: int) -> None:
        from qdrant_client import models

        if self.client.collection_exists(self.collection):
            return
        self.client.create_collection(
            self.collection, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE)
        )
        if self.config.url:  # a server filters through payload indexes; local mode has none
            for field in ("tenant", "scopes"):
                self.client.create_payload_index(self.collection, field, models.PayloadSchemaType.KEYWORD)

    def publish(self, alias: str) -> bool:
        """Server mode: point `alias` at this (fully built) collection in one atomic operation. False when
        another process published the same index first; this collection is then dropped."""
        from qdrant_client import models

        if any(a.alias_name == alias for a in self.client.get_aliases().aliases):
            self.client.delete_collection(self.collection)
            return False
        self.client.update_collection_aliases(
            change_aliases_operations=[
                models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=self.collection, alias_name=alias))
            ]
        )
        return True

    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray, first_index: int = 0, batch: int = 512) -> None:
        from qdrant_client import models

        for b in range(0, len(chunks), batch):
            points = [
                models.PointStruct(
                    id=point_id(c.id),
                    vector=vectors[b + j].tolist(),
                    payload={
                        "i": first_index + b + j,
                        "doc_id": c.doc_id,
                        "tenant": _stored_tenant(c.tenant),
                        "scopes": list(c.scopes) or [EVERYONE],
                    },
                )
                for j, c in enumerate(chunks[b : b + batch])
            ]
            self.client.upsert(self.collection, points=points, wait=True)

    def count(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)

    def search(self, vector: np.ndarray, k: int, query: Query | None) -> list[tuple[int, float]]:
        """(chunk position, cosine score) of the k nearest points the query may see."""
        response = self.client.query_points(
            self.collection,
            query=np.asarray(vector, dtype=np.float32).tolist(),
            limit=k,
            query_filter=permission_filter(query) if query is not None else None,
            with_payload=["i"],
        )
        return [(int(p.payload["i"]), float(p.score)) for p in response.points]


class VectorSearch:
    """Pipeline stage: nearest chunks to `state.query_vector`, filtered by the query's permissions."""

    reads = ("query_vector",)

    def __init__(self, index: "Index", k: int = 10, name: str = "vector"):
        self.index = index
        self.k = k
        self.name = name
        self.writes = (f"candidates.{name}", "hits")

    def identity(self) -> dict[str, object]:
        return {"stage": "vector", "name": self.name, "index": self.index.manifest.id, "k": self.k}

    def run(self, state: RequestState) -> RequestState:
        if state.query_vector is None:
            raise ValueError("vector search needs a query vector: put an EmbedQuery stage before it")
        flt = self.index.permission_query(state.query)
        found = self.index.store.search(state.query_vector, self.k, flt)
        state.candidates[self.name] = state.hits = self.index.hits(found, self.name)
        return state
