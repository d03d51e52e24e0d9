"""The ``sft`` section: the warm start that teaches a fresh policy the workflow format before RL
(learner/sft.py, cluster/warm_start.py), on its own because it is the config's largest section."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from conductor.config_section import Section


class SftConfig(Section):
    """Warm start: teach a fresh policy the workflow format (random or domain-weighted workers) before RL."""

    steps: int = Field(default=200, ge=0, description="0 = no warm start (a policy that already knows the format)")
    batch_size: int = Field(default=16, ge=1)
    lr: float = Field(default=3e-3, gt=0)
    warmup_steps: int = Field(default=20, ge=0)
    prompts: int = Field(default=64, ge=1, description="distinct training prompts the examples are built on")
    shapes: dict[str, float] = Field(default_factory=lambda: {"solve": 0.7, "verify": 0.3},
                                     description="relative weights of the example workflows' shapes "
                                     "(conductor/example_workflows.py)")
    prompt_loss: bool = Field(default=True, description="also train on the prompt tokens (to learn to read them)")
    target_only_steps: int = Field(default=0, ge=0, description="then this many steps on the target tokens "
                                   "alone (fresh optimizer and schedule): the format's reliability")
    worker_prior: Literal["uniform", "random", "domain_reward", "workflow_reward"] = Field(
        default="uniform", description="the examples' workers: uniform; by a random preference per domain, "
        "measured from nothing (softmax at prior_temperature of uniform scores, seeded); by each worker's "
        "measured reward alone in the prompt's domain (conductor/worker_prior.py); or whole examples from a "
        "measured per-domain menu of single workers and solve-then-check pairs (conductor/workflow_prior.py). "
        "Prompts then even by domain")
    prior_questions: int = Field(default=64, ge=1, description="with a prior: training questions of each "
                                 "domain every worker, and every menu pair (top_workers^2 more), answers")
    prior_temperature: float = Field(default=0.1, gt=0, description="random, domain_reward, workflow_reward: "
                                     "softmax temperature over the scores or mean rewards (-> 0: the best alone; "
                                     "large: uniform)")
    prior_top_workers: int = Field(default=3, ge=1, description="workflow_reward: the menu's pairs are those "
                                   "among each domain's this many best workers alone")
    plan: Literal["none", "restate", "setting", "kind"] = Field(
        default="none", description="the examples' plan line: none; one restating the question's first "
        "plan_words words (conductor/example_workflows.py): the policy learns to read the question into its "
        "completion, so the worker ids follow what tells kinds of question apart; or, in a cost-dial run, one "
        "stating the prompt's cost_quality setting, so the worker ids follow the setting; or one naming the "
        "question's kind (its training domain), so the worker ids follow the kind the policy reads")
    plan_words: int = Field(default=3, ge=1, description="restate: words of the question the plan line repeats")
    targets_per_prompt: int = Field(default=1, ge=1, description="> 1: each drawn prompt carries this many "
                                    "example workflows and runs once (learner/shared_prompt.py; target loss only): "
                                    "for a pretrained model's ~1k-token prompt against ~60 target tokens")
    recursive_share: float = Field(default=0.0, ge=0, le=1, description="the share of examples that answer the "
                                   "recursive round's prompt (conductor/recursive_examples.py): a root example as "
                                   "the previous plan, a stand-in final response, then an accept or a workflow")
    recursive_steps: int = Field(default=0, ge=0, description="then this many steps on recursive examples "
                                 "(recursive_phase_share of them; target tokens, fresh optimizer and schedule), "
                                 "after the root's phases, which then draw and train exactly as without the round")
    recursive_phase_share: float = Field(default=1.0, gt=0, le=1, description="of the recursive phase's examples, "
                                         "the share that answer the recursive prompt; the rest replay the root's, "
                                         "so what the phase teaches stays tied to the recursive prompt (alone, an "
                                         "accept-only phase taught the root to accept at T = 1)")
    recursive_lr: Optional[float] = Field(default=None, gt=0, description="the recursive phase's peak learning rate "
                                          "(default: lr); lower leaves the root's reading as it was")
    recursive_accept: float = Field(default=0.5, ge=0, le=1, description="of the recursive examples, the share "
                                    "whose target accepts (three empty lists); the rest write a workflow drawn as "
                                    "the root's are. Whatever the stand-in's correctness: GRPO learns when")

    @model_validator(mode="after")
    def _known_shapes(self) -> SftConfig:
        from conductor.example_workflows import MENU_SHAPE_OF_LENGTH, SHAPES

        unknown = sorted(set(self.shapes) - set(SHAPES))
        if unknown:
            raise ValueError(f"sft.shapes: unknown shape(s) {', '.join(unknown)}; known: {', '.join(SHAPES)}")
        if any(w < 0 for w in self.shapes.values()) or sum(self.shapes.values()) <= 0:
            raise ValueError("sft.shapes: weights must be >= 0 with a positive sum")
        beyond_menu = {shape for shape, w in self.shapes.items() if w > 0} - set(MENU_SHAPE_OF_LENGTH.values())
        if self.worker_prior == "workflow_reward" and beyond_menu:
            raise ValueError("sft.worker_prior workflow_reward measures solve and verify workflows only; "
                             f"sft.shapes also weighs {', '.join(sorted(beyond_menu))}")
        if self.recursive_phase_share < 1 and not self.recursive_steps:
            raise ValueError("sft.recursive_phase_share shapes the recursive phase: set sft.recursive_steps > 0")
        shared = self.targets_per_prompt > 1
        if shared and (self.prompt_loss and self.steps or self.batch_size % self.targets_per_prompt):
            raise ValueError("sft.targets_per_prompt > 1 trains on target tokens alone: set sft.prompt_loss false "
                             "(or sft.steps 0), and make sft.batch_size a multiple of it")
        return self
