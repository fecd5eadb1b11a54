"""The DP kernels' arrays of one layer variant and recompute mode on a set of stage widths, and its per-part times."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaze.placement.inputs import PlacementInput
from phaze.placement.plan import chain_arrays_of


@dataclass(frozen=True)
class Chain:
    """Kernel arrays [width, part] for one layer variant, recompute mode, set of widths and p2p link kind."""

    fwd: np.ndarray
    bwd: np.ndarray
    prm: np.ndarray
    sav: np.ndarray
    inb: np.ndarray
    recv: np.ndarray
    send: np.ndarray
    widths: np.ndarray
    """Devices of a stage at each width: TP width x context-parallel width."""
    tp: np.ndarray
    tp_idx: tuple[int, ...]
    exp: np.ndarray
    """Expert weights among prm (memory and reductions over the expert-data-parallel group)."""

    def args(self) -> tuple:
        return (self.fwd, self.bwd, self.prm, self.sav, self.inb, self.recv, self.send)


def chain_arrays(inp: PlacementInput, vi: int, recompute: str, tp_idx: tuple[int, ...], same_node: bool) -> Chain:
    """Contiguous arrays for the kernels; recv / send are the p2p times at stage boundaries."""
    idx = list(tp_idx)
    arrays = chain_arrays_of(inp, vi, recompute)
    inb = np.ascontiguousarray(arrays["inb"][idx])
    tp = inp.tp_values[idx].astype(np.int64)
    recv = inp.boundary_s(inb, vi, tp, same_node)
    recv[:, 0] = 0.0
    send = inp.boundary_s(arrays["outb"][idx], vi, tp, same_node)
    send[:, -1] = 0.0
    return Chain(
        fwd=np.ascontiguousarray(arrays["fwd"][idx]),
        bwd=np.ascontiguousarray(arrays["bwd"][idx]),
        prm=np.ascontiguousarray(arrays["prm"][idx]),
        sav=np.ascontiguousarray(arrays["sav"][idx]),
        inb=inb,
        recv=np.ascontiguousarray(recv),
        send=np.ascontiguousarray(send),
        widths=tp * int(inp.cp_values[vi]),
        tp=tp,
        tp_idx=tuple(tp_idx),
        exp=np.ascontiguousarray(arrays["exp"][idx]),
    )


def _part_s(chain: Chain, recompute: str, per_layer: bool) -> np.ndarray:
    """Per-microbatch time of each part at each width [width, part], its forward counted again when every stage
    recomputes (full recompute with per-layer checkpoints)."""
    if recompute == "full" and per_layer:
        return chain.fwd + chain.bwd + chain.fwd
    return chain.fwd + chain.bwd
