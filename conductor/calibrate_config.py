"""The ``calibrate`` section: how ``python -m cluster.calibrate`` samples the user's tasks to measure each
worker of a pool, and what its twin preset keeps from a preset it cannot measure (conductor/calibration.py,
conductor/twin_preset.py)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from conductor.config_section import Section


class CalibrateConfig(Section):
    questions_per_domain: int = Field(default=100, ge=1, le=100_000, description="questions drawn per domain of "
                                      "data.datasets (all of a domain that has fewer); every worker answers each, "
                                      "so a call count of workers x domains x this, and an accuracy's s.e. of at "
                                      "most 0.5 / sqrt(this)")
    seed: int = Field(default=0, description="draws which questions are asked")
    concurrency: int = Field(default=16, ge=1, le=4096, description="calls in flight; keep it within the "
                             "providers' max_concurrency, as a call's latency includes its wait for a slot")
    base_preset: Optional[str] = Field(default=None, description="a preset (toy, paper-7 or a .yaml path) whose "
                                       "error_correlation the twin keeps; None: the schema's default, 0.5 in "
                                       "every domain")

    @field_validator("base_preset")
    @classmethod
    def _preset_file(cls, preset: Optional[str]) -> Optional[str]:
        """Read the file now, so a wrong name or path fails at config load, not after the calls are paid."""
        if preset is not None:
            from conductor.simulator.preset_file import read_preset_file  # its schema imports the dataset config

            read_preset_file(preset)
        return preset
