"""Synthetic tasks for the ``toy`` pool: three domains with exactly checkable answers.

    arithmetic  "Compute 37 * 4 + 18."                      -> "166"            (verifier: number)
    reverse     "Reverse the letters of the word 'planet'." -> "tenalp"         (verifier: text)
    sort        "Sort in ascending order: 12, 5, 31, 7."    -> "5, 7, 12, 31"   (verifier: text)

Generation is seeded, so the simulator and a trainer that share a seed see the same items. Each task
carries plausible wrong answers (``meta["wrong_answers"]``) for the simulator to give.
"""

from __future__ import annotations

import random

from conductor.tasks.task import Task
from conductor.verifiers import registry

TOY_DOMAINS = ("arithmetic", "reverse", "sort")
CONSONANTS, VOWELS = "bcdfghklmnprstvz", "aeiou"
MAX_ATTEMPTS_PER_ITEM = 1000


def _pseudo_word(rng: random.Random) -> str:
    """A pronounceable non-word (2-4 syllables): about 6.5 million of them, so items rarely repeat."""
    return "".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.randint(2, 4)))


def _prompt(question: str, verifier: str) -> str:
    return f"{question}\n\n{registry.get(verifier).instruction}"


def _arithmetic(rng: random.Random, index: int) -> Task:
    a, b, c = rng.randint(11, 99), rng.randint(2, 9), rng.randint(1, 99)
    op = rng.choice(["+", "-"])
    value = a * b + c if op == "+" else a * b - c
    wrong = sorted({value + d for d in (-10, -1, 1, 10, b)} - {value})
    return Task(f"toy/arithmetic/{index}", "arithmetic", _prompt(f"Compute {a} * {b} {op} {c}.", "number"),
                str(value), "number", {"wrong_answers": [str(w) for w in wrong]})


def _reverse(rng: random.Random, index: int) -> Task:
    word = _pseudo_word(rng)
    gold = word[::-1]
    swapped = gold[1] + gold[0] + gold[2:]
    wrong = sorted({swapped, word, gold[:-1]} - {gold})
    return Task(f"toy/reverse/{index}", "reverse",
                _prompt(f"Reverse the letters of the word '{word}'.", "text"), gold, "text",
                {"wrong_answers": wrong})


def _sort(rng: random.Random, index: int) -> Task:
    numbers = rng.sample(range(1, 100), rng.randint(4, 6))
    ordered = sorted(numbers)
    gold = ", ".join(map(str, ordered))
    near = ordered[:]
    near[0], near[1] = near[1], near[0]
    candidates = {", ".join(map(str, near)), ", ".join(map(str, numbers)), ", ".join(map(str, ordered[::-1]))}
    wrong = sorted(candidates - {gold})
    return Task(f"toy/sort/{index}", "sort",
                _prompt(f"Sort in ascending order: {', '.join(map(str, numbers))}.", "text"), gold, "text",
                {"wrong_answers": wrong})


_MAKERS = {"arithmetic": _arithmetic, "reverse": _reverse, "sort": _sort}


def toy_tasks(items_per_domain: int, seed: int = 0) -> list[Task]:
    """``items_per_domain`` tasks of each domain, interleaved, with unique prompts."""
    tasks, seen = [], set()
    for domain in TOY_DOMAINS:
        rng = random.Random(f"toy:{seed}:{domain}")
        made = attempts = 0
        while made < items_per_domain:
            attempts += 1
            if attempts > MAX_ATTEMPTS_PER_ITEM * items_per_domain:
                raise ValueError(f"cannot make {items_per_domain} distinct {domain} items")
            task = _MAKERS[domain](rng, made)
            if task.prompt in seen:
                continue
            seen.add(task.prompt)
            tasks.append(task)
            made += 1
    return [tasks[d * items_per_domain + i] for i in range(items_per_domain) for d in range(len(TOY_DOMAINS))]
