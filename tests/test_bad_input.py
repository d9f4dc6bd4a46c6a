"""Bad input, class by class, as a user meets it: `edge0 <cmd>` prints one line naming the file, key or value at fault,
exits 2, shows no traceback and writes nothing. Where no command reaches a case, the library raises `InputError`."""
import gzip, json, os, re, shutil, subprocess
from pathlib import Path
import pytest
from edge0.files import InputError, teacher_path

TIMEOUT = 300
KEY = 'model.layers.1.mlp.switch_mlp.up_proj'
GATE = 'model.layers.1.mlp.switch_mlp.gate_proj'

def run(cmd, *args):
    return subprocess.run([cmd, *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)

def refused(r, *want):
    "`r` is a clean refusal: exit status 2, one `edge0 <cmd>: error:` line naming every `want`, no traceback"
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert 'Traceback' not in r.stderr, r.stderr
    assert 'error:' in r.stderr
    for w in want: assert w in r.stderr, (w, r.stderr)

def generate(edge0_cmd, d, *extra):
    return run(edge0_cmd, 'generate', '--model', d, '--prompt', 'hi', '--max-tokens', 2, *extra)

def rewrite_header(path, edit=None, raw=None):
    "Replace the JSON header of the safetensors file `path`: `edit(header)` in place, or the bytes `raw`"
    data = Path(path).read_bytes()
    n = int.from_bytes(data[:8], 'little')
    hdr = json.loads(data[8:8 + n])
    if edit: edit(hdr)
    h = raw if raw is not None else json.dumps(hdr).encode()
    Path(path).write_bytes(len(h).to_bytes(8, 'little') + h + data[8 + n:])

def set_length(path, n:int):
    "Overwrite the header-length field of `path` with `n`"
    data = Path(path).read_bytes()
    Path(path).write_bytes(n.to_bytes(8, 'little') + data[8:])

@pytest.fixture
def model(tiny_qwen, tmp_path):
    d = tmp_path / 'm'
    shutil.copytree(tiny_qwen, d)
    return d

def edit_config(d, **change):
    "Set (or, for None, remove) keys of `d`/config.json"
    c = json.loads((d / 'config.json').read_text())
    c.update(change)
    (d / 'config.json').write_text(json.dumps({k: v for k, v in c.items() if v is not None}))

# --- headers --------------------------------------------------------------------------------------

def _offsets(v): return lambda h: h[KEY + '.weight'].__setitem__('data_offsets', v)
def _shape(v): return lambda h: h[KEY + '.weight'].__setitem__('shape', v)
def _overlap(h): h[KEY + '.weight']['data_offsets'] = h[GATE + '.weight']['data_offsets']

HEADERS = {
    'overlapping tensors': (dict(edit=_overlap), ['model.safetensors', 'overlap tensor']),
    'header is a list': (dict(raw=b'[1, 2, 3]'), ['model.safetensors', 'header is a JSON list, expected an object']),
    'entry not an object': (dict(edit=lambda h: h.__setitem__(KEY + '.weight', 7)),
                            [KEY + '.weight is 7, expected an object']),
    'negative offsets': (dict(edit=_offsets([-4, 4])), ['data_offsets [-4, 4]', 'pair of non-negative integers']),
    'float offsets': (dict(edit=_offsets([0.0, 8.0])), ['data_offsets [0.0, 8.0]', 'pair of non-negative integers']),
    'bool offsets': (dict(edit=_offsets([False, 8])), ['data_offsets [False, 8]', 'pair of non-negative integers']),
    'offsets not a pair': (dict(edit=_offsets([0, 8, 16])), ['data_offsets [0, 8, 16]', 'a pair of']),
    'negative shape': (dict(edit=_shape([16, -64, 8])), ['shape [16, -64, 8]', 'list of non-negative integers']),
    'bool shape': (dict(edit=_shape([16, True, 8])), ['shape [16, True, 8]', 'list of non-negative integers']),
}

@pytest.mark.parametrize('case', list(HEADERS) + ['length 2**63'])
def test_bad_headers(edge0_cmd, model, case):
    "Header bytes that lie: every one refused by name before a byte of data is used"
    f = model / 'model.safetensors'
    if case == 'length 2**63':
        set_length(f, 2**63)
        want = [f'header length {2**63} runs past the end of the file']
    else:
        change, want = HEADERS[case]
        rewrite_header(f, **change)
    refused(generate(edge0_cmd, model), *want)

# --- files and paths ------------------------------------------------------------------------------

def _shard_is_directory(d):
    (d / 'model.safetensors').rename(d / 'model-00001-of-00001.safetensors')
    (d / 'model.safetensors').mkdir()
    return ['model.safetensors is a directory, expected a safetensors file']

def _index(text, *want):
    def make(d):
        (d / 'model.safetensors.index.json').write_text(text)
        return ['model.safetensors.index.json', *want]
    return make

def _config_not_json(d):
    (d / 'config.json').write_text('{"model_type": ')
    return ['config.json', 'is not valid JSON']

FILES = {
    'shard is a directory': _shard_is_directory,
    'index not JSON': _index('{"weight_map": {', 'is not valid JSON'),
    'index not an object': _index('["model.safetensors"]', 'expected an object'),
    'weight_map not an object': _index('{"weight_map": ["model.safetensors"]}', "weight_map is ['model.safetensors']"),
    'config not JSON': _config_not_json,
}

@pytest.mark.parametrize('case', FILES)
def test_bad_files(edge0_cmd, model, case):
    "Files that are not what their names say"
    want = FILES[case](model)
    refused(generate(edge0_cmd, model), *want)

def test_unreadable_shard(model, monkeypatch):
    "A shard we may not read (root ignores chmod, so the open call is made to fail) is an InputError naming it"
    import builtins, edge0.store
    real_open = builtins.open
    def deny(path, *a, **k):
        if str(path).endswith('.safetensors'): raise PermissionError(13, 'Permission denied', str(path))
        return real_open(path, *a, **k)
    monkeypatch.setattr(edge0.store, 'open', deny, raising=False)
    with pytest.raises(InputError, match=r'model\.safetensors: cannot read the file \(Permission denied\)'):
        edge0.store.ExpertStore(model)

# --- the tokenizer's files and what mlx-lm builds the model from -------------------------------------------------

def _write(name, text): return lambda d: (d / name).write_text(text)

TOKENIZER = {  # every file check_tokenizer reads, or what transformers cannot make a tokenizer from
    'tokenizer.json not JSON': (_write('tokenizer.json', '{"version": '),
                                ['tokenizer.json is not valid JSON', 'expected the tokenizer']),
    'tokenizer.json a list': (_write('tokenizer.json', '[1]'),
                              ['tokenizer.json holds a JSON list, expected an object']),
    'tokenizer.json no tokenizer': (_write('tokenizer.json', '{}'),
                                    ['no tokenizer can be made from tokenizer.json', "KeyError: 'added_tokens'"]),
    'tokenizer_config.json not JSON': (_write('tokenizer_config.json', '{"eos_token": '),
                                       ['tokenizer_config.json is not valid JSON', 'the tokenizer settings']),
    'chat_template not text': (_write('tokenizer_config.json', '{"chat_template": 5}'),
                               ["chat_template is '5', expected a Jinja template"]),
    'generation_config.json a list': (_write('generation_config.json', '[2]'),
                                      ['generation_config.json holds a JSON list']),
}
BUILD = {  # config.json values mlx-lm cannot build the model from (spec_for needs none of them)
    'vocab_size missing': (lambda d: edit_config(d, vocab_size=None),
                           ["config.json: key 'vocab_size' is missing (mlx-lm's qwen3_moe model needs it"]),
    'eos_token_id not an id': (lambda d: edit_config(d, eos_token_id='x'), ["config.json: eos_token_id is 'x'"]),
    'vocab_size not a number': (lambda d: edit_config(d, vocab_size='x'), ['mlx-lm cannot build the model (TypeError']),
}

def test_bad_tokenizer_file_refused_by_every_command(edge0_cmd, model, tmp_path):
    "tokenizer.json that is not JSON: one line from each command that opens the tokenizer, before any work"
    damage, want = TOKENIZER['tokenizer.json not JSON']
    damage(model)
    refused(generate(edge0_cmd, model), *want)
    refused(run(edge0_cmd, 'chat', '--model', model), *want)
    refused(run(edge0_cmd, 'serve', '--model', model, '--port', 0), *want)
    refused(run(edge0_cmd, 'plan', model, '--json', tmp_path / 'plan.json'), *want)  # before minutes of measuring
    assert not (tmp_path / 'plan.json').exists()

def test_config_mlx_lm_cannot_build_from(edge0_cmd, model):
    "A key only building the model needs (spec_for does without it), resident: named before mlx-lm's TypeError"
    damage, want = BUILD['vocab_size missing']
    damage(model)
    refused(generate(edge0_cmd, model, '--resident'), *want)

def test_bad_files_the_model_is_made_from_in_the_library(tiny_qwen, tmp_path):
    "Every case through each loader: streamed, resident, the tokenizer alone (phase 1) and the harness's sequence"
    from edge0.conditions import sequence
    from edge0.streaming import load, load_resident, open_tokenizer
    tokenizer_only = [open_tokenizer, lambda d: sequence(d, 8)]
    for case, (damage, want) in {**TOKENIZER, **BUILD}.items():
        d = Path(shutil.copytree(tiny_qwen, tmp_path / case.replace(' ', '-')))
        damage(d)
        for f in [load, load_resident] + (tokenizer_only if case in TOKENIZER else []):
            with pytest.raises(InputError) as e: f(d)
            for w in want: assert w in str(e.value), (case, f, str(e.value))

# --- config values --------------------------------------------------------------------------------

CONFIGS = {
    'K of 0': (dict(num_experts_per_tok=0), 'num_experts_per_tok is 0, expected an integer >= 1'),
    'negative K': (dict(num_experts_per_tok=-2), 'num_experts_per_tok is -2, expected an integer >= 1'),
    'K not an integer': (dict(num_experts_per_tok=2.5), 'num_experts_per_tok is 2.5'),
    'K above E': (dict(num_experts_per_tok=17), 'num_experts_per_tok is 17, expected at most num_experts (16)'),
    'no experts': (dict(num_experts=0), 'num_experts is 0, expected an integer >= 1'),
    'missing key': (dict(moe_intermediate_size=None), "key 'moe_intermediate_size' is missing"),
    'no model_type': (dict(model_type=None), "key 'model_type' is missing"),
    'group size 0': (dict(quantization=dict(group_size=0, bits=4)), 'quantization group_size is 0'),
    'group size not dividing': (dict(quantization=dict(group_size=48, bits=4)), 'quantization group_size is 48'),
    'bits unsupported': (dict(quantization=dict(group_size=64, bits=7)),
                         'quantization bits is 7, expected one of 2, 3, 4, 5, 6, 8'),
}

@pytest.mark.parametrize('case', CONFIGS)
def test_bad_config_values(edge0_cmd, model, tmp_path, case):
    "config.json values that would generate from no experts, crash deep in routing or divide by zero"
    change, want = CONFIGS[case]
    edit_config(model, **change)
    refused(generate(edge0_cmd, model), 'config.json', want)
    if case == next(iter(CONFIGS)):  # every command reads the config through spec_for: the others once (each costs 4 s)
        refused(run(edge0_cmd, 'spec', model), 'config.json', want)
        refused(run(edge0_cmd, 'convert', model, tmp_path / 'out'), 'config.json', want)
        assert not (tmp_path / 'out').exists() and not list(tmp_path.glob('.out.tmp-*'))

def test_bad_config_values_in_the_library(tiny_qwen):
    from edge0.routing import spec_for, resolve_model_type
    c = json.loads((tiny_qwen / 'config.json').read_text())
    for change, want in CONFIGS.values():
        bad = {k: v for k, v in {**c, **change}.items() if v is not None}
        with pytest.raises(InputError, match=re.escape(want)): spec_for(bad)
    with pytest.raises(InputError, match="'model_type' is missing"): resolve_model_type({})

def test_convert_refuses_a_torch_cpu_source(edge0_cmd, tiny_torch, tmp_path):
    "Packed experts cannot be unpacked; copied as they are they would be labelled with another layout"
    refused(run(edge0_cmd, 'convert', tiny_torch, tmp_path / 'out'), 'packed for torch', 'edge0-tiny-int4')
    assert not (tmp_path / 'out').exists() and not list(tmp_path.glob('.out.tmp-*'))

def test_convert_refuses_overlapping_input(edge0_cmd, model, tmp_path):
    rewrite_header(model / 'model.safetensors', edit=_overlap)
    refused(run(edge0_cmd, 'convert', model, tmp_path / 'out'), 'overlap tensor')
    assert not (tmp_path / 'out').exists() and not list(tmp_path.glob('.out.tmp-*'))

# --- the prerouter file ---------------------------------------------------------------------------

@pytest.fixture
def base(tmp_path):
    "A copy of the committed tiny base with its heads (prerouter.safetensors, native K=8)"
    return Path(shutil.copytree(teacher_path('edge0-tiny'), tmp_path / 'base'))

def _heads_with(base, **change):
    "Rewrite the heads' metadata with `change` (None: the key removed)"
    from edge0.backend import core as B
    from edge0.store import read_header
    p = base / 'prerouter.safetensors'
    arrays, meta = B.load_arrays(p), read_header(p)[1]
    B.save_safetensors(p, arrays, {k: v for k, v in {**meta, **change}.items() if v is not None})

PREROUTER = {
    'truncated': (lambda p: os.truncate(p, 100), 'prerouter.safetensors: header length'),
    'length 2**63': (lambda p: set_length(p, 2**63), f'prerouter.safetensors: header length {2**63} runs past'),
    'header not JSON': (lambda p: rewrite_header(p, raw=b'{"a": '), 'prerouter.safetensors: header is not valid JSON'),
    'missing metadata key': (lambda p: _heads_with(p.parent, owners=None),
                             "prerouter.safetensors: metadata has no 'owners'"),
    'K not an integer': (lambda p: _heads_with(p.parent, k='eight'), "prerouter.safetensors: metadata k is 'eight'"),
    'another base': (lambda p: _heads_with(p.parent, base_fingerprint='0123456789abcdef'),
                     'was made for another base'),
}

@pytest.mark.parametrize('case', PREROUTER)
def test_bad_prerouter_file(edge0_cmd, base, case):
    damage, want = PREROUTER[case]
    damage(base / 'prerouter.safetensors')
    refused(generate(edge0_cmd, base, '--mode', 'routing'), want)

def test_bad_prerouter_file_in_the_library(base):
    from edge0.prerouter import load_prerouter
    for case, (damage, want) in PREROUTER.items():
        shutil.copy(teacher_path('edge0-tiny') / 'prerouter.safetensors', base / 'prerouter.safetensors')
        damage(base / 'prerouter.safetensors')
        with pytest.raises(InputError, match=re.escape(want)): load_prerouter(base)
    shutil.copy(teacher_path('edge0-tiny') / 'prerouter.safetensors', base / 'prerouter.safetensors')
    with pytest.raises(InputError, match='trained for K=8'):
        load_prerouter(base, k=4, path=base / 'prerouter.safetensors')
    (base / 'prerouter-k4.safetensors').unlink()
    with pytest.raises(FileNotFoundError, match='no prerouter heads for K=4 .*prerouter-k4.safetensors'):
        load_prerouter(base, k=4)

# --- compressed calibration data -----------------------------------------------------------------

def _gz_damage(case, whole):
    "`whole` (a gzip file's bytes) cut after 500 bytes, or with a byte in its middle flipped (a CRC mismatch)"
    if case == 'truncated': return whole[:500]
    b = bytearray(whole)
    b[len(b) // 2] ^= 0xff
    return bytes(b)

@pytest.mark.parametrize('case', ['truncated', 'corrupt middle byte'])
def test_damaged_gzip_data_refused_before_training(edge0_cmd, base, tmp_path, case):
    "`train --phase heads --data notes.txt.gz` on a damaged .gz: one line naming it, nothing trained or written"
    text = ''.join(f"Line {i} of the notes, {i * i} words long.\n" for i in range(4000))
    notes, heads, work = tmp_path / 'notes.txt.gz', tmp_path / 'heads', tmp_path / 'work'
    notes.write_bytes(_gz_damage(case, gzip.compress(text.encode())))
    before = sorted((f.name, f.stat().st_mtime_ns) for f in base.iterdir())
    r = run(edge0_cmd, 'train', base, '--phase', 1, '--data', notes, '--dst', heads, '--work', work)
    refused(r, f"{notes}: the gzip stream is truncated or corrupt", 'expected a complete .gz file')
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout.strip(), (r.stdout, r.stderr)
    assert not heads.exists() and not work.exists()
    assert sorted((f.name, f.stat().st_mtime_ns) for f in base.iterdir()) == before  # no heads beside the model
