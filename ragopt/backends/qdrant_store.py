"""Vector search on a Qdrant server through qdrant-client (`StoreConfig.url`; ":memory:" is qdrant-client's
in-process stand-in with the same API, used by tests and the benchmark).

Points get deterministic ids (a uuid5 of the chunk id), so indexing the same chunk twice changes nothing.
Permission filtering is a payload filter inside Qdrant: tenant and scopes are stored on every point, with
"*" standing for shared data, and a query matches its own tenant/scopes or "*". The client is held by the
caller's `Resources`, one per (url, api key).
"""

from __future__ import annotations

import uuid
from typing import Any, Sequence

import numpy as np

from ragopt.config import StoreConfig
from ragopt.resources import Resources
from ragopt.types import EVERYONE, Chunk, Query

ENGINE = "qdrant"
_POINT_NAMESPACE = uuid.UUID("7b0c6a43-3f9b-4d38-9a5e-2a1c5f0e8d11")


def point_id(chunk_id: str) -> str:
    return str(uuid.uuid5(_POINT_NAMESPACE, chunk_id))


def _stored_tenant(tenant: str | None) -> str:
    """Only None means shared: a tenant named "" is a tenant (`or` would have made it everyone's)."""
    return EVERYONE if tenant is None else tenant


def owner_payload(chunk: Chunk) -> dict[str, Any]:
    """What a point carries for the permission filter: its tenant and scopes, "*" for shared or unscoped."""
    return {"tenant": _stored_tenant(chunk.tenant), "scopes": list(chunk.scopes) or [EVERYONE]}


def permission_values(query: Query) -> tuple[list[str], list[str]]:
    """The tenants and the scopes a point may carry for `query` to see it (the rule of `types.visible_to`)."""
    return [_stored_tenant(query.tenant), EVERYONE], [*query.scopes, EVERYONE]


def permission_filter(query: Query) -> Any:
    from qdrant_client import models

    tenants, scopes = permission_values(query)
    return models.Filter(
        must=[
            models.FieldCondition(key="tenant", match=models.MatchAny(any=tenants)),
            models.FieldCondition(key="scopes", match=models.MatchAny(any=scopes)),
        ]
    )


class QdrantStore:
    engine = ENGINE

    def __init__(self, collection: str, config: StoreConfig, resources: Resources):
        if not config.url:
            raise ValueError("QdrantStore needs a server URL (or ':memory:')")
        self.collection = collection
        self.config = config
        self.resources = resources

    @property
    def client(self) -> Any:
        def connect() -> Any:
            from qdrant_client import QdrantClient

            return QdrantClient(location=self.config.url, api_key=self.config.api_key)

        return self.resources.get(("qdrant-client", self.config.url, self.config.api_key), connect)

    def close(self) -> None:
        """Nothing of its own to release: the client belongs to the Resources that made it."""

    def create(self, dim: int) -> None:
        from qdrant_client import models

        if self.client.collection_exists(self.collection):
            return
        self.client.create_collection(
            self.collection, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE)
        )
        if self.config.url == ":memory:":  # qdrant-client's in-process stand-in has no payload indexes
            return
        for field in ("tenant", "scopes"):
            self.client.create_payload_index(self.collection, field, models.PayloadSchemaType.KEYWORD)

    def publish(self, alias: str) -> bool:
        """Point `alias` at this (fully built) collection in one atomic operation. False when another
        process published the same index first; this collection is then dropped."""
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

    def drop(self) -> None:
        self.client.delete_collection(self.collection)

    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray, first_index: int = 0, batch: int = 512) -> None:
        from qdrant_client import models

        vectors = np.asarray(vectors, dtype=np.float32)
        for b in range(0, len(chunks), batch):
            block = chunks[b : b + batch]
            self.client.upsert(
                self.collection,
                points=models.Batch(
                    ids=[point_id(c.id) for c in block],
                    vectors=vectors[b : b + len(block)].tolist(),
                    payloads=[
                        {"i": first_index + b + j, "doc_id": c.doc_id, **owner_payload(c)}
                        for j, c in enumerate(block)
                    ],
                ),
                wait=True,
            )

    def count(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)

    def search(self, vector: np.ndarray, k: int, query: Query | None) -> list[tuple[int, float]]:
        """(chunk position, cosine score) of the k nearest points the query may see, best first, ties by
        position (Qdrant itself breaks ties arbitrarily)."""
        response = self.client.query_points(
            self.collection,
            query=np.asarray(vector, dtype=np.float32).tolist(),
            limit=k,
            query_filter=permission_filter(query) if query is not None else None,
            with_payload=["i"],
        )
        found = [(int(p.payload["i"]), float(p.score)) for p in response.points]
        return sorted(found, key=lambda f: (-f[1], f[0]))
