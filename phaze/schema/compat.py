"""compat=: the PHAZE-code conventions this project does not copy, each a switch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CompatCfg:
    """PHAZE-code conventions this project does not copy (docs/phaze-reference.md §9), each a switch,
    all off by default: `compat=phaze` turns every one on to measure how much of PHAZE's speedup they explain."""

    name: str = "none"
    # §9.1: compute in ms against communication in s (cycles / 1.05e6): every collective, pipeline transfer
    # and gradient sync 1000x cheaper relative to compute.
    compute_ms: bool = False
    # §9.4: backward GEMMs are the data gradient only; the weight-gradient GEMMs cost nothing.
    no_weight_grad: bool = False
    # §9.2: Hugging Face nn.Linear GEMMs costed at microbatch 1 (the microbatch dimension dropped).
    linear_mbs1: bool = False
    # §1.2, §6.7, §7: the TPUv4-like chip's expert plan evaluated in the optimum's (mbs, HBM, recompute) run, not at
    # its own best microbatch and recompute; and a point's run whose expert plan does not fit discards its optimum.
    baseline_in_optimum_run: bool = False
    # §9.5: the LM head, final norm and loss (attributed to the last block, never solved) cost and hold nothing,
    # as for PHAZE's Hugging Face models (its Megatron ones replicated them into every layer instead: not modelled).
    post_layers_lost: bool = False
    # §4.3, §4.5: vector-core operators are compute-bound only (no HBM or buffer traffic).
    vector_no_memory: bool = False
