"""One Conductor with a cost dial: the caller's ``cost_quality`` setting, 0-10, and the price of dollars it
stands for in training.

A dial policy trains with a cost weight drawn per question (``reward.cost_weight_range: [lo, hi]``) and
sees the setting in its prompt, so one policy learns the whole trade-off and the caller picks a point on it
per request. The mapping is linear, from the best answer to the cheapest:

    weight(s) = hi - (hi - lo) * s / 10        s = cost_quality in {0, 1, ..., 10}

so 10 (best quality) trains at ``lo`` (0 by default: dollars are free) and 0 (cheapest) at ``hi``. The
weight is the reward's price of a dollar, ``lambda_usd`` of conductor/rewards.py, per question in place of
``reward.cost_penalty_per_usd`` (a dial run leaves that at 0). A setting is drawn uniformly from
``reward.cost_quality_settings`` for each GRPO group, all its samples alike (advantages compare samples
of one prompt at one price), by ``seed`` and the group's id: a request issued again draws the same.

The prompt states the setting in one line (``setting_line``), the same in the SFT warm start, rollouts,
evaluation and serving, since all of them build their prompt through conductor/prompts.py.

A policy trained with the dial carries ``cost_dial.json`` (``DialCard``) beside its weights: evaluation
and serving read it to know the policy takes a setting. A policy without it takes none: a request or an
evaluation that asks for one is refused, naming the setting.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

MAX_SETTING = 10
SETTINGS = tuple(range(MAX_SETTING + 1))
BALANCED = 5
NAMED_SETTINGS = {"cheap": 0, "balanced": BALANCED, "best": MAX_SETTING}
CARD_FILE = "cost_dial.json"


def check_setting(value: Any, name: str = "cost_quality") -> int:
    """``value`` as a setting: an integer from 0 to 10 (a bool is not one); else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) \
            or not 0 <= value <= MAX_SETTING:
        raise ValueError(f"{name} must be an integer from 0 (cheapest) to {MAX_SETTING} (best quality); got {value!r}")
    return int(value)


def weight_of(setting: int, weight_range: Sequence[float]) -> float:
    """The reward's price of a dollar at ``setting``: ``hi`` at 0, ``lo`` at 10, linear between."""
    lo, hi = weight_range
    return hi - (hi - lo) * check_setting(setting) / MAX_SETTING


def setting_line(setting: int) -> str:
    """The prompt's statement of the setting (conductor/prompts.py puts it after the question). The number
    ends the line, the last word the policy reads before it writes: a tiny policy copied the last digit it
    had read, and a line ending "5 of 10." read as 0."""
    return (f"Cost-quality setting (0: the cheapest answer that will do; {MAX_SETTING}: the best answer at any "
            f"price): {check_setting(setting)}.")


def draw_setting(seed: int, key: str, settings: Sequence[int]) -> int:
    """The setting of one GRPO group: uniform over ``settings``, fixed by the run's seed and the
    group's draw key (conductor/draw_key.py)."""
    return random.Random(f"cost-dial:{seed}:{key}").choice(list(settings))


@dataclass(frozen=True)
class DialCard:
    """What a dial policy says about itself (``cost_dial.json`` beside its weights)."""

    weight_range: tuple[float, float]
    settings: tuple[int, ...] = SETTINGS
    default: int = BALANCED

    def weight(self, setting: int) -> float:
        return weight_of(setting, self.weight_range)

    def json(self) -> str:
        return json.dumps({**asdict(self), "mapping": "weight = hi - (hi - lo) * cost_quality / 10, "
                           "the reward's price of a dollar (conductor/cost_dial.py)"}, indent=1)

    @classmethod
    def parse(cls, text: str, where: str) -> DialCard:
        try:
            data = json.loads(text)
            lo, hi = (float(x) for x in data["weight_range"])
            card = cls((lo, hi), tuple(check_setting(s) for s in data.get("settings", SETTINGS)),
                       check_setting(data.get("default", BALANCED), f"{where} default"))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{where}: not a cost dial card ({exc})") from None
        return card


def card_of(settings: Any) -> Optional[DialCard]:
    """The card a run with ``settings`` (its ``reward`` section) gives its policy; None: no dial."""
    if settings.cost_weight_range is None:
        return None
    return DialCard(tuple(settings.cost_weight_range), tuple(settings.cost_quality_settings))


def read_card(policy_dir: Optional[str]) -> Optional[DialCard]:
    """The card beside a local policy directory, if it has one."""
    if not policy_dir:
        return None
    path = Path(policy_dir, CARD_FILE)
    return DialCard.parse(path.read_text(), str(path)) if path.is_file() else None


def policy_card(policy_dir: Optional[str], settings: Any) -> Optional[DialCard]:
    """Whether a policy takes a setting: its own card, else the one its config's ``reward`` section gives
    (a checkpoint of a dial run, evaluated or served with that run's config)."""
    return read_card(policy_dir) or card_of(settings)


def validation_settings(card: Optional[DialCard], asked: Optional[int], name: str) -> tuple[Optional[int], ...]:
    """The settings a training run validates (and scores held-out) at: ``asked`` alone when given; for a dial
    run without one, cheap, balanced and best, so the checkpoint kept is the best over the whole dial and not
    at balanced alone; (None,) without the dial."""
    if card is None or asked is not None:
        return (resolve_setting(card, asked, name),)
    return tuple(setting for setting in NAMED_SETTINGS.values() if setting in card.settings) or (card.default,)


def resolve_setting(card: Optional[DialCard], asked: Optional[int], name: str) -> Optional[int]:
    """The setting a dial policy runs at: ``asked``, else its default; None for a policy without the dial,
    which refuses one (``name``: the setting as the caller spelt it, for the error)."""
    if card is None:
        if asked is not None:
            raise ValueError(f"{name}: this policy was trained without the cost dial (no {CARD_FILE} beside it, "
                             "no reward.cost_weight_range), so it takes no cost_quality setting")
        return None
    return card.default if asked is None else check_setting(asked, name)
