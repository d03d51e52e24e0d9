"""Run the simulated worker server on its own:

    .venv/bin/python -m cluster.simulator --config configs/sim-toy.yaml --set simulator.port=8300

It serves OpenAI ``/v1/chat/completions`` and ``/v1/models`` for the preset's workers; point a pool's
provider ``base_url`` at ``http://127.0.0.1:8300/v1``. Ctrl-C stops it.
"""

from __future__ import annotations

import logging
import sys

import uvicorn

from conductor.config_loader import config_from_cli
from conductor.simulator.presets import load_preset
from conductor.simulator.server import create_app


def main(argv: list[str] | None = None) -> int:
    config = config_from_cli(argv, default_config="configs/sim-toy.yaml", description=__doc__).simulator
    preset = load_preset(config)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.info("simulated workers (%s): %s", preset.name, ", ".join(w.name for w in preset.workers))
    logging.info("serving on http://%s:%d/v1 (%d known tasks, +%d of unseen types)", config.host, config.port,
                 len(preset.tasks), len(preset.unseen))
    uvicorn.run(create_app(config, preset), host=config.host, port=config.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
