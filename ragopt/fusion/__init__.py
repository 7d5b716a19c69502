"""Rank fusion methods, one per module. Each takes rankings as lists of (key, score), best first."""

from ragopt.fusion.convex import convex
from ragopt.fusion.rrf import rrf

__all__ = ["convex", "rrf"]
