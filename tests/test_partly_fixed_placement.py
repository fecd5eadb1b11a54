"""A partly fixed placement (placement.dp, pp and tp set, other fields left unset) searches the unset fields over the
values consistent with what is fixed (phaze.plan_space.fixed_plans), and is refused only where none fits."""

import json
import subprocess
import sys

import pytest

from phaze.config import compose_config, typed_config
from phaze.config_check import check_config
from phaze.config_values import ConfigError
from phaze.plan_space import fixed_plans, options

MEGATRON_512 = ["model=gpt2", "model.num_layers=8", "hw=h100", "cluster=dgx_h100", "cluster.devices=512", "train=megatron",
                "train.global_batch=1024", "train.mbs=1", "train.recompute=selective"]
"""A 512-GPU Megatron job (train.cp=[1, 2], train.vp=[1, 2, 4], train.zero=[0, 1, 2, 3]) on an 8-layer GPT-2."""
FULL_512 = ["placement.tp=1", "placement.pp=4", "placement.dp=128"]
"""dp x pp x tp = 512: the whole cluster, so context parallelism 2 does not fit."""


def checked(*overrides):
    cfg = compose_config(*MEGATRON_512, *overrides)
    check_config(cfg)
    return cfg


def test_unset_cp_vp_zero_of_a_full_cluster_plan_search_what_fits():
    cfg = checked(*FULL_512)
    assert options(typed_config(cfg), "cp") == [1]  # 128 x 4 x 1 x 2 = 1024 > 512
    assert options(typed_config(cfg), "vp") == [1, 2]  # 8 layers over pp x vp = 4 x 4 chunks do not split
    assert options(typed_config(cfg), "zero") == [0, 1, 2, 3]
    plans = fixed_plans(typed_config(cfg))
    # zero 4 x (sp, tp_comm_overlap) in {(false, false), (true, false), (true, true)} x vp 2
    assert len(plans) == 4 * 3 * 2
    assert {(p["dp"], p["pp"], p["tp"], p["cp"], p["mbs"], p["recompute"]) for p in plans} == {(128, 4, 1, 1, 1, "selective")}
    assert {(p["zero"], p["vp"]) for p in plans} == {(z, v) for z in range(4) for v in (1, 2)}
    assert not any(p["tp_comm_overlap"] and not p["sp"] for p in plans)


def test_unset_vp_of_a_one_stage_plan_is_1():
    cfg = checked("placement.tp=1", "placement.pp=1", "placement.dp=512")
    assert options(typed_config(cfg), "vp") == [1]
    assert {p["vp"] for p in fixed_plans(typed_config(cfg))} == {1}


def test_set_fields_are_still_checked_as_set():
    with pytest.raises(ConfigError, match=r"placement.dp x pp x tp x cp = 1024: allowed is at most cluster.devices=512"):
        checked(*FULL_512, "placement.cp=2")
    with pytest.raises(ConfigError, match=r"placement.vp=2: Megatron's interleaved schedule needs pp >= 2"):
        checked("placement.tp=1", "placement.pp=1", "placement.dp=512", "placement.vp=2")


def test_no_fitting_value_is_refused_naming_the_field_and_the_values_tried():
    with pytest.raises(ConfigError) as refused:
        checked(*FULL_512, "train.cp=[2,4]")
    assert str(refused.value) == ("placement.cp (unset): no value of train.cp=[2, 4] fits the fixed placement (placement.dp=128, pp=4, "
                                  "tp=1); allowed: dp x pp x tp x cp = 512 x cp at most cluster.devices=512")
    with pytest.raises(ConfigError, match=r"placement.vp \(unset\): no value of train.vp=\[2, 4\] fits"):
        checked("placement.tp=1", "placement.pp=1", "placement.dp=512", "train.vp=[2,4]")


def test_unset_microbatch_sizes_keep_those_giving_every_replica_a_sequence():
    cfg = checked("placement.tp=1", "placement.pp=1", "placement.dp=512", "train.mbs=[1,2,4]", "train.recompute=[none,full]")
    plans = fixed_plans(typed_config(cfg))
    assert {(p["mbs"], p["recompute"]) for p in plans} == {(1, "none"), (1, "full"), (2, "none"), (2, "full")}  # 512 x 4 > 1024


def evaluate(tmp_path, *overrides):
    proc = subprocess.run([sys.executable, "-m", "phaze.evaluate", *MEGATRON_512, f"cache_dir={tmp_path / 'cache'}",
                           "tracking.enabled=false", *overrides], capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_full_cluster_plan_with_cp_vp_zero_unset_evaluates_to_the_best_of_its_fits(tmp_path):
    """cp=1 is chosen (2 does not fit); the zero and vp it picks give the best plan: the same plan fixed in full gives
    the same throughput, and the plan with each of them changed is no faster."""
    best = evaluate(tmp_path, *FULL_512)
    assert best["feasible"] and (best["dp"], best["pp"], best["tp"], best["cp"]) == (128, 4, 1, 1)
    fixed = ["placement.cp=1", f"placement.sp={str(best['sp']).lower()}", f"placement.tp_comm_overlap={str(best['tp_comm_overlap']).lower()}"]
    same = evaluate(tmp_path, *FULL_512, *fixed, f"placement.zero={best['zero']}", f"placement.vp={best['vp']}")
    assert same["throughput_seq_s"] == pytest.approx(best["throughput_seq_s"], rel=1e-12)
    for other in ([f"placement.zero={(best['zero'] + 1) % 4}", f"placement.vp={best['vp']}"],
                  [f"placement.zero={best['zero']}", f"placement.vp={3 - best['vp']}"]):
        assert evaluate(tmp_path, *FULL_512, *fixed, *other)["throughput_seq_s"] <= best["throughput_seq_s"] * (1 + 1e-12)


@pytest.mark.slow
def test_a_one_stage_plan_with_vp_unset_evaluates(tmp_path):
    record = evaluate(tmp_path, "placement.tp=1", "placement.pp=1", "placement.dp=512")
    assert record["feasible"] and (record["pp"], record["vp"], record["cp"]) == (1, 1, 1)
    assert record["devices_used"] == 512


@pytest.mark.parametrize("layers, vp", [([1, 3, 3, 1], 1), ([1] * 8, 2)])
def test_an_uneven_layer_split_picks_the_vp_it_lists_chunks_for(layers, vp):
    cfg = checked(*FULL_512, f"placement.layers_per_stage=[{','.join(map(str, layers))}]")
    assert {p["vp"] for p in fixed_plans(typed_config(cfg))} == {vp}
    assert {tuple(p["layers_per_stage"]) for p in fixed_plans(typed_config(cfg))} == {tuple(layers)}


def test_an_interleaved_split_the_layers_do_not_divide_runs_as_listed():
    """10 layers over pp x vp = 4 x 2 chunks: refused as an even split, run with placement.layers_per_stage listing the 8
    chunks (Megatron-Core's account_for_embedding/loss_in_pipeline_split: the first and last chunks hold fewer)."""
    ten = ["model.num_layers=10", *FULL_512, "placement.vp=2"]
    with pytest.raises(ConfigError, match=r"placement.vp=2: .* divisible by pp x vp = 4 x 2 \(or placement.layers_per_stage"):
        checked(*ten)
    cfg = checked(*ten, "placement.layers_per_stage=[1,1,2,1,1,2,1,1]")
    assert {(p["vp"], tuple(p["layers_per_stage"])) for p in fixed_plans(typed_config(cfg))} == {(2, (1, 1, 2, 1, 1, 2, 1, 1))}
    assert options(typed_config(checked("model.num_layers=10", *FULL_512, "placement.layers_per_stage=[1,1,2,1,1,2,1,1]")), "vp") == [1, 2]
