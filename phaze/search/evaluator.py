"""Everything the search knows about the points of one space: bounds up front, full evaluations on demand."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from phaze.cost.network import Network
from phaze.hardware.space import AXES, TPUV4_LIKE, describe_points, enumerate_space
from phaze.pipeline import evaluate_point, load_workloads, part_latencies, tp_values_of
from phaze.placement import PlacementResult, evaluate_fixed
from phaze.pipeline import placement_input
from phaze.search.bounds import latencies_at, lower_bound_latencies, work_bound_throughput
from phaze.validate import bools

GIB = 2**30


@dataclass(frozen=True)
class Evaluation:
    """A point's full evaluation: its best placement (None: nothing fits) and where the time went."""

    result: PlacementResult | None
    ilp_s: float
    dp_s: float

    @property
    def throughput_seq_s(self) -> float:
        return self.result.throughput_seq_s if self.result is not None and self.result.feasible else 0.0


class SpaceEvaluator:
    """The valid points of cfg.hw (sorted by their axes), their work bounds, and evaluations of single points."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.points = enumerate_space(cfg.hw).sort_values(list(AXES)).reset_index(drop=True)
        if self.points.empty:
            raise ValueError(f"hw={cfg.hw.name}: no point of the space fits the area/power budget")
        self.network = Network.from_cfg(cfg.cluster)
        self.workloads = load_workloads(cfg)
        self.inter_op_parallel = bool(cfg.hw.inter_op_parallel)
        start = time.perf_counter()
        self.lower_bounds = lower_bound_latencies(self.workloads, self.points, self.network, self.inter_op_parallel)
        self.work_bound = work_bound_throughput(self.lower_bounds, self.workloads, int(cfg.cluster.devices))
        self.bounds_s = time.perf_counter() - start

    def __len__(self) -> int:
        return len(self.points)

    def point(self, index: int) -> pd.DataFrame:
        return self.points.iloc[[index]].reset_index(drop=True)

    def placement_bound(self, index: int) -> float:
        """Throughput upper bound of one point: the placement DP on its lower-bound latencies."""
        result = evaluate_point(self.cfg, self.point(index), self.workloads, latencies_at(self.lower_bounds, index))
        return result.throughput_seq_s if result is not None and result.feasible else 0.0

    def evaluate(self, index: int) -> Evaluation:
        """Schedule every layer on the point (the ILPs) and place the model (the DP)."""
        point = self.point(index)
        t0 = time.perf_counter()
        latencies = part_latencies(self.workloads, point, self.network, self.cfg.schedule, tp_values_of(self.workloads), self.inter_op_parallel)
        t1 = time.perf_counter()
        result = evaluate_point(self.cfg, point, self.workloads, latencies)
        return Evaluation(result, t1 - t0, time.perf_counter() - t1)

    def baseline(self) -> Evaluation:
        """The TPUv4-like chip under this space's constants, with the model's expert placement (best mbs, recompute)."""
        point = describe_points(self.cfg.hw, pd.DataFrame([TPUV4_LIKE]))
        t0 = time.perf_counter()
        latencies = part_latencies(self.workloads, point, self.network, self.cfg.schedule, tp_values_of(self.workloads), self.inter_op_parallel)
        t1 = time.perf_counter()
        inp = placement_input(self.cfg, point, self.workloads, self.network, latencies)
        expert = self.cfg.model.expert
        results = [
            evaluate_fixed(inp, dp=int(expert.dp), pp=int(expert.pp), tp=int(expert.tp), mbs=int(mbs), recompute=rc)
            for mbs in inp.mbs_values for rc in bools(self.cfg.train.recompute, "train.recompute")
        ]
        best = max(results, key=lambda r: r.throughput_seq_s)
        return Evaluation(best, t1 - t0, time.perf_counter() - t1)

    def arch_params(self, index: int) -> dict:
        row = self.points.iloc[index]
        return {f"hw.{a}": int(row[a]) for a in AXES}

    def order_by_bound(self) -> np.ndarray:
        """Point indices by decreasing work bound (ties by index), the branch-and-bound visiting order."""
        return np.lexsort((np.arange(len(self.points)), -self.work_bound))
