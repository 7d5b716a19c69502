"""What the trust check measured for generated sets (benchmarks/bench_synthetic.py, docs/synthetic.md): how well
a set generated from a labelled collection's corpus ranks the configurations of its grid against the people's
judgements there. Printed beside a generated set's figures, so a reader knows how far to trust them; a user
measures their own collection with `ragopt synth --check-against LABELLED_SET`.
"""

from __future__ import annotations

from typing import Any

# Per arm (without / with --like): Kendall tau per labelled collection, over how many configurations, when and by
# what command (docs/synthetic.md has the full tables). None: not measured on full sets yet.
MEASURED: dict[str, dict[str, Any] | None] = {
    "plain": {"kendall_tau": {"hotpotqa_dev500": 0.221, "msmarco_dl19_subset": 0.333, "scifact": 0.453}, "configurations": 20,
              "date": "2026-12-05", "command": "python benchmarks/bench_synthetic.py --json (full sets)"},
    "like": {"kendall_tau": {"hotpotqa_dev500": 0.730, "msmarco_dl19_subset": 0.439, "scifact": 0.432}, "configurations": 20,
             "date": "2026-12-05", "command": "python benchmarks/bench_synthetic.py --json (full sets; generator extractive-like-3)"},
}


def trust_line(like: bool) -> str:
    """One line: the tau range the trust check measured for sets generated like this one."""
    arm = "like" if like else "plain"
    how = "with --like" if like else "without --like"
    measured = MEASURED[arm]
    if not measured:
        return (f"trust check ({how}): not measured on full labelled sets yet (benchmarks/bench_synthetic.py); "
                "measure yours with --check-against LABELLED_SET")
    taus = measured["kendall_tau"]
    return (f"trust check ({how}): Kendall tau {min(taus.values()):.2f} to {max(taus.values()):.2f} against people's "
            f"judgements over {measured['configurations']} configurations on {len(taus)} labelled collections "
            f"({', '.join(sorted(taus))}; {measured['date']}, docs/synthetic.md); measure yours with --check-against LABELLED_SET")
