"""The engine's API as scripts use it: explicit handles that close cleanly, a decoder that uses only the engine's public methods,
one memory budget, one unit, and the readability rules of the generated library."""
import ast, gc, json, os, re, shutil, subprocess, threading, tokenize
from pathlib import Path
import pytest
import edge0
from edge0.backend import core as B
from edge0.files import InputError, teacher_path
from edge0.routing import block

PKG = Path(edge0.__file__).parent
PROMPT = "Elizabeth said to her sister that"

def open_files() -> int: return len(os.listdir('/proc/self/fd'))

def use(handle, n=4):
    from edge0.decode import generate_ids
    return [t for t, _ in generate_ids(handle.model, handle.tokenizer.encode(PROMPT), n, decoder=handle.decoder)]

def test_twenty_loads_and_closes_leave_no_files_or_threads():
    from edge0.streaming import load
    from edge0.decode import load as load_decoded
    base = teacher_path('edge0-tiny')
    with load(base) as h: use(h)  # first use warms mlx-lm's and MLX's own lazily created state
    with load_decoded(base, 'routing', 4) as h: use(h)
    del h
    gc.collect()
    files, threads = open_files(), threading.active_count()
    for i in range(20):
        if i % 2: h = load(base, decode_path='staged', prefill_path='whole_layer')
        else: h = load_decoded(base, 'routing', 4)
        with h:
            use(h)
            assert threading.active_count() > threads  # the engine's and decoder's threads ran
        assert h.engine.store.fds == {}
    del h
    gc.collect()
    assert (open_files(), threading.active_count()) == (files, threads)

def test_close_restores_the_model_and_hangs_nothing_on_it():
    from mlx_lm.models.switch_layers import SwitchGLU
    from edge0.decode import load
    h = load(teacher_path('edge0-tiny'), 'routing', 4)
    layers = h.model.model.layers
    assert not hasattr(h.model, 'edge0') and not hasattr(h.model, 'edge0_decoder')
    assert all('mlp' in vars(layer) for layer in layers)  # the decoder's blocks shadow the model's
    streamed = use(h, 6)
    h.close()
    assert all('mlp' not in vars(layer) for layer in layers)
    assert all(isinstance(block(h.spec, h.model, l)['switch_mlp'], SwitchGLU) for l in h.spec.moe_layers)
    assert len(use(h, 6)) == len(streamed)  # the model runs again, resident, as mlx-lm built it
    h.close()  # closing twice is harmless

PUBLIC = {'k', 'plan_slots', 'stage', 'compute_planned', 'keep_resident', 'warm', 'record', 'resident', 'pooled',
          'holds_planned', 'resident_room', 'low_bits', 'low_below', 'stage_ahead',
          'hold_stage_ahead'}

def test_decoder_uses_only_the_engines_public_methods():
    tree = ast.parse((PKG / 'decode.py').read_text())
    used, assigned = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Attribute, ast.Name)):
            owner = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
            if owner == 'engine':
                (assigned if isinstance(node.ctx, ast.Store) else used).add(node.attr)
    assert used and used <= PUBLIC, used - PUBLIC
    assert assigned == set()

def test_resident_layers_and_slots_share_the_pool_budget():
    from edge0.decode import load, decode_stats
    base, resident = teacher_path('edge0-tiny'), 2 * 64  # routing keeps layers 0 and 1 (64 experts each) resident
    planned = 4 * 4  # K slots for each of the 4 planned layers
    with load(base, 'routing', 4, pool_bundles=48, pool_bytes=None) as h:  # too small to keep them: read on demand
        assert h.engine.resident == {} and any('read on demand' in n for n in h.notes), h.notes
        use(h, 4)
    with pytest.raises(InputError, match='cannot hold 4 planned slots of layer'):
        load(base, 'routing', 4, pool_bundles=planned + 3, pool_bytes=None)
    with load(base, 'routing', 4, pool_bundles=48 + resident + planned, pool_bytes=None) as h:
        use(h, 8)
        s = decode_stats(h)
        expert = h.engine.store.expert_nbytes
        assert s['pool']['resident_layers'] == [0, 1] and s['pool']['resident_bytes'] == resident * expert
        assert s['pool']['reserved_bytes'] == (resident + planned) * expert
        assert s['pool']['budget_bytes'] == (48 + resident + planned) * expert and h.engine.pool.max_bundles == 48
        assert s['pool']['bundles'] <= 48 and s['slot_bytes'] == 4 * 4 * expert  # K slots for each of the 4 planned layers
    with pytest.raises(InputError, match='the engine serves K=8, the decoder K=4'):
        from edge0.streaming import load as stream_load
        from edge0.decode import Decoder
        with stream_load(base) as s: Decoder(s.model, s.spec, s.engine, 'off', 4)

def run(cmd, *args):
    return subprocess.run([cmd, *map(str, args)], capture_output=True, text=True, timeout=300)

def test_cli_input_errors(edge0_cmd, tmp_path):
    "Each a one-line error naming the fault, exit status 2, no traceback, nothing written"
    base = teacher_path('edge0-tiny')
    notok = tmp_path / 'notok'
    shutil.copytree(base, notok, ignore=shutil.ignore_patterns('tokenizer*', 'prerouter*'))
    trace = tmp_path / 'trace.json'
    trace.write_text(json.dumps(dict(format='edge0-trace/1', model_type='qwen3_moe', k=8, steps=[])))
    gen = ('generate', '--model', base, '--prompt', 'hi', '--max-tokens', 2)
    cases = [(('generate', '--model', notok, '--prompt', 'hi'), 'has no tokenizer'),
             (('generate', '--model', base, '--prompt', ''), '--prompt is empty'),
             ((*gen, '--mode', 'oracle', '--trace', trace), "has no 'layers' field"),
             ((*gen, '--k', 0), '--k must be at least 1'),
             ((*gen, '--k', 65), 'k=65 is out of range'),
             ((*gen, '--pool-mib', 0), 'must be above 0'),
             ((*gen, '--slots', 2, '--decode-path', 'staged'), '2 staged slots per layer cannot hold K=8')]
    for args, want in cases:
        r = run(edge0_cmd, *args)
        assert r.returncode == 2 and want in r.stderr and 'Traceback' not in r.stderr, (args, r.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ['notok', 'trace.json']

def test_pool_mib_is_mebibytes(edge0_cmd):
    r = run(edge0_cmd, 'generate', '--model', teacher_path('edge0-tiny'), '--prompt', 'hi', '--max-tokens', 2, '--pool-mib', 3,
            '--stats')
    assert r.returncode == 0, r.stderr
    assert 'budget 3.00 MiB' in r.stdout  # 3 * 2**20 bytes, printed back in the same unit

def statement_semicolons(path) -> list:
    with open(path, 'rb') as f:
        return [t.start[0] for t in tokenize.tokenize(f.readline) if t.type == tokenize.OP and t.string == ';']

def code_lines(path):
    "`(number, line)` of a generated module, less what nbdev writes itself: the docstring (the notebook's summary) and `__all__`"
    in_all = False
    for i, line in enumerate(path.read_text().splitlines(), 1):
        in_all = in_all or line.startswith('__all__ = [')
        if not (in_all or (i == 1 and line.startswith(('"', "'")))): yield i, line
        in_all = in_all and not line.rstrip().endswith(']')

def test_library_reads_cleanly():
    "No line over 120 characters and no statements chained with ';' in the generated library"
    files = [p for p in PKG.rglob('*.py') if p.name != '_modidx.py']
    long = [f"{p.name}:{i}" for p in files for i, line in code_lines(p) if len(line) > 120]
    chained = [f"{p.name}:{i}" for p in files for i in statement_semicolons(p)]
    assert long == [] and chained == [], (long[:10], chained[:10])

# the modules made when the engine and the planner were split by concern: the house width from the start
NARROW = ('experts', 'pool', 'engine', 'streaming', 'plan_inputs', 'plan_calibration', 'plan_verdict')

def test_new_homes_keep_the_house_width():
    "The split modules keep every line within 100 characters (what nbdev writes itself aside)"
    wide = [f"{n}.py:{i}" for n in NARROW for i, line in code_lines(PKG / f"{n}.py") if len(line) > 100]
    assert wide == [], wide[:10]
