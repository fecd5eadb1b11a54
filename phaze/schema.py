"""Structured configs: one dataclass per Hydra config group, registered in the ConfigStore.

They live in an importable module (not the `-m` entry module) so that Hydra launchers that
rebuild the config in a worker process (joblib, submitit) see the same classes. Every field is
typed, so a typo or a wrong type in an override fails at once and Hydra names the full key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class ExpertCfg:
    """A fixed (pipeline x data x tensor) placement: PHAZE's expert baseline for the model."""

    pp: int = 1
    dp: int = 1
    tp: int = 1


@dataclass
class ModelCfg:
    """A transformer from its published configuration; `family` picks the Hugging Face class."""

    name: str = MISSING
    family: str = MISSING  # llama | gpt2 | opt | bert: the Hugging Face model class to build
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    ffn_hidden_size: int = MISSING
    vocab_size: int = MISSING
    seq_len: int = MISSING
    max_position_embeddings: int = MISSING
    max_tp: int = 1
    # OPT-350m projects between a 512-wide embedding and the 1024-wide decoder; 0 means no projection.
    word_embed_proj_dim: int = 0
    tie_word_embeddings: bool = True
    # Layer norm before attention/MLP (pre-LN); OPT-350m is the one OPT that normalises after.
    pre_norm: bool = True
    # eager | flash: Hugging Face's eager attention (s^2 scores in HBM, PHAZE) or one fused FlashAttention-2 kernel.
    attention: str = "eager"
    source: str = ""
    expert: ExpertCfg = field(default_factory=ExpertCfg)


@dataclass
class AreaCfg:
    """Per-component area constants (um^2 unless the name says otherwise); conf/hw/area/*.yaml."""

    name: str = MISSING
    technology: str = ""
    source: str = ""
    tc_pe_um2: float = MISSING
    vc_lane_um2: float = MISSING
    # Per-core SRAM (KiB -> um^2) and global buffer (MiB -> um^2) tables, as sizes and areas.
    l2_kib: List[float] = field(default_factory=list)
    l2_um2: List[float] = field(default_factory=list)
    glb_mib: List[float] = field(default_factory=list)
    glb_um2: List[float] = field(default_factory=list)
    # SRAM density (um^2 per KiB), used for the per-core buffers and the global buffer when their tables are empty.
    sram_um2_per_kib: float = 0.0
    # Off-chip interface and interconnect, charged per HBM stack and per core (tensor and vector).
    hbm_phy_um2_per_stack: float = 0.0
    hbm_gib_per_stack: float = 16.0
    noc_um2_per_core: float = 0.0


@dataclass
class PowerCfg:
    """TDP model constants (energy per operation at peak rate plus leakage); conf/hw/power/*.yaml."""

    name: str = MISSING
    technology: str = ""
    source: str = ""
    pj_per_mac: float = MISSING
    pj_per_vector_op: float = MISSING
    pj_per_glb_byte: float = MISSING
    pj_per_hbm_byte: float = MISSING
    leakage_w_per_mm2: float = MISSING


@dataclass
class HwCfg:
    """An accelerator point or a grid of them (lists are the axes of the grid)."""

    name: str = MISSING
    kind: str = "grid"  # grid | point
    n_tc: List[int] = field(default_factory=list)
    tc_rows: List[int] = field(default_factory=list)
    tc_cols: List[int] = field(default_factory=list)
    n_vc: List[int] = field(default_factory=list)
    # Empty: vector width tied to the tensor-core width (PHAZE); otherwise its own axis.
    vc_width: List[int] = field(default_factory=list)
    glb_mib: List[int] = field(default_factory=list)
    hbm_gib: List[int] = field(default_factory=list)
    hbm_gbps: float = MISSING
    glb_gbps: float = MISSING
    freq_ghz: float = MISSING
    # Bandwidth of one core's port to the global buffer (bytes per cycle; PHAZE: 64 words of 2 bytes).
    core_buffer_bytes_per_cycle: float = 128.0
    # Per-core SRAM: bytes per MAC (tensor core) or per lane (vector core), at least min KiB (PHAZE: w*d/64 KiB, >= 1 KiB).
    core_buffer_bytes_per_pe: float = 16.0
    core_buffer_min_kib: float = 1.0
    # Area budget in mm^2; null: the TPUv4-like reference point's area under the area model.
    area_budget_mm2: Optional[float] = None
    area_min_fraction: float = 0.3
    # PHAZE exempts single-tensor-core and single-vector-core points from the lower area bound.
    area_min_exempt_single_core: bool = True
    power_budget_w: Optional[float] = None
    # True: independent operators may run at once on subsets of the cores (PHAZE's accelerator, the
    # layer ILP decides). False: one operator at a time over all cores (a GPU launching kernels on
    # one CUDA stream, with blocking tensor-parallel collectives, as Megatron-LM does).
    inter_op_parallel: bool = True
    # Achievable fraction of the tensor-core peak for large matmuls, in (0, 1] (1: ideal roofline; tiling losses apply on top).
    matmul_efficiency: float = 1.0
    # Achievable fraction of the HBM and on-chip buffer bandwidths, in (0, 1] (1: ideal roofline).
    memory_efficiency: float = 1.0
    # Fixed seconds added to every compute (tensor- or vector-core) operator: kernel launch and tail; >= 0.
    op_overhead_s: float = 0.0
    area: AreaCfg = MISSING
    power: PowerCfg = MISSING
    source: str = ""


@dataclass
class ClusterCfg:
    """The devices and the network between them: flat (PHAZE) or a two-level hierarchy."""

    name: str = MISSING
    devices: int = MISSING
    # Chips per node sharing the fast intra-node links; equal to `devices` for a flat network.
    node_size: int = MISSING
    intra_node_gbps: float = MISSING  # GB/s per chip, each direction
    inter_node_gbps: float = MISSING  # GB/s per chip, each direction
    link_latency_s: float = 0.0
    # Collective algorithm: ring | tree (double binary tree) | best (the faster of the two per call).
    collective_algorithm: str = "ring"
    source: str = ""


@dataclass
class TrainCfg:
    """Training-step knobs: global batch, precision, optimizer, and the searched microbatch/recompute."""

    global_batch: int = 4096
    bytes_per_elem: int = 2
    optimizer: str = "sgd"  # sgd | adam
    # A value or a list of values to search: `train.mbs=4` or `train.mbs=[1,2,4,8]` (phaze.validate checks them).
    mbs: Any = field(default_factory=lambda: [1, 2, 4, 8])
    recompute: Any = field(default_factory=lambda: [False, True])
    tp_widths: List[int] = field(default_factory=lambda: [1, 2, 4, 8])
    recompute_granularity: str = "layer"  # layer = Megatron per-layer checkpoints | stage = PHAZE's stage-input checkpoint


@dataclass
class ScheduleCfg:
    """Per-layer operator-scheduling ILP settings."""

    backend: str = "auto"  # auto | gurobi | highs
    mip_gap: float = 0.01
    time_limit_s: float = 60.0
    # Gurobi effort per layer MILP in work units (~1 s of one core each; null: none). Unlike a time limit it
    # is deterministic, so a search and the grid that checks it get the same layer latencies on any load;
    # more effort rarely improves the MILP's schedule (experiments/results/work_limit_bench.md).
    work_limit: Optional[float] = 5.0
    threads: int = 1
    cache: bool = True
    cache_dir: str = ".cache/phaze/schedule"  # on-disk cache of solved layers (one JSON file per problem)


@dataclass
class PlacementCfg:
    """A fixed placement to evaluate; zeros mean "search it"."""

    dp: int = 0
    pp: int = 0
    tp: int = 0


@dataclass
class SearchCfg:
    """The Optuna study over the architecture space."""

    sampler: str = "tpe"  # grid | tpe | nsga2
    n_trials: int = 200
    seed: int = 0
    objective: str = "throughput"  # throughput | throughput_per_tdp
    prune: bool = True
    storage: Optional[str] = None
    study_name: Optional[str] = None
    # Worker processes on this machine running the study; more machines may join the same storage.
    n_workers: int = 1
    # A running trial's heartbeat period; a trial silent for the grace period belongs to a dead process
    # and is failed and retried (phaze/search/resume.py). Trials take ~0.1-10 s, so a dead worker is
    # noticed within half a minute while a live one, slowed by a loaded machine, is never mistaken for dead.
    heartbeat_interval_s: int = 5
    grace_period_s: int = 30
    placement: str = "searched"  # searched (placement DP per point) | expert (model.expert held fixed: hardware-only search)


@dataclass
class TrackingCfg:
    """Where MLflow logs; null uri: $MLFLOW_TRACKING_URI, else an SQLite file inside mlruns/."""

    uri: Optional[str] = None
    experiment: str = "phaze"
    enabled: bool = True


@dataclass
class Config:
    """The whole job: what `python -m phaze.run` and `python -m phaze.evaluate` compose."""

    model: ModelCfg = MISSING
    hw: HwCfg = MISSING
    cluster: ClusterCfg = MISSING
    train: TrainCfg = MISSING
    schedule: ScheduleCfg = field(default_factory=ScheduleCfg)
    placement: PlacementCfg = field(default_factory=PlacementCfg)
    search: SearchCfg = MISSING
    tracking: TrackingCfg = MISSING
    cache_dir: str = ".cache/phaze"
    # Set from `model=[a,b,...]` (phaze.config.attach_models): models searched together for one
    # common architecture; empty for the usual single `model`.
    models: List[ModelCfg] = field(default_factory=list)


def register_configs() -> None:
    """Register the base schema and each group's schema so YAML files are validated against them."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(group="model", name="base_model", node=ModelCfg)
    cs.store(group="hw", name="base_hw", node=HwCfg)
    cs.store(group="hw/area", name="base_area", node=AreaCfg)
    cs.store(group="hw/power", name="base_power", node=PowerCfg)
    cs.store(group="cluster", name="base_cluster", node=ClusterCfg)
    cs.store(group="train", name="base_train", node=TrainCfg)
    cs.store(group="search", name="base_search", node=SearchCfg)
    cs.store(group="tracking", name="base_tracking", node=TrackingCfg)


register_configs()
