"""Rank fusion methods, one per module. Each takes rankings as lists of (key, score), best first, and returns
one ranking in a total order: fused score descending, then key (see order.py)."""

from ragopt.fusion.convex import convex
from ragopt.fusion.rrf import rrf

__all__ = ["convex", "rrf"]
