"""The ``budget`` section: what a training run may spend on worker and judge calls, in USD, over all its
segments (a resumed run carries what the earlier ones spent). The stop rule and the forecast that read it:
conductor/spend_cap.py, conductor/cost_forecast.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

from pydantic import Field

from conductor.config_section import Section
from conductor.simulator_config import SIMULATED_PROVIDER_ID

if TYPE_CHECKING:
    from conductor.config import Config

Usd = Annotated[float, Field(gt=0)]


class BudgetConfig(Section):
    max_usd: Optional[Usd] = Field(default=None, description="the run's spend cap in USD, workers and judge "
                                   "together, every segment summed; None = no cap (the forecast is still shown)")
    max_usd_per_provider: dict[str, Usd] = Field(default_factory=dict, description="caps for single providers, "
                                                 "by pool.providers id ('sim' for the simulated pool)")

    def caps(self) -> dict[Optional[str], float]:
        """Every cap in force: ``None`` keys the whole run's, a provider id that provider's."""
        caps: dict[Optional[str], float] = {provider: usd for provider, usd in self.max_usd_per_provider.items()}
        if self.max_usd is not None:
            caps[None] = self.max_usd
        return caps


def check_budget(config: Config) -> None:
    """At config load: every capped provider is one the run calls."""
    known = [p.id for p in config.pool.providers] if config.pool.workers else [SIMULATED_PROVIDER_ID]
    unknown = sorted(set(config.budget.max_usd_per_provider) - set(known))
    if unknown:
        raise ValueError(f"budget.max_usd_per_provider names unknown providers {unknown}; the run calls "
                         f"{', '.join(known) or 'none'}")
