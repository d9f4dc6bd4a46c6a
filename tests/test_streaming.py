"Streaming as scripts use it, and its failures: every bad input is a clear error, never a hang or a half-written file."
import json, os, shutil, subprocess
from pathlib import Path
import pytest
from edge0.backend import core as B

TIMEOUT = 120  # a hung reader would show up as a timeout, not as a pass

def run(cmd, *args):
    return subprocess.run([cmd, *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)

def edit_header(path, fn):
    raw = Path(path).read_bytes(); n = int.from_bytes(raw[:8], 'little')
    hdr = json.loads(raw[8:8 + n]); fn(hdr)
    h = json.dumps(hdr).encode(); h += b' ' * (-len(h) % 8)
    Path(path).write_bytes(len(h).to_bytes(8, 'little') + h + raw[8 + n:])

@pytest.fixture
def model(tiny_qwen, tmp_path):
    d = tmp_path / 'm'; shutil.copytree(tiny_qwen, d); return d

KEY = 'model.layers.1.mlp.switch_mlp.up_proj'

def check(edge0_cmd, d, *want, extra=()):
    r = run(edge0_cmd, 'generate', '--model', d, '--prompt', 'hello', '--max-tokens', 4, *extra)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    for w in want: assert w in r.stderr, r.stderr
    assert 'Traceback' not in r.stderr

def test_truncated_shard(edge0_cmd, model):
    f = model / 'model.safetensors'; os.truncate(f, f.stat().st_size // 2)
    check(edge0_cmd, model, 'model.safetensors', 'truncated')

def test_header_offsets_past_file(edge0_cmd, model):
    def lie(h): b, e = h[KEY + '.weight']['data_offsets']; h[KEY + '.weight']['data_offsets'] = [b + 10**8, e + 10**8]
    edit_header(model / 'model.safetensors', lie)
    check(edge0_cmd, model, KEY + '.weight', 'run past the end of the file')

def test_missing_expert_key(edge0_cmd, model):
    edit_header(model / 'model.safetensors', lambda h: h.__setitem__(KEY + '.renamed', h.pop(KEY + '.scales')))
    check(edge0_cmd, model, KEY + '.scales', 'is in no shard')

def test_dtype_mismatch(edge0_cmd, model):
    edit_header(model / 'model.safetensors', lambda h: h[KEY + '.weight'].__setitem__('dtype', 'I32'))
    check(edge0_cmd, model, KEY + '.weight', 'dtype I32', 'expected U32')

def test_shape_mismatch_with_config(edge0_cmd, model):
    c = json.loads((model / 'config.json').read_text()); c['hidden_size'] = 128
    (model / 'config.json').write_text(json.dumps(c))
    check(edge0_cmd, model, 'gate_proj.weight', 'has shape [16, 64, 8]', 'hidden 128')

def test_missing_shard(edge0_cmd, model):
    (model / 'model.safetensors.index.json').write_text(json.dumps({'weight_map': {KEY + '.weight': 'model-00002-of-00002.safetensors'}}))
    check(edge0_cmd, model, 'model-00002-of-00002.safetensors is missing')

def test_pool_smaller_than_working_set(edge0_cmd, model):
    check(edge0_cmd, model, "smaller than one token's working set", '4 experts', extra=('--pool-mib', '0.02'))

def test_read_error_mid_generation_raises(model):
    "A shard that shrinks under a running model: the read fails loudly, in the foreground and in the background reader"
    from edge0.streaming import load
    from edge0.store import StoreError
    with load(model, prefill_path='whole_layer', kernels='mlx') as h:
        f = model / 'model.safetensors'
        os.truncate(f, 1024)
        with pytest.raises(StoreError, match='stopped after'):
            B.eval(h.model(B.array([h.tokenizer.encode('hello there')])))

def test_streaming_matches_resident_from_a_script(tiny_qwen):
    import mlx_lm
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler
    from edge0.streaming import load, stats
    def greedy(m, tok):
        ids = B.array(tok.encode('Once upon a time'))
        return [int(t) for (t, _), _ in zip(generate_step(ids, m, sampler=make_sampler(temp=0.0)), range(32))]
    ref, tok = mlx_lm.load(str(tiny_qwen))
    ref.set_dtype(B.compute_dtype())
    want = greedy(ref, tok)
    # what 2 layers hold outside the LRU, reserved from the same budget: staged slots (2K x 2 buffers), hot sets (2K)
    for path, held in (('exact', 0), ('staged', 2 * 16), ('hot', 2 * 8)):
        with load(tiny_qwen, decode_path=path, pool_bundles=8 + held, kernels='mlx') as h:
            assert greedy(h.model, tok) == want, path
            s = stats(h.engine)
        assert s['total']['loads'] > 0 and s['pool']['bundles'] <= 8

@pytest.mark.parametrize('layout', ['mlx', 'torch-cpu'])
def test_every_reader_serves_the_same_tokens(edge0_cmd, tiny_qwen, tiny_torch, layout):
    "pread, direct (past the page cache) and mmap: the same text, from the CLI as a user runs it, under a small pool"
    d = tiny_qwen if layout == 'mlx' else tiny_torch
    out = {}
    for reader in ('pread', 'direct', 'mmap'):
        r = run(edge0_cmd, 'generate', '--model', d, '--prompt', 'def add(a, b):', '--max-tokens', 24,
                '--ignore-chat-template', '--pool-mib', '0.5', '--reader', reader, '--verbose', 'false')
        assert r.returncode == 0 and 'Traceback' not in r.stderr, (reader, r.stderr[-800:])
        out[reader] = r.stdout
    assert out['direct'] == out['pread'] == out['mmap'], out

def test_direct_reads_leave_the_page_cache_alone(tiny_torch, tmp_path):
    """With --reader direct, decoding adds none of the experts' bytes to the page cache; with pread the same run adds
    them (so the measure can tell). Loading reads the files' headers, and the kernel's read-ahead around them"""
    from edge0.store import Residency, drop_cache, index_checkpoint, open_direct, PAGE
    from edge0.streaming import load
    from edge0.decode import generate_ids
    d = tmp_path / 'm'; shutil.copytree(tiny_torch, d)
    experts = sorted(d.glob('model-experts-*.safetensors'))
    fd, direct = open_direct(experts[0]); os.close(fd)
    if not direct: pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT: reads go through the page cache there")
    data = {f: -(-min(t.start for t in index_checkpoint(d).values() if t.path == f) // PAGE) * PAGE for f in experts}
    def cached_pages():  # of the experts' data, past the pages the header shares
        n = 0
        for f, start in data.items():
            fd = os.open(f, os.O_RDONLY); r = Residency(fd, f.stat().st_size)
            cold, pages = r.cold_pages(start, f.stat().st_size - start); r.close(); os.close(fd)
            n += pages - cold
        return n
    got = {}
    for reader in ('direct', 'pread'):
        for f in experts: drop_cache(f)
        if cached_pages(): pytest.skip(f"the file system of {tmp_path} keeps its pages in memory")
        with load(d, reader=reader, pool_bytes=2**20) as h:
            assert h.engine.store.reader.direct == (reader == 'direct')
            before = cached_pages()
            list(generate_ids(h.model, h.tokenizer.encode('hello there'), 16))
            assert sum(s.loads for s in h.engine.stats.values()) > 0
            got[reader] = cached_pages() - before
    assert got['direct'] == 0 and got['pread'] > 0, got

def test_direct_read_error_mid_generation_raises(model):
    "A shard that shrinks under a model reading past the page cache: the read fails loudly, as with pread"
    from edge0.streaming import load
    from edge0.store import StoreError
    with load(model, prefill_path='whole_layer', kernels='mlx', reader='direct') as h:
        os.truncate(model / 'model.safetensors', 1024)
        with pytest.raises(StoreError, match='stopped after'):
            B.eval(h.model(B.array([h.tokenizer.encode('hello there')])))

def test_reader_options_are_checked(edge0_cmd, model):
    from edge0.files import InputError
    from edge0.streaming import StreamOptions
    with pytest.raises(InputError, match="reader 'fast'"): StreamOptions(reader='fast')
    with pytest.raises(InputError, match="threads 0"): StreamOptions(threads=0)
    r = run(edge0_cmd, 'generate', '--model', model, '--prompt', 'hi', '--read-depth', '0')
    assert r.returncode == 2 and 'Traceback' not in r.stderr and '--read-depth' in r.stderr, r.stderr
