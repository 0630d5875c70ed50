"""What the sampling tests hold speculative output to: the target's exact law over its outputs,
computed by forward passes over a small vocabulary, and a chi-square check of samples against it.

`output_law` gives the law of a whole output of several tokens; outputs too rare to be checked one
by one are pooled by their prefix (the prefix's probability is exact too), so the law stays small
however long the output. `DraftCounts` sums what each sampled call's GenerationStats says its
drafters did, so that a test can show its rounds verified the long drafts it means to test.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import torch
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from engine.sampling import target_probs
from engine.settings import GenerationStats

TEMPERATURE, TOP_K, TOP_P = 0.9, 0, 0.95
POOLED = ...          # a law's cell key ends with it where the cell pools every output of that prefix
MIN_EXPECTED = 5      # the chi-square's cells expect at least this many samples (rarer ones pooled)


def char_tokenizer(merges: list[tuple[str, str]]) -> PreTrainedTokenizerFast:
    """A BPE tokenizer over the characters a-d with `merges`; id 0 is <s> (an end token too)."""
    chars = ["a", "b", "c", "d"]
    vocab = {"<s>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>")


def chi_square(counts: Counter, dist: dict, n: int, z: float = 3.09) -> tuple[float, float]:
    """(statistic, critical value): Pearson's statistic of n samples counted by cell against the
    law `dist` (cell -> probability), the cells expecting fewer than MIN_EXPECTED pooled into one,
    and the chi-square quantile of standard normal quantile z (3.09: 99.9 %; Wilson-Hilferty
    approximation). A sample in a cell the law does not have makes the statistic infinite."""
    cells, pooled_obs, pooled_exp = [], 0, 0.0
    for key, p in dist.items():
        e = p * n
        if e < MIN_EXPECTED:
            pooled_obs += counts.get(key, 0)
            pooled_exp += e
        else:
            cells.append((counts.get(key, 0), e))
    if pooled_exp > 0:
        cells.append((pooled_obs, pooled_exp))
    df = max(1, len(cells) - 1)
    crit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    if any(k not in dist for k in counts):
        return math.inf, crit
    return sum((o - e) ** 2 / e for o, e in cells), crit


def chi_square_ok(counts: Counter, dist: dict, n: int, z: float = 3.09) -> bool:
    """Whether n samples counted by cell fit the law `dist` (`chi_square`)."""
    stat, crit = chi_square(counts, dist, n, z)
    return stat < crit


@dataclass
class OutputLaw:
    """The law of a model's first `length` new tokens after a prompt, under the sampling
    transforms, as cells of at least `min_mass` each (but perhaps the last): a whole output (a
    tuple of ids; shorter than `length` where an end token came, which the output leaves out),
    or a prefix followed by POOLED: the outputs below that prefix too rare to be cells of their
    own and not pooled further down."""
    cells: dict[tuple, float]
    length: int
    expanded: set[tuple]       # the prefixes of probability >= min_mass
    pools: set[tuple]          # ... those of them with a pooled cell
    rare: set[tuple]           # an expanded prefix and a token (an end id too) that made it rare
    end_ids: frozenset

    def cell(self, output: list[int]) -> tuple:
        """The cell `output` (cut to `length` tokens) falls in; an output the law gives no
        probability (a token the sampling transforms leave out) is its own cell, not the law's,
        and chi_square counts it as a failure."""
        out = tuple(output[:self.length])
        if out in self.cells:
            return out
        j = len(out)
        while j > 0 and out[:j] not in self.expanded:
            j -= 1
        ended = len(out) < self.length and j == len(out)
        if not (ended and any(out + (e,) in self.rare for e in self.end_ids) or out[:j + 1] in self.rare):
            return out
        while j > 0 and out[:j] not in self.pools:
            j -= 1
        return out[:j] + (POOLED,)     # (a rare output's mass went to a pool on its way up)

    def counts(self, outputs: list[list[int]]) -> Counter:
        return Counter(self.cell(o) for o in outputs)

    def chi_square(self, outputs: list[list[int]]) -> tuple[float, float]:
        return chi_square(self.counts(outputs), self.cells, len(outputs))

    def fits(self, outputs: list[list[int]]) -> bool:
        stat, crit = self.chi_square(outputs)
        return stat < crit

def output_law(model: torch.nn.Module, prompt: list[int], length: int, min_mass: float,
               end_ids=frozenset({0}), temperature: float = TEMPERATURE, top_k: int = TOP_K,
               top_p: float = TOP_P) -> OutputLaw:
    """The model's exact law over its first `length` new tokens after `prompt`, by forward
    passes: every prefix of probability >= min_mass is extended by each token the sampling
    transforms leave, one batched pass per depth. An output rarer than min_mass is pooled with
    the other rare outputs below the nearest prefix where together they reach min_mass (at
    the empty prefix, whatever is left). With min_mass = MIN_EXPECTED / n every cell but perhaps
    that last one expects MIN_EXPECTED of n samples or more, so the chi-square tests the
    outputs one by one where they are common and by where they part from the common ones
    elsewhere. Outputs end at an id of `end_ids`."""
    cells: dict[tuple, float] = {}
    rare: dict[tuple, float] = {}        # prefix -> the mass of its rare outputs just below it
    rare_tokens: set[tuple] = set()      # prefix + the token that made it rare
    expanded = [((), 1.0)]                # (prefix, probability) of every prefix extended
    frontier = list(expanded)
    with torch.inference_mode():
        for depth in range(length):
            if not frontier:
                break
            logits = model(torch.tensor([prompt + list(prefix) for prefix, _ in frontier])).logits[:, -1]
            probs = target_probs(logits.float(), temperature, top_k, top_p).tolist()
            grown = []
            for (prefix, mass), row in zip(frontier, probs):
                for t, p in enumerate(row):
                    if p <= 0:
                        continue
                    m = mass * p
                    if m < min_mass:
                        rare[prefix] = rare.get(prefix, 0.0) + m
                        rare_tokens.add(prefix + (t,))
                    elif t in end_ids:
                        cells[prefix] = cells.get(prefix, 0.0) + m
                    elif depth + 1 == length:
                        cells[prefix + (t,)] = m
                    else:
                        grown.append((prefix + (t,), m))
            expanded += grown
            frontier = grown
    # deepest first: a prefix pools its rare outputs with what its children could not pool
    left, pools = dict(rare), set()
    for prefix, _ in sorted(expanded, key=lambda e: -len(e[0])):
        mass = left.pop(prefix, 0.0)
        if mass >= min_mass or (not prefix and mass > 0):
            cells[prefix + (POOLED,)] = mass
            pools.add(prefix)
        elif prefix:
            left[prefix[:-1]] = left.get(prefix[:-1], 0.0) + mass
    return OutputLaw(cells, length, {prefix for prefix, _ in expanded}, pools, rare_tokens, frozenset(end_ids))


LONG_CHAIN = 4    # tokens a draft chain must have for a test to count it as long


def longest_chain_at_least(stats: GenerationStats) -> int:
    """A lower bound on the most draft tokens one chain put to the target in a call, from its
    GenerationStats: a chain whose token i was accepted held i + 1 tokens or more
    (`by_position`), and some round verified at least the mean number of draft tokens of the
    rounds that drafted (`drafted`, `rounds_by_drafter`)."""
    deepest = 0
    for rec in stats.by_position.values():
        hit = [i for i, a in enumerate(rec["accepted"]) if a > 0]
        if hit:
            deepest = max(deepest, hit[-1] + 1)
    by = stats.rounds_by_drafter
    drafting = stats.rounds - by["none"]
    if not drafting:
        return deepest
    return max(deepest, math.ceil(stats.drafted / drafting))


@dataclass
class DraftCounts:
    """What the drafters did over a test's sampled calls, summed from their GenerationStats."""
    samples: int = 0
    long_chain_samples: int = 0      # calls where a chain of LONG_CHAIN tokens or more was verified
    deep_samples: int = 0            # calls where a chain reached position LONG_CHAIN (its first
                                     # LONG_CHAIN - 1 tokens accepted): later positions were tested
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    rounds_by_drafter: Counter = field(default_factory=Counter)
    drafted_by: Counter = field(default_factory=Counter)   # drafter -> tokens of its chains verified
    reached: Counter = field(default_factory=Counter)    # (drafter, position) -> chains that got there

    def add(self, stats: GenerationStats) -> None:
        self.samples += 1
        self.long_chain_samples += longest_chain_at_least(stats) >= LONG_CHAIN
        self.deep_samples += any(len(rec["evaluated"]) >= LONG_CHAIN and rec["evaluated"][LONG_CHAIN - 1] > 0
                                 for rec in stats.by_position.values())
        self.rounds += stats.rounds
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        self.rounds_by_drafter.update(stats.rounds_by_drafter)
        self.drafted_by.update({name: c.drafted for name, c in stats.drafters.items()})
        for drafter, rec in stats.by_position.items():
            for i, n in enumerate(rec["evaluated"]):
                self.reached[drafter, i] += n

    def mostly_long(self, share: float = 0.5) -> bool:
        """Most calls verified a long chain, and a fair part reached its later positions."""
        return self.long_chain_samples > share * self.samples and self.deep_samples > 0.2 * self.samples
