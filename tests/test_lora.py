"The recovery LoRA as a user meets it: `edge0 generate --adapter`, automatic pick-up beside the base, and every refusal."
import gzip, shutil, subprocess
import pytest
from edge0.backend import core as B
from edge0.files import DATA, teacher_path
from edge0.lora import attach, save_adapter
from edge0.prerouter import prerouter_file
from edge0.store import model_spec
from edge0.teachers import CORPUS

def run(cmd, *args):
    return subprocess.run([cmd, *map(str, args)], capture_output=True, text=True, timeout=300)

def gen(edge0_cmd, model, *extra):
    return run(edge0_cmd, 'generate', '--model', model, '--prompt', 'The history of the city', '--max-tokens', 12,
               '--mode', 'routing', '--k', 4, *extra)

@pytest.fixture(scope='module')
def base(tmp_path_factory):
    "A copy of the committed edge0-tiny int4 base and heads, with no adapter beside it"
    dst = tmp_path_factory.mktemp('lora') / 'edge0-tiny-int4'
    shutil.copytree(teacher_path('edge0-tiny'), dst, ignore=shutil.ignore_patterns('lora*'))
    return dst

def write_adapter(base, k, path=None, trained=True, heads_k=None):
    import mlx_lm
    model, _ = mlx_lm.load(str(base))
    spec = model_spec(base)
    adapter = attach(model, spec, rank=4, alpha=8)
    if trained:
        for m in adapter.modules.values(): m.lora_b = B.normal(m.lora_b.shape, scale=0.5)
    return save_adapter(adapter, base, k, base / prerouter_file(spec, heads_k or k), path=path)

def text(r):
    "The generated text: the output before the figures"
    return r.stdout.split('\nadapter:')[0].split('\nstreamed:')[0]

def test_adapter_pick_up_override_and_refusals(edge0_cmd, base, tmp_path):
    "An untrained adapter beside the base is picked up and changes nothing; --adapter overrides it; a bad one is refused"
    plain = gen(edge0_cmd, base, '--no-adapter')
    assert plain.returncode == 0, plain.stderr
    assert 'adapter:' not in plain.stdout
    beside = write_adapter(base, 4, trained=False)
    try:
        picked = gen(edge0_cmd, base)
        assert picked.returncode == 0, picked.stderr
        assert 'adapter: phase2 recovery LoRA, rank 4 on 24 projections, K=4' in picked.stdout
        assert text(picked) == text(plain)
        adapted = gen(edge0_cmd, base, '--adapter', write_adapter(base, 4, path=tmp_path / 'mine.safetensors'))
        assert adapted.returncode == 0, adapted.stderr
        assert text(adapted) != text(plain)
    finally: beside.unlink()
    (tmp_path / 'junk.safetensors').write_bytes(b'\x02\x00\x00\x00\x00\x00\x00\x00{}')
    for args, message in ((('--adapter', tmp_path / 'mine.safetensors', '--no-adapter'), 'exclude each other'),
                          (('--adapter', write_adapter(base, 8, path=tmp_path / 'k8.safetensors')),
                           'trained for K=8, this run serves K=4'),
                          (('--adapter', tmp_path / 'junk.safetensors'), "format None, expected 'edge0-lora/1'")):
        r = gen(edge0_cmd, base, *args)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and 'Traceback' not in r.stderr

def test_load_adapter_refuses_other_heads_and_bases(base, tmp_path):
    "The refusals the CLI prints, raised by the library (the notebook 03_lora shows each)"
    import mlx_lm
    from edge0.files import InputError
    from edge0.lora import load_adapter
    model, _ = mlx_lm.load(str(base))
    spec = model_spec(base)
    other_heads = write_adapter(base, 4, path=tmp_path / 'heads.safetensors', heads_k=8)
    with pytest.raises(InputError, match='other prerouter heads'):
        load_adapter(model, base, spec, 4, base / prerouter_file(spec, 4), other_heads)
    other = tmp_path / 'ds'
    shutil.copytree(teacher_path('edge0-tiny-ds'), other, ignore=shutil.ignore_patterns('lora*'))
    with pytest.raises(InputError, match='made for another base'):
        load_adapter(model, base, spec, 4, path=write_adapter(other, 4, path=tmp_path / 'ds.safetensors'))
    with pytest.raises(InputError, match='does not exist'): load_adapter(model, base, spec, 4, path=tmp_path / 'none')

def test_phase3_needs_phase2(edge0_cmd, tmp_path):
    corpus = tmp_path / 'corpus'
    corpus.mkdir()
    for name, part in zip(CORPUS, sorted(DATA.glob('heldout-*.txt'))):
        with gzip.open(corpus / name, 'wt', encoding='utf-8') as f: f.write(part.read_text(encoding='utf-8'))
    work = tmp_path / 'work'
    shutil.copytree(teacher_path('edge0-tiny'), work / 'tokenizer', ignore=shutil.ignore_patterns('*.safetensors', 'config.json'))
    r = run(edge0_cmd, 'train', 'edge0-tiny', '--phase', 3, '--k', 4, '--corpus', corpus, '--work', work,
            '--dst', tmp_path / 'out')
    assert r.returncode == 2 and 'run --phase sft at K=4 first' in r.stderr, r.stderr
    r = run(edge0_cmd, 'train', 'edge0-tiny', '--phase', 4)
    assert r.returncode == 2 and 'expected one of teacher, heads, sft, distil' in r.stderr
