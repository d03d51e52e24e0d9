"""The tiny policy built offline: with ``policy.tiny_corpus=run`` its tokenizer also learns the run's pool
listing and training questions, so long questions (LaTeX, code) cost fewer prompt tokens; by default it is
the built-in corpus's, unchanged."""

import statistics

from transformers import AutoTokenizer

from cluster.rollouts import policy_path
from conductor.config_loader import load_config
from conductor.prompt_builder import PromptBuilder
from conductor.run_output import RunOutput
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.tasks.splits import split_tasks


def prompt_lengths(tmp_path, shared_data, corpus):
    config = load_config("configs/train-paper7.yaml", [f"simulator.data_dir={shared_data}", "simulator.mmlu_items=60",
                                                      f"policy.tiny_corpus={corpus}", f"output.dir={tmp_path}",
                                                      f"run_name={corpus}"])
    preset = load_preset(config.simulator)
    config = config.model_copy(update={"pool": simulated_pool_config(preset, "http://127.0.0.1:9/v1")})
    splits = split_tasks(list(preset.tasks), 20, 80, config.seed)
    out = RunOutput(config.output.dir, config.run_name)
    tokenizer = AutoTokenizer.from_pretrained(policy_path(config, out, "initial", [t.prompt for t in splits.train]))
    builder = PromptBuilder(config, tokenizer)
    return statistics.mean(len(builder.task_prompt_ids(t, builder.roster())) for t in splits.heldout)


def test_a_tokenizer_trained_on_the_run_shortens_held_out_prompts(tmp_path, shared_data):
    default, run = prompt_lengths(tmp_path, shared_data, "default"), prompt_lengths(tmp_path, shared_data, "run")
    assert run < 0.8 * default, (run, default)
