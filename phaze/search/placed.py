"""The placement DP's answers a search keeps: which cut-offs a kept answer settles, and the key of the latencies it
was found on."""

from __future__ import annotations

import hashlib

import numpy as np

from phaze.placement import PlacementResult

PLACED_KEPT = 8
"""Latencies whose placements a ModelEvaluator keeps (ModelEvaluator.placer): a trial asks on a handful."""
CUTOFF_RTOL = 1e-9
"""A kept optimum this close to a cut-off (relative) does not answer it: the DP compares its own sum, not the plan's."""


def known_placement(answers: dict[float | None, PlacementResult | None], beat: float | None, global_batch: int) -> tuple[bool, PlacementResult | None]:
    """(True, the answer) when the DP's answers on the same latencies, {beat: result} (None: no cut-off), give the one
    for `beat`, else (False, None). A DP with a cut-off returns the optimum when a plan beats it and None otherwise,
    so a kept optimum answers every cut-off it clearly beats or misses, and a cut-off nothing beat answers higher ones."""
    if beat in answers:
        return True, answers[beat]
    cutoff_s = global_batch / beat if beat else np.inf
    for kept_beat, result in answers.items():
        if result is not None:
            if result.time_per_batch_s < cutoff_s * (1.0 - CUTOFF_RTOL):
                return True, result
            if result.time_per_batch_s > cutoff_s * (1.0 + CUTOFF_RTOL):
                return True, None
        elif kept_beat is None or (beat is not None and beat >= kept_beat):
            return True, None
    return False, None


def latency_digest(latencies: dict[str, dict[str, np.ndarray]]) -> bytes:
    """A digest of per-part latency arrays ({part: {field: array}}), equal exactly when every value is."""
    digest = hashlib.blake2b(digest_size=16)
    for part in sorted(latencies):
        for field in sorted(latencies[part]):
            digest.update(f"{part}.{field}".encode())
            digest.update(np.ascontiguousarray(latencies[part][field], dtype=np.float64).tobytes())
    return digest.digest()
