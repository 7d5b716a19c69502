"""Which rows a query may see, as a bool mask: the one permission rule (`types.visible_to`) evaluated once
per distinct owner, then spread over the rows, and kept per (tenant, scopes) so that repeated queries of the
same user cost nothing."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Sequence

import numpy as np

from ragopt.types import Query, visible_to

Owner = tuple[str | None, tuple[str, ...]]  # (tenant, scopes) of a row


def permission_key(query: Query) -> tuple[str | None, tuple[str, ...]]:
    """What a permission decision depends on: the tenant and the set of scopes."""
    return query.tenant, tuple(sorted(set(query.scopes)))


class OwnerMasks:
    def __init__(self, owners: Sequence[Owner], max_cached: int = 256):
        distinct = sorted(set(owners), key=repr)
        position = {o: i for i, o in enumerate(distinct)}
        self._owner_of_row = np.fromiter((position[o] for o in owners), dtype=np.int32, count=len(owners))
        self._owners = distinct
        self._cached: OrderedDict[tuple[str | None, tuple[str, ...]], np.ndarray] = OrderedDict()
        self._max_cached = max_cached
        self._lock = threading.Lock()

    def __call__(self, query: Query) -> np.ndarray:
        """A read-only bool mask over rows (shared between calls: never write to it)."""
        key = permission_key(query)
        with self._lock:
            mask = self._cached.get(key)
            if mask is not None:
                self._cached.move_to_end(key)
                return mask
        ok = np.array([visible_to(tenant, scopes, query) for tenant, scopes in self._owners], dtype=bool)
        mask = ok[self._owner_of_row]
        mask.flags.writeable = False
        with self._lock:
            self._cached[key] = mask
            if len(self._cached) > self._max_cached:
                self._cached.popitem(last=False)
        return mask
