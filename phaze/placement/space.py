"""The placement search space (the values of each plan dimension a search may choose) and its configurations: the
layer variant, recompute mode and ZeRO stage that one family of DP kernel runs shares."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from phaze.placement.inputs import PlacementInput
from phaze.placement.plan import recompute_mode


@dataclass(frozen=True)
class Space:
    """The values of each placement dimension the search may choose (phaze.placement.plan.Plan)."""

    recompute: tuple = ("none", "full")
    mbs: tuple | None = None
    """None: every costed microbatch size."""
    zero: tuple = (0,)
    sp: tuple = (False,)
    vp: tuple = (1,)
    cp: tuple = (1,)
    tp_comm_overlap: tuple = (False,)
    ep: tuple = (1,)
    per_stage_tp: bool = True
    """False restricts every pipeline to one TP width (what Megatron-LM, FSDP, DeepSpeed and MaxText run)."""
    stage_layers: str = "any"
    """Which layers per stage the framework runs (phaze.placement.layouts: any | even_middle | even)."""

    def __post_init__(self):
        object.__setattr__(self, "recompute", tuple(dict.fromkeys(recompute_mode(r) for r in self.recompute)))


@dataclass(frozen=True)
class Config:
    """A layer variant, recompute mode and ZeRO stage: what one family of kernel runs shares."""

    vi: int
    recompute: str
    zero: int

    def plan_fields(self, inp: PlacementInput) -> dict:
        mbs, sp, cp, overlap, ep = inp.variant_list()[self.vi]
        return dict(mbs=mbs, sp=sp, cp=cp, tp_comm_overlap=overlap, ep=ep, recompute=self.recompute, zero=self.zero)


def _configs(inp: PlacementInput, space: Space) -> list[Config]:
    """Every configuration of the space whose layer variant is costed."""
    out = []
    wanted_mbs = inp.mbs_values.tolist() if space.mbs is None else list(space.mbs)
    for vi, (mbs, sp, cp, overlap, ep) in enumerate(inp.variant_list()):
        if mbs not in wanted_mbs or sp not in space.sp or cp not in space.cp or overlap not in space.tp_comm_overlap or ep not in space.ep:
            continue
        if inp.global_batch % mbs:
            continue
        if inp.step_model == "phaze" and (cp > 1 or ep > 1):
            continue
        for recompute, zero in itertools.product(space.recompute, space.zero):
            if (inp.step_model == "phaze" and zero) or (ep > 1 and zero > 1):
                continue
            out.append(Config(vi, recompute, int(zero)))
    return out
