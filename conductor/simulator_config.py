"""The simulated worker server's section of the config (conductor/simulator/): preset, faults, behaviour knobs."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, field_validator, model_validator

from conductor.config_section import Section

SIMULATED_PROVIDER_ID = "sim"  # the one provider of a simulated pool (conductor/simulator/presets.py)


class FaultRates(Section):
    """Per-request probabilities of each injected fault in the simulated worker server."""

    rate_limit: float = Field(default=0.0, ge=0, le=1, description="429 with Retry-After")
    server_error: float = Field(default=0.0, ge=0, le=1, description="500 / 502 / 503")
    timeout: float = Field(default=0.0, ge=0, le=1, description="hang for hang_s before answering")
    disconnect: float = Field(default=0.0, ge=0, le=1, description="drop the connection mid-response")
    malformed: float = Field(default=0.0, ge=0, le=1, description="200 with a body that is not JSON")
    hang_s: float = Field(default=30.0, ge=0)

    @model_validator(mode="after")
    def _total(self) -> FaultRates:
        total = self.rate_limit + self.server_error + self.timeout + self.disconnect + self.malformed
        if total > 1:
            raise ValueError(f"fault rates add up to {total:g} > 1")
        return self


class SimulatorConfig(Section):
    preset: str = Field(default="toy", description="toy, paper-7, toy-judged (shipped YAML presets) or the path of "
                        "your own preset file ending in .yaml (schema: conductor/simulator/preset_file.py)")
    seed: int = 0
    host: str = "127.0.0.1"
    port: int = Field(default=8300, ge=0, le=65535)
    api_key_env: Optional[str] = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                       description="if set, requests must carry this env var's value as key")
    latency_scale: float = Field(default=1.0, ge=0, description="multiplies every worker's latency")
    fixed_latency_ms: Optional[float] = Field(default=None, ge=0, description="every worker answers in exactly "
                                              "this long (load tests); unscaled, no spread")
    client_max_concurrency: int = Field(default=32, ge=1, le=4096, description="calls in flight to the simulated "
                                        "provider from one pool (its pool.providers[].max_concurrency)")
    client_rpm: Optional[float] = Field(default=None, gt=0, description="the simulated provider's rpm in the pool "
                                        "spec a training run calls it with (pool.providers[].rpm), per "
                                        "rate_window_s; null: no client-side limit")
    client_tpm: Optional[float] = Field(default=None, gt=0, description="its tpm (pool.providers[].tpm), per "
                                        "rate_window_s; null: none")
    first_token_share: float = Field(default=0.3, ge=0, le=1, description="a streamed reply's share of the "
                                     "latency before its first chunk; the rest is spread between chunks")
    rpm: Optional[int] = Field(default=None, ge=1, description="server-side limit per rate window, all workers")
    rate_window_s: float = Field(default=60.0, gt=0)
    retry_after_s: float = Field(default=1.0, ge=0)
    rate_limit_headers: bool = Field(default=True, description="send x-ratelimit-* headers, as OpenAI does")
    max_context_tokens: int = Field(default=32768, ge=16, description="longer prompts get a 400 context error")
    faults: FaultRates = Field(default_factory=FaultRates)
    boost: float = Field(default=0.5, ge=0, le=1, description="P(wrong -> right) with a right answer in context")
    mislead: float = Field(default=0.3, ge=0, le=1, description="P(right -> wrong) with a wrong answer in context")
    verify_keep: float = Field(default=0.85, ge=0, le=1, description="P(a verifier that cannot solve the item "
                               "keeps the right answer it checks) rather than swap in its own wrong one")
    verify_fix: float = Field(default=0.75, ge=0, le=1, description="P(a verifier that can solve the item "
                              "catches and corrects the wrong answer it checks)")
    aggregate_pick: float = Field(default=0.95, ge=0, le=1, description="P(an aggregator that can solve the item "
                                  "picks the right answer among those it sees)")
    aggregate_follow: float = Field(default=0.55, ge=0, le=1, description="P(an aggregator that cannot solve the "
                                    "item adopts the most common answer it sees) rather than its own")
    plan_follow: float = Field(default=0.6, ge=0, le=1, description="P(a solver that cannot solve the item "
                               "succeeds with a right plan in view)")
    plan_mislead: float = Field(default=0.2, ge=0, le=1, description="P(a wrong plan in view derails a solver "
                                "that could solve the item)")
    sample_noise: float = Field(default=0.5, ge=0, description="s.d. of per-sample skill noise when a request "
                                "carries a `seed` (independent samples for consensus); 0 = one answer per prompt")
    data_dir: str = Field(default="../shared/data", description="where a preset's entries find \"{data_dir}/...\"")
    toy_items_per_domain: int = Field(default=600, ge=10)
    mmlu_items: int = Field(default=600, ge=10, description="MMLU-STEM rows the paper-7 preset knows (its "
                            "MMLU entry's limit: \"{mmlu_items}\")")

    def client_limits(self) -> dict[str, Any]:
        """The simulated provider's limits in a pool spec (``simulated_pool_config``'s keywords)."""
        return {"max_concurrency": self.client_max_concurrency, "rpm": self.client_rpm, "tpm": self.client_tpm,
                "rate_window_s": self.rate_window_s}

    @field_validator("preset")
    @classmethod
    def _preset_file(cls, preset: str) -> str:
        """Read the file now, so a wrong name, a missing file or a bad schema fails at config load."""
        from conductor.simulator.preset_file import read_preset_file  # its schema imports the dataset config

        read_preset_file(preset)
        return preset

    @model_validator(mode="after")
    def _preset_datasets(self) -> SimulatorConfig:
        """Its task sets' entries, with this section's settings filled in, checked as data.datasets entries."""
        from conductor.simulator.preset_file import preset_datasets, read_preset_file

        spec = read_preset_file(self.preset)
        try:
            for where, source in (("tasks", spec.tasks), ("unseen", spec.unseen)):
                if source is not None:
                    preset_datasets(source, self.model_dump(), where)
        except ValueError as exc:
            raise ValueError(f"simulator.preset {self.preset}: {exc}") from None
        return self
