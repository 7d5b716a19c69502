"""What the trust check measured for generated sets (benchmarks/bench_synthetic.py, docs/synthetic.md): how well
a set generated from a labelled collection's corpus ranks the 20 configurations of its grid against the people's
judgements there. Printed beside a generated set's figures, so a reader knows how far to trust them; a user
measures their own collection with `ragopt synth --check-against LABELLED_SET`.
"""

from __future__ import annotations

COMMAND = "python benchmarks/bench_synthetic.py --json"
# Kendall tau over the 20 configurations (chunkings 64/128/256/whole x dense, BM25, hybrid RRF, convex 0.3/0.7,
# top_k 10, nDCG@10), per labelled collection and arm, from COMMAND's full-set run recorded in docs/synthetic.md.
KENDALL_TAU: dict[str, dict[str, float]] = {
    "plain": {},
    "like": {},
}


def trust_line(like: bool) -> str:
    """One line: the tau range the trust check measured for sets generated like this one."""
    arm = "like" if like else "plain"
    taus = KENDALL_TAU[arm]
    how = "with --like" if like else "without --like"
    if not taus:
        return f"trust check ({how}): not measured yet ({COMMAND}); measure yours with --check-against LABELLED_SET"
    names = ", ".join(sorted(taus))
    return (f"trust check ({how}): Kendall tau {min(taus.values()):.2f} to {max(taus.values()):.2f} against people's judgements "
            f"on {len(taus)} labelled collections ({names}; docs/synthetic.md); measure yours with --check-against LABELLED_SET")
