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

# the foundation chapters bottom-up, as the architecture page draws them; every other chapter ranks by its number
FOUNDATION = ('00_backend_torch', '00_backend_core', '00_backend_io', '00_backend_nn', '00_backend_quant', '00_files', '00_lowbit', '00_memory',
              '00_calib', '00_routing', '00_zoo')

def _chapter(p:Path) -> str|None:
    m = re.search(r'File to edit: [./]*nbs/([\w.-]+)\.ipynb', p.read_text()[:3000])
    return m.group(1) if m else None

def _rank(nb:str) -> tuple: return (nb[:2], FOUNDATION.index(nb) if nb in FOUNDATION else 0, nb)

def _imports(name:str, tree) -> list:
    "`(line, module)` of every edge0 module `name`'s source imports, at the top or inside a function"
    import ast
    pkg, out = name.split('.')[:-1], []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level: base = pkg[:len(pkg) - node.level + 1]
            elif (node.module or '').startswith('edge0'): base = []
            else: continue
            mod = [*base, *(node.module or '').removeprefix('edge0').lstrip('.').split('.')] if node.module else base
            mod = [m for m in mod if m]
            out += [(node.lineno, '.'.join(mod))] + [(node.lineno, '.'.join([*mod, a.name])) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name.removeprefix('edge0.')) for a in node.names if a.name.startswith('edge0.')]
    return out

def test_each_chapter_imports_only_those_below_it():
    "The architecture page's rule: a module imports only modules of chapters below its own (imports in functions too)"
    import ast
    mods = {'.'.join(p.relative_to(PKG).with_suffix('').parts): p for p in PKG.rglob('*.py') if not p.name.startswith('_')}
    chapters = {name: _chapter(p) for name, p in mods.items()}
    assert chapters['backend.quant'] == '00_backend_quant' and chapters['ladder'] == '05d_ladder'
    breaks = [f"{name} ({chapters[name]}) imports {t} ({chapters[t]}) at line {line}"
              for name, p in mods.items() if chapters[name]
              for line, t in _imports(name, ast.parse(p.read_text()))
              if t != name and chapters.get(t) and _rank(chapters[t]) >= _rank(chapters[name])]
    assert breaks == []

HOMES = {'edge0_home': 'files', 'cache_dir': 'files', 'is_writable': 'files', 'replace_whole': 'files',
         'atomic_file': 'files', 'atomic_dir': 'files', 'MiB': 'memory', 'fingerprint': 'store',
         # what a measurement runs under, apart from the A/B protocol
         **{n: 'conditions' for n in ('Cgroup', 'CgroupError', 'BenchError', 'TIERS', 'tier_rate', 'tier_name',
                                      'conditions', 'memory_cap', 'read_throttle', 'read_counter', 'disk_of',
                                      'run_child', 'child', 'evict', 'evict_experts', 'warm', 'measure_read',
                                      'sequence')},
         # the decoder's policy and the one generation loop
         **{n: 'decode' for n in ('generate_ids', 'Executor', 'Step', 'exact_top_sets')},
         # the streaming engine's parts, each in its own module (`edge0.streaming` re-exports them for scripts)
         **{n: 'experts' for n in ('expert_mlp', 'per_expert_mlp', 'torch_quant')},
         **{n: 'pool' for n in ('ExpertPool', 'LayerStats', 'POLICIES')},
         **{n: 'engine' for n in ('StreamOptions', 'StreamEngine', 'PATHS', 'StreamingSwitchGLU', 'reset_stats')},
         'kv_bytes': 'memory', 'model_spec': 'store',
         # the planner: the analytic model, what is measured for it, and the verdict a run's `auto` reads
         **{n: 'plan' for n in ('Device', 'plan', 'plan_table', 'replay', 'auto_budget', 'model_bytes')},
         **{n: 'plan_inputs' for n in ('model_trace', 'head_recall', 'served_by_heads', 'this_machine')},
         **{n: 'plan_verdict' for n in ('plan_for', 'auto_mode', 'keep_verdict')},
         'Serving': 'serving', 'ops_of': 'backend.core'}

def test_each_concept_has_one_home():
    "Paths and atomic writes come from files, MiB from memory; a child process's entry point is a function, not a string"
    import ast
    wrong, strings, mib = [], [], []
    for p in PKG.rglob('*.py'):
        if p.name.startswith('_'): continue
        text = p.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                wrong += [f"{p.name}:{node.lineno} imports {a.name} from {node.module}, not {HOMES[a.name]}"
                          for a in node.names if HOMES.get(a.name, node.module) != node.module]
            if (isinstance(node, ast.Call) and getattr(node.func, 'id', None) in ('run_child', 'child') and node.args
                    and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))):
                strings.append(f"{p.name}:{node.lineno}")
        if p.name != 'memory.py':
            mib += [f"{p.name}:{i}" for i, line in enumerate(text.splitlines(), 1)
                    if re.search(r'\b2\s*\*\*\s*20\b(?! bytes)', line)]
    assert wrong == [] and strings == [] and mib == [], (wrong[:5], strings[:5], mib[:5])

def test_streaming_keeps_its_names():
    "Scripts that import the engine's parts from `edge0.streaming` keep working after the engine got its own modules"
    import edge0.streaming as s
    from edge0 import engine, experts, pool, memory
    for mod in (engine, experts, pool):
        for name in mod.__all__: assert getattr(s, name) is getattr(mod, name) and name in s.__all__, name
    assert s.kv_bytes is memory.kv_bytes and {'load', 'load_resident', 'Handle'} <= set(s.__all__)

def test_import_sets_how_torch_threads_wait():
    """`import edge0` sets OpenMP's wait (a short spin, then sleep: OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=10000) before
    torch loads (bench/cpu_step.py's `contended` part); a value the user set is kept"""
    import os, subprocess, sys
    code = ("import edge0, os, sys; print(os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'], "
            "'torch' in sys.modules, len(edge0.OPENMP_SET))")
    env = {k: v for k, v in os.environ.items() if k not in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}
    run = lambda e: subprocess.run([sys.executable, '-c', code], env=e, capture_output=True, text=True).stdout.split()
    assert run(env) == ['PASSIVE', '10000', 'False', '2']  # set before anything loads torch, and noted
    assert run(dict(env, OMP_WAIT_POLICY='ACTIVE', GOMP_SPINCOUNT='300000')) == ['ACTIVE', '300000', 'False', '0']
