"""The ``judge`` section: which worker of the pool grades the answers of judged datasets (``verifier: judge``)
and how (conductor/verifiers/judge.py). A judged dataset with no judge to call fails at config load, naming
the setting, before any actor starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from conductor.config_section import Section
from conductor.verifiers import registry
from conductor.verifiers.judge import check_rubric

if TYPE_CHECKING:
    from conductor.config import Config, PoolConfig

Rubric = Annotated[str, AfterValidator(check_rubric)]


class JudgeConfig(Section):
    worker: Optional[str] = Field(default=None, description="the judge: a worker id of pool.workers (the Conductor "
                                  "can route to it too) or pool.judges (only the judge); None: the pool's one "
                                  "pool.judges entry (the simulated preset's judge)")
    rubric: Optional[Rubric] = Field(default=None, description="a str.format template over {question}, "
                                     "{reference} and {answer} (which it must show); None: the shipped rubric "
                                     "(conductor/verifiers/judge.py)")
    samples: int = Field(default=1, ge=1, le=15, description="judge samples per answer (k), asked concurrently")
    aggregate: Literal["majority", "mean"] = Field(default="majority", description="how k scores combine: "
                                                   "the median (an odd k) or the mean")
    parse_retries: int = Field(default=2, ge=0, le=10, description="a reply with no score asked again this "
                               "many times; then the answer is unscored (an infrastructure error)")

    @model_validator(mode="after")
    def _majority_has_one(self) -> JudgeConfig:
        if self.aggregate == "majority" and self.samples % 2 == 0:
            raise ValueError(f"samples {self.samples} with aggregate majority can tie; use an odd number or mean")
        return self


def judge_worker(settings: JudgeConfig, pool: PoolConfig) -> Optional[str]:
    """The worker id the judge calls: ``judge.worker``, else the pool's only judge; None if neither."""
    if settings.worker is not None:
        return settings.worker
    return pool.judges[0].id if len(pool.judges) == 1 else None


def check_judge(config: Config) -> None:
    """At config load: a judged dataset has a judge to call, and ``judge.worker`` names one the pool has."""
    judged = [f"data.datasets.{index}" for index, spec in enumerate(config.data.datasets)
              if spec.verifier is not None and registry.get(spec.verifier).by_judge]
    chosen = config.judge.worker
    if config.pool.workers:
        known = [worker.id for worker in (*config.pool.workers, *config.pool.judges)]
        if chosen is not None and chosen not in known:
            raise ValueError(f"judge.worker {chosen!r} is not a worker of the pool (pool.workers or pool.judges: "
                             f"{', '.join(known)})")
        if judged and judge_worker(config.judge, config.pool) is None:
            raise ValueError(f"{judged[0]} is judged (verifier judge): set judge.worker to a worker of the pool, "
                             "or list the judge as the one entry of pool.judges")
        return
    from conductor.simulator.preset_file import read_preset_file

    simulated = read_preset_file(config.simulator.preset).judge  # the simulated pool replaces the configured one
    if judged and simulated is None:
        raise ValueError(f"{judged[0]} is judged (verifier judge), and the simulated preset "
                         f"{config.simulator.preset} has no judge: add a `judge:` entry to its file")
    if chosen is not None and (simulated is None or chosen != simulated.name):
        raise ValueError(f"judge.worker {chosen!r}: the simulated pool's judge is "
                         f"{simulated.name if simulated else 'none'} (preset {config.simulator.preset})")
