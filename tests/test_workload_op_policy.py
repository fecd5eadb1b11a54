"""torchtitan's selective recompute by operator (model.selective_policy=torchtitan_op, phaze.workload.op_policy):
what a block keeps and what its backward runs again, on a small Llama layer computed by hand."""

import pytest

from phaze.workload.families import build_parts
from phaze.workload.trace import part_graph
from tests.conftest import compose_cfg

# One Llama block: s = 128 tokens, h = 256 (4 heads of 64), 2 KV heads (128 wide), FFN 512; mbs 1; bf16.
S, H, KV, F = 128, 256, 128, 512
BF16, FP32 = 2, 4
SMALL = ["model=llama2", "model.num_layers=2", f"model.hidden_size={H}", "model.num_heads=4", "model.num_kv_heads=2",
         f"model.ffn_hidden_size={F}", "model.vocab_size=1000", f"model.seq_len={S}", f"model.max_position_embeddings={S}",
         "model.attention=flash"]


def block(policy: str):
    cfg = compose_cfg(*SMALL, f"model.selective_policy={policy}").model
    return part_graph("layer", build_parts(cfg, 1, 1)["layer"], 1, 1, S, selective_policy=policy)


@pytest.fixture(scope="module")
def blocks():
    return {p: block(p) for p in ("attention_core", "torchtitan_op")}


def test_the_block_keeps_its_input_odd_matmuls_and_sdpa(blocks):
    """Kept: the block's input (s x h), the 1st, 3rd, 5th and 7th matmuls' outputs (query s x h, value s x kv, gate
    s x f, down projection s x h) and the attention kernel's output (s x h) with its fp32 log-sum-exp (heads x s):
    428,032 bytes; selective recompute frees the rest of what the forward saves."""
    kept = (S * H + S * H + S * KV + S * F + S * H) * BF16 + S * H * BF16 + 4 * S * FP32
    assert kept == 428_032
    op = blocks["torchtitan_op"]
    assert op.saved_bytes == blocks["attention_core"].saved_bytes
    assert op.saved_bytes - op.core_saved_bytes == pytest.approx(kept)


def test_the_backward_runs_again_every_other_operator(blocks):
    """The even-numbered matmuls (key, output projection, up projection) and every norm, rotary and activation
    operator run again; the kept matmuls and the attention kernel do not."""
    ops = blocks["torchtitan_op"].fwd.ops
    again = set(ops[ops.core].name)
    matmuls = list(ops[ops.target == "mm"].name)
    assert len(matmuls) == 7
    assert [m in again for m in matmuls] == [False, True, False, True, False, True, False]
    assert not again & set(ops[ops.name.str.startswith("flash_attention")].name)
    assert {"rsqrt", "silu", "cat"} <= {n for n in ops[ops.core].target}
    # Megatron's selective recompute runs the attention core alone.
    core = blocks["attention_core"].fwd.ops
    assert set(core[core.core].name) >= set(core[core.name.str.startswith("flash_attention")].name)
    assert not set(core[core.core].name) & set(matmuls)
