"""A draft tree: several draft chains that share the round's root, verified in one target pass.

Node 0 is the root (the last token of the sequence, not in the target's cache yet); every other
node is a draft token whose parent comes before it, so the nodes can be laid out flat in that
order. Chains that start alike share their common prefix. The target scores every node in one
forward pass where a node sees the cache and its own ancestors only (`ancestors`), at the
position of its depth; verification then walks down from the root (engine/sampling.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    tokens: list[int]                  # node tokens; tokens[0] is the root
    parents: list[int]                 # parents[0] == -1
    depths: list[int]                  # the root is at depth 0
    children: dict[tuple[int, int], int] = field(default_factory=dict)   # (node, token) -> child

    @property
    def leaves(self) -> int:
        return len(self.tokens) - len({p for p in self.parents[1:]})

    def longest_chain(self) -> list[int]:
        """The tokens from the root's child down to the deepest node."""
        node = max(range(len(self.tokens)), key=lambda i: self.depths[i])
        out = []
        while node > 0:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]

    def ancestors(self, device=None) -> torch.Tensor:
        """Bool [n, n]: row i is True at i and at each ancestor of i."""
        n = len(self.tokens)
        rows = [[False] * n for _ in range(n)]
        for i, p in enumerate(self.parents):
            if p >= 0:
                rows[i][:p + 1] = rows[p][:p + 1]   # ancestors come before their descendants
            rows[i][i] = True
        return torch.tensor(rows, dtype=torch.bool, device=device)


def build_tree(root: int, chains: list[list[int]]) -> DraftTree:
    """The tree of `chains` below `root`, common prefixes merged."""
    tree = DraftTree([root], [-1], [0])
    for chain in chains:
        node = 0
        for t in chain:
            child = tree.children.get((node, t))
            if child is None:
                child = len(tree.tokens)
                tree.tokens.append(t)
                tree.parents.append(node)
                tree.depths.append(tree.depths[node] + 1)
                tree.children[(node, t)] = child
            node = child
    return tree
