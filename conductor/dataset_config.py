"""The ``data.datasets`` entries: a built-in format by name, or a field map of one's own over any JSONL,
JSON, Parquet or CSV file. Both become the same thing, a field map (conductor/tasks/field_map.py), so
everything a map can get wrong is refused here, at config load, with the setting's name: a Python reward
(``verifier: python``, ``reward_function: module:function``) is imported here too, so one that does not
import or cannot take (task, response) fails before any actor starts. A reward server (``verifier: http``,
``reward_server: {url: ...}``) has its URL and settings checked here; it need not be up yet. A preset takes
either as well: its rows, prompts and instruction as they are, scored by the user's function or server
instead of its own verifier (e.g. GSM8K under a reward of one's own)."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, Field, model_validator

from conductor.config_section import Section
from conductor.tasks.field_map import template_fields
from conductor.verifiers import registry
from conductor.verifiers.http_reward import RewardServer
from conductor.verifiers.python_reward import check_reference
from conductor.verifiers.registry import VerifierKind

PresetName = Literal["math500", "gsm8k", "aime", "mmlu", "humaneval", "mbpp", "gpqa", "livecodebench"]
Column = Annotated[str, Field(min_length=1)]
Columns = Union[Column, Annotated[list[Column], Field(min_length=1)]]  # a list: the first column with a value
FIELD_MAP_KEYS = ("fields", "template", "domain", "id_prefix", "verifier", "reward_function", "reward_server",
                  "instruction", "meta")
PRESET_OVERRIDES = ("verifier", "reward_function", "reward_server")  # a preset scored by the user's reward
RewardFunction = Annotated[str, AfterValidator(check_reference)]  # imported and its signature checked at load
Scalar = Union[str, int, float, bool, None]
FilterValues = Annotated[list[Scalar], Field(min_length=1)]
ReasonedValues = Annotated[dict[Union[int, float, str], str], Field(min_length=1)]  # {value: why it is left out}


class DatasetFields(Section):
    """Which column holds each part of a task."""

    question: Optional[Columns] = Field(default=None, description="the question (or give `template`)")
    answer: Optional[Columns] = Field(default=None, description="the reference answer (code verifiers need none)")
    id: Optional[Columns] = Field(default=None, description="None: the 0-based row index; ids must be unique")
    domain: Optional[Columns] = Field(default=None, description="the domain per row (or give `domain`, a constant)")


class DatasetSpec(Section):
    """A file and how to read it: ``format`` names a built-in preset; otherwise ``fields``/``template``,
    ``domain`` and ``verifier`` make a field map of its own."""

    path: str = Field(min_length=1, description="local path or s3://bucket/key (fsspec); .jsonl[.gz], .json, "
                      ".parquet or .csv")
    limit: Optional[int] = Field(default=None, ge=1)
    shuffle_seed: int = 0
    format: Optional[PresetName] = Field(default=None, description="a built-in preset; no field-map keys with it")
    fields: Optional[DatasetFields] = None
    template: Optional[str] = Field(default=None, description="the question as a str.format template over "
                                    "columns, e.g. '{title}\\n\\n{body}' (in place of fields.question)")
    domain: Optional[str] = Field(default=None, min_length=1, description="a constant domain (or fields.domain); "
                                  "with a format, renames the preset's (and so its ids and option orders)")
    id_prefix: Optional[str] = Field(default=None, description="put before each id; None: '{domain}/'")
    verifier: Optional[VerifierKind] = Field(default=None, description="how an answer is scored: a name in "
                                             "the verifier registry (conductor/verifiers/registry.py)")
    reward_function: Optional[RewardFunction] = Field(
        default=None, description="with verifier python: the user's reward, 'module:function' importable from "
        "sys.path, called as f(task, response) -> a score in [0, 1] (conductor/verifiers/python_reward.py)")
    reward_server: Optional[RewardServer] = Field(
        default=None, description="with verifier http: the reward server that scores batches of answers, and "
        "its timeout, retries and batching (conductor/verifiers/http_reward.py)")
    instruction: Optional[str] = Field(default=None, description="appended to each prompt; None: the "
                                       "verifier's own (its registry entry's), '': none")
    meta: Union[list[Column], dict[Column, Columns]] = Field(
        default_factory=list, description="columns passed into Task.meta as they are: a list keeps their "
        "names, a mapping renames them ({meta key: column})")
    include: dict[Column, FilterValues] = Field(
        default_factory=dict, description="keep only the rows whose column holds one of these values "
        "({column: [values]}, compared as text); before the field map, so row-index ids count the rows kept")
    exclude: dict[Column, Union[FilterValues, ReasonedValues]] = Field(
        default_factory=dict, description="drop the rows whose column holds one of these values: a list, or "
        "{value: why it is left out}")
    drop_duplicates: list[Column] = Field(default_factory=list, description="after include/exclude, keep only the "
                                          "first row of each combination of these columns' values")

    @model_validator(mode="after")
    def _one_layout(self) -> DatasetSpec:
        given = [key for key in FIELD_MAP_KEYS if key in self.model_fields_set]
        if self.format is not None:
            # domain: a new name for the preset's constant domain; verifier python + reward_function: its scorer
            own_map = [key for key in given if key not in (*PRESET_OVERRIDES, "domain")]
            if own_map:
                raise ValueError(f"format {self.format} is a built-in field map; give it or {', '.join(own_map)} "
                                 "(a field map of your own), not both")
            if self.verifier not in (None, "python", "http"):
                raise ValueError(f"format {self.format} scores with its own verifier; the ones it takes instead "
                                 "are python, with reward_function (your own reward), and http, with reward_server")
            self._check_reward_function()
            self._check_reward_server()
            return self
        fields = self.fields or DatasetFields()
        if fields.question is None and self.template is None:
            raise ValueError("give format (a built-in: math500, gsm8k, aime, mmlu, humaneval, mbpp, gpqa, "
                             "livecodebench) or a field map: fields.question or template, domain, verifier")
        if fields.question is not None and self.template is not None:
            raise ValueError("fields.question and template both give the question; keep one")
        if self.template is not None:
            template_fields(self.template)
        if (fields.domain is None) == (self.domain is None):
            raise ValueError("give the domain as fields.domain (a column) or domain (a constant), exactly one")
        if self.verifier is None:
            raise ValueError(f"verifier is required with a field map ({', '.join(registry.names())})")
        self._check_reward_function()
        self._check_reward_server()
        verifier = registry.get(self.verifier)
        if verifier.reference and fields.answer is None:
            raise ValueError(f"fields.answer is required: verifier {self.verifier} scores against a reference")
        missing = [key for key in verifier.meta if key not in self.meta_columns()]
        if missing:
            raise ValueError(f"meta lacks {', '.join(missing)}, which verifier {self.verifier} reads")
        return self

    def _check_reward_function(self) -> None:
        if self.verifier == "python" and self.reward_function is None:
            raise ValueError("verifier python needs reward_function: 'module:function' (e.g. my_rewards:score)")
        if self.verifier != "python" and self.reward_function is not None:
            scorer = f"verifier {self.verifier}" if self.verifier else f"format {self.format}'s verifier"
            raise ValueError(f"reward_function is for verifier python; {scorer} scores by itself")

    def _check_reward_server(self) -> None:
        if self.verifier == "http" and self.reward_server is None:
            raise ValueError("verifier http needs reward_server: {url: http://host:port/path} (a server that "
                             "scores batches of answers)")
        if self.verifier != "http" and self.reward_server is not None:
            raise ValueError(f"reward_server is for verifier http; verifier {self.verifier} scores by itself")

    def meta_columns(self) -> dict[str, list[str]]:
        """{Task.meta key: columns tried in order}."""
        items = {name: name for name in self.meta}.items() if isinstance(self.meta, list) else self.meta.items()
        return {key: [columns] if isinstance(columns, str) else list(columns) for key, columns in items}
