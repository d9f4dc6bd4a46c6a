"The generated library used as scripts use it: imports, the facade rule, routing parity outside the notebooks."
import re
from pathlib import Path
import pytest
import edge0

PKG = Path(edge0.__file__).parent

def test_only_the_backend_imports_mlx():
    "Routing, zoo, CLI and the rest go through edge0.backend; mlx_lm (model classes) is allowed"
    pat = re.compile(r'^\s*(import mlx(\.|\s|$)|from mlx(\.| ))', re.M)
    offenders = [str(p.relative_to(PKG)) for p in PKG.rglob('*.py')
                 if 'backend' not in p.parts and pat.search(p.read_text())]
    assert offenders == []

def test_one_dtype_rule():
    "A model is cast by streaming.cast_params (its cast_predicate's parameters kept float32), never Module.set_dtype"
    pat = re.compile(r'\b(model|teacher|base|student)\.set_dtype\(')
    offenders = [f"{p.relative_to(PKG)}:{i}" for p in PKG.rglob('*.py')
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pat.search(line)]
    assert offenders == []

@pytest.mark.parametrize('mt', ['qwen3_moe', 'mixtral', 'deepseek_v2', 'deepseek_v3', 'bailing_moe', 'bailing_moe_v3'])
def test_routing_bit_identical(mt):
    from edge0.backend import core as B
    from edge0.routing import block, route_block, block_routing, same_routing
    from edge0.zoo import tiny_config, tiny_model
    model, spec = tiny_model(tiny_config(mt), seed=7)
    blk = block(spec, model, spec.moe_layers[-1])
    B.seed(7)
    for scale in (0.5, 3.0):
        x = B.normal((3, 5, spec.hidden_size), scale=scale)
        r = same_routing(route_block(spec, blk, x), block_routing(spec, blk, x))
        assert r['tokens'] == r['same_sets'] == r['bit_identical'] == 15

def test_zoo_loads_with_mlx_lm(tiny_qwen):
    import mlx_lm
    from edge0.backend import core as B
    model, tok = mlx_lm.load(str(tiny_qwen))
    assert model(B.array([tok.encode('hello world')])).shape[-1] == 512
