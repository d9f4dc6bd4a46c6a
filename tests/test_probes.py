"The pre-attention probes on the committed tiny teachers: the tap, the warm start, recall, provenance."
import json, shutil
import numpy as np
import pytest

@pytest.fixture(scope='module', params=['edge0-tiny', 'edge0-tiny-ds'])
def teacher(request):
    "A committed int4 base loaded with mlx-lm, its spec, and a capture of one held-out window"
    import mlx_lm
    from edge0.backend import core as B
    from edge0.files import teacher_path
    from edge0.probes import capture_pre
    from edge0.store import model_spec
    from edge0.files import heldout_ids
    base = teacher_path(request.param)
    model, tokenizer = mlx_lm.load(str(base))
    model.set_dtype(B.compute_dtype())
    spec = model_spec(base)
    return base, model, spec, capture_pre(spec, model, heldout_ids(tokenizer, 2000, np.int64)[:256], spec.k)

def test_tap_restores_the_model(teacher):
    from edge0.backend import core as B
    from edge0.probes import PreAttnTap, decoder_layer
    _, model, spec, _ = teacher
    x = B.array([[5, 17, 300, 42, 9]])
    before = B.to_numpy(model(x))
    norms = {l: decoder_layer(spec, model, l).input_layernorm for l in spec.moe_layers}
    with PreAttnTap(spec, model) as tap:
        assert np.array_equal(B.to_numpy(model(x)), before)
        assert sorted(tap.seen) == list(spec.moe_layers)
    for l in spec.moe_layers:
        layer = decoder_layer(spec, model, l)
        assert 'input_layernorm' not in layer.__dict__ and layer.input_layernorm is norms[l]
    assert np.array_equal(B.to_numpy(model(x)), before)

def test_warm_start_is_the_router_on_the_pre_attention_state(teacher):
    from edge0.backend import core as B
    from edge0.probes import init_probes
    from edge0.routing import block, route_block, router_logits
    _, model, spec, cap = teacher
    probes = init_probes(spec, model)
    for l in spec.moe_layers:
        pre = B.array(cap[l]['pre'])
        own = router_logits(spec, block(spec, model, l), pre)
        assert np.allclose(B.to_numpy(probes(l, pre)), B.to_numpy(own), atol=1e-4)
        routed = np.array(route_block(spec, block(spec, model, l), pre)[0])
        assert (np.sort(probes.routed(model, l, cap[l]['pre'], spec.k), -1) == np.sort(routed, -1)).mean() > 0.99

def test_a_perfect_predictor_has_recall_one(teacher):
    "Fed the router's own input in place of the pre-attention state, the warm start is the router"
    from edge0.probes import init_probes, probe_recall
    from edge0.prerouter import recall
    _, model, spec, cap = teacher
    perfect = {l: dict(c, pre=c['h']) for l, c in cap.items()}
    rows = probe_recall(init_probes(spec, model), model, perfect, spec.k)
    assert all(r['warm'] == 1.0 for r in rows.values())
    assert recall(cap[spec.moe_layers[0]]['routed'], cap[spec.moe_layers[0]]['routed']) == 1.0

def test_probes_for_another_base_are_refused(teacher, tmp_path):
    from edge0.files import InputError, teacher_path
    from edge0.prerouter import fingerprint
    from edge0.probes import init_probes, load_probes, save_probes
    base, model, spec, _ = teacher
    copy = shutil.copytree(base, tmp_path / base.name, ignore=shutil.ignore_patterns('prerouter*', 'lora*'))
    p = save_probes(init_probes(spec, model, hidden=16), copy)
    assert load_probes(copy).layers == spec.moe_layers
    other = teacher_path('edge0-tiny-ds' if base.name == 'edge0-tiny-int4' else 'edge0-tiny')
    with pytest.raises(InputError, match='made for another base'): load_probes(other, path=p)
    with pytest.raises(InputError, match=f'serves K={spec.k}, asked for K=2'): load_probes(copy, k=2, path=p)
    config, n = json.loads((copy / 'config.json').read_text()), spec.num_layers
    (copy / 'config.json').write_text(json.dumps(dict(config, num_hidden_layers=n - 1)))
    with pytest.raises(InputError, match='made for another base'): load_probes(copy, path=p)
    # a converted base carries its source's fingerprint: then the layer count is what refuses the probes
    (copy / 'config.json').write_text(json.dumps(dict(config, num_hidden_layers=n - 1,
                                                      edge0_layout=dict(source_fingerprint=fingerprint(base)))))
    with pytest.raises(InputError, match=f'made for {n} layers, the base has {n - 1}'): load_probes(copy, path=p)
