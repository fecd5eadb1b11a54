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
    family: str = MISSING  # llama | gpt2 | starcoder2 | opt | bert | mixtral | qwen2_moe | olmoe | deepseek_v2: the Hugging Face class
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    # Width of one attention head; 0: hidden_size / num_heads. Another width (PaLM, Gemma) needs a family that
    # takes it (phaze.workload.families.HEAD_DIM_FAMILIES).
    head_dim: int = 0
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
    # The MLP activation by its Hugging Face name (empty: the family's own, e.g. GPT-2's gelu_new, six unfused
    # operators); gelu_pytorch_tanh is the same tanh GeLU as one kernel, as Megatron's fused bias-GeLU runs it.
    activation: str = ""
    # Hidden and attention dropout probability (null: the family's own: GPT-2 0.1, Starcoder2 0, Llama none).
    dropout: Optional[float] = None
    # The framework fuses elementwise chains (Megatron/Apex/Transformer Engine kernels, torch.compile), so the
    # forward saves only what a min-cut rematerialization partition keeps; false: every eager operator saves its inputs.
    fused_kernels: bool = False
    # Multi-head latent attention (family deepseek_v2; 0 otherwise): the key/value latent's width, the query latent's
    # (0: a full query projection), the shared rotary key's head width and the value head width; head_dim is then
    # the width of a head's non-rotary query/key part (DeepSeek's qk_nope_head_dim).
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int = 0
    # Mixture of experts (families mixtral | qwen2_moe | olmoe | deepseek_v2; 0 for a dense model): routed experts, experts
    # each token picks, the FFN width of one expert, shared experts (one shared MLP of num_shared_experts x that width).
    num_experts: int = 0
    experts_per_token: int = 0
    expert_ffn_hidden_size: int = 0
    num_shared_experts: int = 0
    # The layer pattern of a mixture of experts (phaze.workload.model_rules.block_parts): the first first_dense_layers
    # blocks are dense (DeepSeek's first_k_dense_replace; families qwen2_moe | deepseek_v2), and after them one block in
    # moe_layer_freq is an MoE block (Megatron-Core's --moe-layer-freq; family qwen2_moe), the others dense, with an
    # MLP of ffn_hidden_size.
    first_dense_layers: int = 0
    moe_layer_freq: int = 1
    # The routing assumption (phaze.workload.experts; train.* overrides when set): 0 = dropless, else tokens padded
    # to capacity_factor x an expert's balanced share; moe_imbalance >= 1: the busiest device's share of a dropless layer.
    capacity_factor: float = 0.0
    moe_imbalance: float = 1.0
    source: str = ""
    # Parameter counts the source publishes (total and active per token; 0: not given), checked by the tests.
    published_params: float = 0.0
    published_active_params: float = 0.0
    expert: ExpertCfg = field(default_factory=ExpertCfg)


@dataclass
class AreaCfg:
    """Per-component area constants (um^2 unless the name says otherwise); conf/hw/area/*.yaml."""

    name: str = MISSING
    technology: str = ""
    source: str = ""
    tc_pe_um2: float = MISSING
    # One FP8 multiplier: FP8 tensor cores (hw.fp8_matmul_ratio r > 0) add r of them to each PE.
    tc_fp8_multiplier_um2: float = 0.0
    vc_lane_um2: float = MISSING
    # Per-core SRAM (KiB -> um^2) and global buffer (MiB -> um^2) tables, as sizes and areas.
    l2_kib: List[float] = field(default_factory=list)
    l2_um2: List[float] = field(default_factory=list)
    glb_mib: List[float] = field(default_factory=list)
    glb_um2: List[float] = field(default_factory=list)
    # SRAM density (um^2 per KiB), used for the per-core buffers and the global buffer when their tables are empty.
    sram_um2_per_kib: float = 0.0
    # Off-chip interface and interconnect, charged per HBM stack and per core (tensor and vector). Under the
    # stack model (hw.hbm_stacks) the PHY is the HBM generation's (phaze.hardware.hbm) and the capacity per stack too.
    hbm_phy_um2_per_stack: float = 0.0
    hbm_gib_per_stack: float = 16.0
    noc_um2_per_core: float = 0.0
    # Placed logic over its cell area: standard cells fill this fraction of a logic block, routing the rest (1: none).
    logic_utilization: float = 1.0
    # Control of one programmable (vector) core: instruction fetch, decode, scheduling, load/store (cell area).
    vc_control_um2: float = 0.0
    # One HBM stack's memory controller on the logic die (cell area; the PHY is the generation's).
    hbm_controller_um2_per_stack: float = 0.0
    # One chip-to-chip SerDes lane (NVLink, ICI) and one PCIe lane: PHY and link controller.
    serdes_um2_per_lane: float = 0.0
    pcie_um2_per_lane: float = 0.0


@dataclass
class PowerCfg:
    """TDP model constants (energy per operation at peak rate plus leakage); conf/hw/power/*.yaml."""

    name: str = MISSING
    technology: str = ""
    source: str = ""
    pj_per_mac: float = MISSING
    # One FP8 multiply-accumulate (fp32 accumulation): at the FP8 peak, FP8 tensor cores draw this per MAC.
    pj_per_fp8_mac: float = 0.0
    pj_per_vector_op: float = MISSING
    pj_per_glb_byte: float = MISSING
    pj_per_hbm_byte: float = MISSING
    leakage_w_per_mm2: float = MISSING
    # Energy of one bit over a chip-to-chip SerDes lane (transmitter and receiver).
    pj_per_serdes_bit: float = 0.0
    # Energy of delivering one operand to a tensor-core array's edge (buffer or register read, the wires to the array,
    # its clocking): an R x C array takes R + C operands a cycle for R x C MACs, (1/R + 1/C) deliveries per MAC.
    pj_per_operand_fetch: float = 0.0


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
    # HBM capacity (GiB) axis at a fixed bandwidth (GB/s): PHAZE's model. Under the stack model (below) a
    # point's capacity and bandwidth follow from its stacks; a point preset may still give both as its
    # product's own (stacks run below their rated pin speed); null hbm_gbps: the stacks' rated bandwidth.
    hbm_gib: List[int] = field(default_factory=list)
    hbm_gbps: Optional[float] = None
    # The stack model (both lists or neither): axes of stack counts and HBM generations (phaze.hardware.hbm:
    # hbm2, hbm2e, hbm3, hbm3e); capacity, bandwidth, PHY area and HBM power follow from them.
    hbm_stacks: List[int] = field(default_factory=list)
    hbm_generation: List[str] = field(default_factory=list)
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
    # The chip a search's answer is compared with: a point preset of conf/hw (e.g. tpuv4_modern, h100), evaluated
    # under its own constants; null: the TPUv4-like reference point under this space's constants (PHAZE's baseline).
    baseline: Optional[str] = None
    # What the die holds beyond the enabled chip, for yield (area and leakage only): tensor and vector cores each,
    # HBM PHY sites without a stack, global-buffer MiB.
    spare_cores: int = 0
    spare_hbm_stacks: int = 0
    spare_glb_mib: float = 0.0
    # Off-chip lanes on the die: chip-to-chip SerDes lanes per direction at their rate (Gb/s), and PCIe lanes.
    interconnect_lanes: int = 0
    interconnect_gbit_s_per_lane: float = 0.0
    pcie_lanes: int = 0
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
    # Fixed seconds more of every matmul kernel (its first operand tiles' load and its last tiles' epilogue); >= 0.
    matmul_fixed_s: float = 0.0
    # The output block a tensor core computes at a time (a GPU's CTA tile, elements; 0: one pass of its array):
    # a matmul's blocks are dealt to the cores in waves, the last one partly idle (wave quantization).
    matmul_tile_rows: int = 0
    matmul_tile_cols: int = 0
    # Reduction steps' worth of time each tile spends filling / draining its pipeline and writing its outputs.
    matmul_tile_fill_k: int = 0
    # The tensor cores' FP8 GEMM peak over their bf16 peak: 0 = no FP8 (train.precision=fp8 needs >= 1).
    fp8_matmul_ratio: float = 0.0
    # The fraction of the bf16 tile efficiency (matmul_efficiency) FP8 GEMMs reach, in (0, 1]; 1: the same.
    fp8_matmul_efficiency: float = 1.0
    # How many times longer the tensor cores' steps take when GEMMs run back to back for seconds (a training step)
    # than in one kernel alone: the power limit lowers the clock. >= 1; 1: no power-limited slowdown (PHAZE).
    matmul_sustained_slowdown: float = 1.0
    # How much longer compute takes while a collective runs beside it on the chip (the collective's kernels hold
    # cores and memory bandwidth): 0.189 = 18.9% longer. 0: collectives cost the compute nothing (PHAZE; a chip
    # whose links have their own DMA engines).
    overlap_slowdown: float = 0.0
    area: AreaCfg = MISSING
    power: PowerCfg = MISSING
    source: str = ""


@dataclass
class ClusterCfg:
    """The devices and the network between them: flat (PHAZE), a two-level hierarchy or a torus."""

    name: str = MISSING
    devices: int = MISSING
    # Chips per node sharing the fast intra-node links; equal to `devices` for a flat network.
    node_size: int = MISSING
    intra_node_gbps: float = MISSING  # GB/s per chip, each direction
    inter_node_gbps: float = MISSING  # GB/s per chip, each direction
    # Achievable fraction of each link rate for large collectives (NCCL's bus bandwidth over the line rate), in (0, 1].
    intra_node_efficiency: float = 1.0
    inter_node_efficiency: float = 1.0
    # Latency per collective step inside a node (or on a torus), per step across nodes (null: the same), and per
    # collective or send/receive call (NCCL's cost model: a base latency per call plus one per ring step by link type).
    link_latency_s: float = 0.0
    inter_node_latency_s: Optional[float] = None
    collective_launch_s: float = 0.0
    # Collective algorithm: ring | tree (double binary tree) | best (the faster of the two per call).
    collective_algorithm: str = "ring"
    # A torus of these dimensions (x fastest, product = devices) instead of nodes; both link rates are then one link's.
    torus_dims: List[int] = field(default_factory=list)
    source: str = ""


@dataclass
class TrainCfg:
    """Training-step knobs: global batch, precision, optimizer, the placement dimensions the search
    considers (placement.* fixes one), and how the framework overlaps communication (docs/parallelism.md)."""

    global_batch: int = 4096
    bytes_per_elem: int = 2
    # GEMM precision: bf16 | fp8 (Transformer Engine: the transformer layers' linear GEMMs in FP8; phaze.workload.precision).
    precision: str = "bf16"
    # With precision fp8: the linear layers' weights kept in FP8 only (Transformer Engine's fp8_model_init, NeMo's
    # fp8_params): no bf16 copy, ZeRO gathers in FP8, an fp32 master copy in the optimizer.
    fp8_params: bool = False
    # Bytes of a gradient element, kept and reduced (null: bytes_per_elem; Megatron keeps bf16 runs' gradients in fp32: 4).
    grad_bytes_per_elem: Optional[int] = None
    # Bytes of Adam's master copy of a weight below fp32 (null: an fp32 copy, 4; NeMo's Apex distributed Adam keeps
    # only the 16 bits a bf16 weight lacks: 2, or none where its optimizer state is bf16 as the weights: 0).
    master_bytes_per_param: Optional[int] = None
    # Bytes of Adam's two moments per weight (null: fp32, 8; NeMo's Apex distributed Adam with optim.dtype=bf16: 4).
    moment_bytes_per_param: Optional[int] = None
    optimizer: str = "sgd"  # sgd | adam | none (inference: no gradients, no optimizer state, nothing reduced)
    # Only the forward pass (inference, phaze.workload.inference): with optimizer none, what train=inference runs.
    forward_only: bool = False
    # A value or a list of values to search: `train.mbs=4` or `train.mbs=[1,2,4,8]` (phaze.config_values checks them).
    mbs: Any = field(default_factory=lambda: [1, 2, 4, 8])
    # none | selective (attention core) | full, or booleans (false = none, true = full); one or a list.
    recompute: Any = field(default_factory=lambda: [False, True])
    tp_widths: List[int] = field(default_factory=lambda: [1, 2, 4, 8])
    # Whether a pipeline's stages may differ in TP width (PHAZE's plans; false: one width in every stage, as every
    # framework runs) and which layers per stage the framework runs: any | even_middle (Megatron-Core: the first and
    # last stages free, the middle even) | even (phaze.placement.layouts).
    per_stage_tp: bool = True
    stage_layers: str = "any"
    recompute_granularity: str = "layer"  # layer = Megatron per-layer checkpoints | stage = PHAZE's stage-input checkpoint
    # ZeRO stages 0..3, Megatron sequence parallelism, interleaved chunks per rank, context-parallel widths and
    # TP communication overlap to search (one value or a list each).
    zero: Any = field(default_factory=lambda: [0])
    sp: Any = field(default_factory=lambda: [False])
    vp: Any = field(default_factory=lambda: [1])
    cp: Any = field(default_factory=lambda: [1])
    tp_comm_overlap: Any = field(default_factory=lambda: [False])
    # Expert-parallel widths to search (only those dividing model.num_experts are used; 1 for a dense model).
    ep: Any = field(default_factory=lambda: [1])
    # The MoE routing assumption, overriding the model's (null: the model's own): see ModelCfg.
    capacity_factor: Optional[float] = None
    moe_imbalance: Optional[float] = None
    # eager | flash: the attention kernel, overriding model.attention (null: the model's own).
    attention: Optional[str] = None
    # Whether the framework's kernels are fused (see model.fused_kernels), overriding the model's (null: the model's own).
    fused_kernels: Optional[bool] = None
    # phaze: PHAZE's step (flush, then the gradient all-reduce, nothing overlapped) | timeline (the framework's overlaps).
    step_model: str = "phaze"
    # The framework reduces gradients bucket by bucket under the backward, prefetches ZeRO parameter gathers
    # under compute, and issues TP collectives on a communication stream (single-stream chips).
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_async: bool = False
    # ZeRO-3's overlapped parameter gathers and gradient reductions share one communicator, which runs one collective
    # at a time: the backward's gathers and reductions take turns on one stream (PyTorch FSDP, Megatron-FSDP).
    serial_zero3_collectives: bool = False
    # Megatron-LM's pipeline scatter/gather: without sequence parallelism each TP rank sends 1/t of the replicated
    # activation and the next stage all-gathers it over its node's links (Narayanan et al. 2021 §4.1).
    p2p_scatter_gather: bool = False
    # HBM bytes the optimizer step moves per parameter (its passes over weights, gradients and state: the
    # framework presets count them, conf/train/*.yaml); 0: the update is not timed (PHAZE's step has none).
    update_bytes_per_param: float = 0.0


@dataclass
class ScheduleCfg:
    """Per-layer operator-scheduling ILP settings."""

    backend: str = "auto"  # auto | gurobi | highs
    mip_gap: float = 0.01
    time_limit_s: float = 60.0
    # Gurobi effort per layer MILP in work units (~1 s of one core each; null: none). Unlike a time limit it
    # is deterministic, so a search and the grid that checks it get the same layer latencies on any load;
    # more effort rarely improves the MILP's schedule (experiments/results/work_limit_bench.md). HiGHS (a layer over
    # Gurobi's size-limited licence) has no work units and takes it as seconds.
    work_limit: Optional[float] = 5.0
    threads: int = 1
    # Before the MILP, refute makespans over the tensor unit's mode decisions and list-schedule the assignments left
    # (phaze.schedule.modes): shorter schedules and proven bounds, so most layers close without the MILP. null: on
    # with train.step_model=timeline, off with PHAZE's step, whose world keeps the schedules (and numbers) it had
    # (phaze.pipeline.schedule_settings); schedule_layer reads null as on.
    mode_search: Optional[bool] = None
    cache: bool = True
    cache_dir: str = ".cache/phaze/schedule"  # on-disk cache of solved layers (one JSON file per problem)


@dataclass
class PlacementCfg:
    """A fixed placement to evaluate; zeros (or null) mean "search it" over the train.* values."""

    dp: int = 0
    pp: int = 0
    # One TP width for every stage (a list, one per stage, is refused by name: phaze.config_check.check_placement).
    tp: Any = 0
    zero: Optional[int] = None  # 0..3
    sp: Optional[bool] = None
    vp: int = 0
    cp: int = 0
    tp_comm_overlap: Optional[bool] = None
    ep: int = 0
    # Transformer layers per pipeline stage (pp x vp entries with interleaving, chunks in order), for a fixed
    # placement; null: Megatron's even split (the first num_layers mod pp stages one layer more).
    layers_per_stage: Optional[List[int]] = None


@dataclass
class SearchCfg:
    """The Optuna study over the architecture space."""

    sampler: str = "tpe"  # grid | tpe | nsga2
    n_trials: int = 200
    # Stop proposing trials after this many seconds of search (null: no limit); a resumed study runs again as long.
    timeout_s: Optional[float] = None
    seed: int = 0
    objective: str = "throughput"  # throughput | throughput_per_tdp
    prune: bool = True
    # Branch and bound keeps only points that could beat the best by more than this fraction: 0 finds the optimum
    # (of the scheduled latencies); 0.01 proves the answer within 1% of it, as a MILP's relative gap does.
    rel_gap: float = 0.0
    # The study's answer is its N best designs, exactly: branch and bound prunes against the N-th best value found (1:
    # the best alone, the cheapest). nsga2 and pareto answer with a Pareto front instead and take 1 (conf/search).
    top_n: int = 5
    # A common study (several models, search=bound) first runs each model's own study and caps the model's
    # throughput at every point by its optimum: far tighter than the work bound, at the cost of those studies.
    model_caps: bool = True
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


@dataclass
class ExportCfg:
    """`python -m phaze.export`: where to write the plan's launch arguments."""

    dir: str = "plan_export"


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
    compat: CompatCfg = field(default_factory=CompatCfg)
    cache_dir: str = ".cache/phaze"
    # Processes tracing the microbatch sizes whose workload is not cached yet, at once (null: this machine's cores).
    workload_processes: Optional[int] = None
    # `python -m phaze.evaluate figure=timeline.png`: also draw the plan's pipeline timeline (a PNG) there.
    figure: Optional[str] = None
    export: ExportCfg = field(default_factory=ExportCfg)
    # Set from `model=[a,b,...]` (phaze.config.attach_models): models searched together for one
    # common architecture; empty for the usual single `model`.
    models: List[ModelCfg] = field(default_factory=list)


@dataclass
class ValidateOptions:
    """`python -m phaze.validate`: the published runs to predict and where to write the report page."""

    runs: str = "docs/validation_runs.csv"
    # Write the markdown report here too (docs/validation.md); null: print and log only.
    markdown: Optional[str] = None


@dataclass
class ValidateCfg:
    """The fidelity check: published runs predicted with their own placements, logged to MLflow."""

    validate: ValidateOptions = field(default_factory=ValidateOptions)
    tracking: TrackingCfg = MISSING
    cache_dir: str = ".cache/phaze"


def register_configs() -> None:
    """Register the base schema and each group's schema so YAML files are validated against them."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    cs.store(name="base_validate", node=ValidateCfg)
    cs.store(group="model", name="base_model", node=ModelCfg)
    cs.store(group="hw", name="base_hw", node=HwCfg)
    cs.store(group="hw/area", name="base_area", node=AreaCfg)
    cs.store(group="hw/power", name="base_power", node=PowerCfg)
    cs.store(group="cluster", name="base_cluster", node=ClusterCfg)
    cs.store(group="train", name="base_train", node=TrainCfg)
    cs.store(group="search", name="base_search", node=SearchCfg)
    cs.store(group="tracking", name="base_tracking", node=TrackingCfg)
    cs.store(group="compat", name="base_compat", node=CompatCfg)


register_configs()
