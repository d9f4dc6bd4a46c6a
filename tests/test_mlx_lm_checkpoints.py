"""Checkpoints written by mlx-lm's own converter (`edge0.zoo.mlx_lm_checkpoint`), not edge0's writer: the model's own dtype
rules, mlx-lm's defaults for keys a config leaves out, per-tensor quantization and the other quantization modes."""
import json
import pytest
import mlx_lm
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler
from edge0.backend import core as B
from edge0.routing import spec_for, block, route_block, block_routing, same_routing
from edge0.streaming import load, load_resident, cast_params, stats
from edge0.zoo import mlx_lm_checkpoint, tiny_config

PROMPT = "The expert weights stay on the disk"

def greedy(model, tok, n=24):
    ids = B.array(tok.encode(PROMPT))
    return [int(t) for (t, _), _ in zip(generate_step(ids, model, sampler=make_sampler(temp=0.0)), range(n))]

def mlx_lm_tokens(path, dtype=None):
    "Greedy tokens of mlx-lm's own resident model (in the checkpoint's dtypes, or cast under the model's own rule)"
    model, tok = mlx_lm.load(str(path))
    if dtype is not None: cast_params(model, spec_for(json.loads((path / 'config.json').read_text())), dtype)
    return greedy(model, tok), tok

def streamed_tokens(path, dtype=None, **kw):
    with load(path, dtype=dtype, pool_bundles=12, kernels='mlx', **kw) as h:
        return greedy(h.model, h.tokenizer), stats(h.engine), h

@pytest.fixture(scope='module')
def ckpts(tmp_path_factory):
    return tmp_path_factory.mktemp('mlx_lm')

def test_qwen3_5_bf16_keeps_the_models_float32_parameters(ckpts):
    "qwen3_5 keeps A_log in float32 (its cast_predicate); served in bf16, as on a Mac, the tokens are mlx-lm's"
    path = mlx_lm_checkpoint('qwen3_5_moe', ckpts / 'q35', dtype='bfloat16', num_layers=4, num_experts=16)
    want, _ = mlx_lm_tokens(path)
    got, s, h = streamed_tokens(path, dtype=B.bfloat16)
    assert got == want and s['total']['loads'] > 0
    a_log = dict(B.tree_flatten(h.model.parameters()))['language_model.model.layers.0.linear_attn.A_log']
    assert a_log.dtype == B.float32

def test_qwen3_5_streams_every_layer_whatever_mlp_only_layers_says(ckpts):
    config = tiny_config('qwen3_5_moe', num_layers=3)
    config['text_config'].update(mlp_only_layers=[0], decoder_sparse_step=2)
    path = mlx_lm_checkpoint('qwen3_5_moe', ckpts / 'q35-only', config=config)
    spec = spec_for(json.loads((path / 'config.json').read_text()))
    assert spec.moe_layers == (0, 1, 2)  # mlx-lm's qwen3_5 reads neither mlp_only_layers nor decoder_sparse_step
    got, s, _ = streamed_tokens(path, dtype=B.float32)
    assert got == mlx_lm_tokens(path, B.float32)[0] and s['layers'][0]['loads'] > 0

def test_bailing_hybrid_keeps_its_shared_expert(ckpts):
    "mlx-lm's bailing_hybrid never reads moe_router_enable_shared_expert; the prerouted decoder must keep the expert too"
    from edge0.decode import load as load_decoded, generate_ids
    config = dict(tiny_config('bailing_hybrid', num_layers=3), moe_router_enable_shared_expert=False)
    path = mlx_lm_checkpoint('bailing_hybrid', ckpts / 'hybrid', dtype='float32', config=config)
    spec = spec_for(json.loads((path / 'config.json').read_text()))
    assert spec.shared == 'shared_experts'
    want, tok = mlx_lm_tokens(path, B.float32)
    with load_decoded(path, 'off') as h:  # edge0 computes the block itself here
        got = [t for t, _ in generate_ids(h.model, tok.encode(PROMPT), 24, decoder=h.decoder)]
    assert got == want

def test_defaults_come_from_mlx_lms_args_class(ckpts):
    "bailing_moe_v3 without n_group / topk_group / routed_scaling_factor routes as mlx-lm: 8 / 4 / 2.5"
    config = tiny_config('bailing_moe_v3', num_layers=3, num_experts=16)
    for key in ('n_group', 'topk_group', 'routed_scaling_factor'): config.pop(key)
    path = mlx_lm_checkpoint('bailing_moe_v3', ckpts / 'v3', dtype='float32', config=config)
    cfg = json.loads((path / 'config.json').read_text())
    spec = spec_for(cfg)
    assert (spec.routing.n_group, spec.routing.topk_group, spec.routing.scale) == (8, 4, 2.5)
    model, _ = mlx_lm.load(str(path))
    blk = block(spec, model, spec.moe_layers[-1])
    B.seed(0)
    x = B.normal((2, 5, spec.hidden_size))
    r = same_routing(route_block(spec, blk, x), block_routing(spec, blk, x))
    assert r['tokens'] == r['bit_identical'] == 10
    got, _, _ = streamed_tokens(path, dtype=B.float32)
    assert got == mlx_lm_tokens(path, B.float32)[0]
    mixtral = tiny_config('mixtral', num_layers=2, num_experts=8, k=2)
    mixtral.pop('num_local_experts')  # mlx-lm's default: 8
    path = mlx_lm_checkpoint('mixtral', ckpts / 'mixtral', dtype='float32', config=mixtral)
    assert spec_for(json.loads((path / 'config.json').read_text())).num_experts == 8
    assert streamed_tokens(path, dtype=B.float32)[0] == mlx_lm_tokens(path, B.float32)[0]

@pytest.mark.parametrize('name, kw', [
    ('mixed_4_6', dict(recipe='mixed_4_6', num_layers=4)),                         # 6-bit down_proj in some layers
    ('g128', dict(group_size=128, hidden=64, expert_size=128)),                    # gate/up left unquantized
    ('mxfp4', dict(mode='mxfp4', group_size=32)),                                  # uint8 scales, no biases
    ('nvfp4', dict(mode='nvfp4', group_size=16)),
    ('mxfp8', dict(mode='mxfp8', group_size=32, bits=8)),
])
def test_per_tensor_quantization_streams_as_stored(ckpts, name, kw):
    path = mlx_lm_checkpoint('qwen3_moe', ckpts / name, dtype='float32', **kw)
    got, s, h = streamed_tokens(path, dtype=B.float32)
    assert got == mlx_lm_tokens(path, B.float32)[0] and s['total']['loads'] > 0
    quant = h.engine.store.quant
    if name == 'mixed_4_6': assert {quant[l]['down_proj'].bits for l in quant} == {4, 6}
    if name == 'g128': assert all(q['gate_proj'] is None and q['down_proj'].group_size == 128 for q in quant.values())
    if 'mode' in kw: assert all(q['up_proj'].mode == kw['mode'] for q in quant.values())

def test_mixed_bf16_path(ckpts):
    "The bf16 path (what a Mac serves) on a mixed-precision checkpoint, where the CPU's kernels allow it"
    path = mlx_lm_checkpoint('qwen3_moe', ckpts / 'mixed-bf16', dtype='bfloat16', recipe='mixed_4_6', num_layers=4)
    got, _, _ = streamed_tokens(path, dtype=B.bfloat16)
    assert got == mlx_lm_tokens(path)[0]

def test_resident_and_streamed_print_the_same_text(edge0_cmd, ckpts):
    import subprocess
    path = mlx_lm_checkpoint('qwen3_moe', ckpts / 'cli', dtype='bfloat16')
    run = lambda *a: subprocess.run([edge0_cmd, 'generate', '--model', str(path), '--prompt', PROMPT, '--max-tokens', '16', *a],
                                    capture_output=True, text=True, timeout=300)
    streamed, resident = run(), run('--resident')
    assert streamed.returncode == resident.returncode == 0, resident.stderr
    assert streamed.stdout.splitlines()[0] == resident.stdout.splitlines()[0]
