"""The `compat` config group: which conventions of the PHAZE code a job reproduces (all off by default).

The switches act where their quantity is computed: the workload switches in
phaze.workload.phaze_conventions, `compute_ms` on the network every communication time comes from
(`network_for`), `baseline_in_optimum_run` on the placement search (`expert_run_spaces`) and on the
expert baseline (phaze.search.evaluator).
"""

from __future__ import annotations

import dataclasses

from phaze.cost.network import Network
from phaze.placement import evaluate_fixed
from phaze.placement.solve import Space
from phaze.plan_space import DIMENSIONS
from phaze.schema import CompatCfg

PHAZE_COMPUTE_PER_COMM_UNIT = 1000.0
"""PHAZE divides cycles by 1.05e6 although its clock is 1.05 GHz (compute in ms) and divides bytes by bytes/s
(communication in s), then adds the two (docs/phaze-reference.md §0, §9.1): communication weighs 1/1000 of
what it should against compute."""

SWITCHES = tuple(f.name for f in dataclasses.fields(CompatCfg) if f.type in (bool, "bool"))
"""Every compat switch (the boolean fields of CompatCfg)."""


def switches_on(compat) -> list[str]:
    """The names of the switches that are on."""
    return [s for s in SWITCHES if bool(getattr(compat, s, False))]


def network_for(cluster, compat: CompatCfg) -> Network:
    """The cluster's network (cluster: ClusterCfg); under compat.compute_ms every link 1000x faster (and its latency
    1000x shorter), so that communication weighs against compute as in PHAZE's mixed ms / s sums."""
    network = Network.from_cfg(cluster)
    if not compat.compute_ms:
        return network
    return dataclasses.replace(network, intra_bytes_s=network.intra_bytes_s * PHAZE_COMPUTE_PER_COMM_UNIT,
                               inter_bytes_s=network.inter_bytes_s * PHAZE_COMPUTE_PER_COMM_UNIT,
                               latency_s=network.latency_s / PHAZE_COMPUTE_PER_COMM_UNIT,
                               inter_latency_s=network.inter_latency_s / PHAZE_COMPUTE_PER_COMM_UNIT,
                               launch_latency_s=network.launch_latency_s / PHAZE_COMPUTE_PER_COMM_UNIT)


def expert_run_spaces(compat: CompatCfg, expert, inp, space: Space) -> list[Space]:
    """The placement spaces to search on a point: [space], or under compat.baseline_in_optimum_run one per
    recompute setting, each with only the microbatches whose expert plan (model.expert) fits the point's HBM.
    PHAZE evaluates the fixed plan in every (mbs, HBM, recompute) run on every point, and one that does not fit
    discards the run's optimised result too (docs/phaze-reference.md §6.7), so its optimum always has a baseline.
    `expert`: the model's expert placement (model.expert)."""
    if not compat.baseline_in_optimum_run:
        return [space]
    one = {name: getattr(space, name)[0] for name in DIMENSIONS}
    mbs_values = space.mbs if space.mbs is not None else tuple(sorted({int(m) for m in inp.mbs_values}))
    out = []
    for rc in space.recompute:
        fits = tuple(m for m in mbs_values
                     if evaluate_fixed(inp, dp=int(expert.dp), pp=int(expert.pp), tp=int(expert.tp), mbs=m, recompute=rc, **one).feasible)
        if fits:
            out.append(dataclasses.replace(space, recompute=(rc,), mbs=fits))
    return out
