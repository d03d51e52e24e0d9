"""The ``evaluate`` section: what cluster/evaluate.py scores (methods, split, repeats, a Conductor checkpoint and
its cost-dial setting), on its own as the config's second largest section."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from conductor.config_section import Section
from conductor.evaluation.registry import MethodName


class EvaluateConfig(Section):
    """The evaluation (cluster/evaluate.py): methods x questions x repeats over the pool."""

    methods: list[MethodName] = Field(default_factory=lambda: ["single", "oracle", "random", "self_reflection",
                                                               "consensus", "moa"],
                                      description="names in conductor/evaluation/registry.py; 'single' = every "
                                      "worker, 'single:<worker>' one of them")
    split: Literal["all", "train", "val", "heldout", "unseen"] = Field(
        default="all", description="questions: all, or one split as training makes it (train.val_questions, "
        "train.heldout_questions, train.split_seed); unseen: the simulated preset's unseen task types "
        "(conductor/simulator/unseen.py), the trained routers still learning on the train split")
    questions_per_domain: Optional[int] = Field(default=None, ge=1, description="the first N of each domain")
    repeats: int = Field(default=1, ge=1, le=100)
    concurrency: int = Field(default=64, ge=1, le=4096, description="attempts in flight")
    title: str = "methods on the pool"
    policy: Optional[str] = Field(default=None, description="the Conductor checkpoint the conductor methods "
                                  "run: an HF dir or URL (a run's policy/ or checkpoints/<tag>/)")
    conductor_temperature: float = Field(default=0.0, ge=0, description="0: greedy, one workflow per question")
    constrain_format: bool = Field(default=False, description="decode the Conductor under the workflow "
                                   "language's expression (conductor/workflow_constraint.py): no unparsable workflow "
                                   "but a truncated one; name the row apart with conductor_name")
    conductor_name: str = Field(default="conductor", pattern=r"^conductor[A-Za-z0-9_.\-]*$",
                                description="the report's name for this policy (conductor_recursive becomes "
                                "<name>_recursive): several checkpoints in one report, e.g. a cost frontier")
    cost_quality: Optional[int] = Field(default=None, ge=0, le=10, description="the cost dial's setting a dial "
                                        "policy is evaluated (and a dial run validated) at: 0 cheapest .. 10 best "
                                        "(conductor/cost_dial.py); null: evaluated at 5, a dial run validated at 0, "
                                        "5 and 10 pooled. A policy without the dial refuses one")
    rllib_iterations: int = Field(default=20, ge=1, description="PPO iterations of the rllib_router "
                                  "(1,024 one-step episodes each)")
    reuse: list[str] = Field(default_factory=list, description="outcomes.parquet files (paths or URLs) of "
                             "earlier evaluations of the same questions: their methods are read, not run again")
    domain_table: Optional[str] = Field(default=None, description="a run's sft/workflow_prior.json or "
                                        "worker_prior.json (path or URL): the per-domain table of the derived "
                                        "'domain_table' method (conductor/evaluation/domain_table.py)")
