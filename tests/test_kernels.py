"""Torch's int4 kernels (`kernels='torch'`, the CPU default) against mlx-lm's resident model: next-token agreement and logits
on every supported family, the committed teacher converted to the torch-cpu layout, and the decode modes' contracts there."""
import json, os, subprocess, sys
import numpy as np
import pytest
from mlx.nn import QuantizedLinear
from edge0.backend import core as B, quant as bq
from edge0.convert import convert
from edge0.files import teacher_path, heldout_excerpt, InputError
from edge0.routing import SUPPORTED
from edge0.streaming import load, load_resident
from edge0.zoo import build_tiny
import edge0.decode as D
from edge0.torchstep import TORCH_FAMILIES

N_TOKENS = 256
AGREEMENT, LOGITS_REL = 0.99, 0.02  # teacher-forced top-1 agreement at least; relative L2 of the logits at most

def tokens(vocab, n=N_TOKENS, seed=0):
    return np.random.default_rng(seed).integers(3, vocab, n)[None].astype(np.int32)

def forced(path, ids, **kw):
    "Logits over `ids` in one teacher-forced pass: mlx-lm's resident model, or edge0's streamed one with `kw`"
    h = load_resident(path) if kw.get('resident') else load(path, **kw)
    with h: return B.to_numpy(h.model(B.array(ids)))[0]

def compare(ref, got):
    agree = float((ref.argmax(-1) == got.argmax(-1)).mean())
    return agree, float(np.linalg.norm(got - ref) / np.linalg.norm(ref))

def stepped(path, ids) -> tuple:
    "The torch step's logits over `ids`: as one prompt (every position) and token by token"
    from edge0.torchstep import TorchStep
    with load(path, kernels='torch', pool_bytes=None) as h:
        st = TorchStep(h)
        prefill = st(ids[0].tolist(), every=True).numpy()
        st.reset()
        return prefill, np.stack([st([t]).numpy() for t in ids[0].tolist()])

def torch_layout(path, dst):
    "The torch-cpu conversion of `path`, or None where torch's packing cannot take the experts (refused with a reason)"
    try: return convert(path, dst, layout='torch-cpu')
    except InputError as e:
        assert 'torch-cpu' in str(e) or 'multiple of 16' in str(e) or 'separate' in str(e), e
        return None

@pytest.mark.parametrize('family', SUPPORTED)
def test_every_family_agrees_with_mlx_lm(family, tmp_path):
    """Torch's kernels compute in bfloat16, as Metal serves. Tiny random models amplify rounding (mlx-lm's own bfloat16 model
    agrees with its float32 one on 70-95% of tokens here), so on them the bar is mlx-lm's own bfloat16 figures or the
    targets, whichever is looser; the trained teachers below meet the targets outright."""
    path = build_tiny(family, tmp_path / family, num_layers=3)
    ids = tokens(500)  # the zoo's vocabulary is 512
    ref = forced(path, ids, resident=True)
    with load_resident(path, dtype=B.bfloat16) as h: bf16 = B.to_numpy(h.model(B.array(ids)).astype(B.float32))[0]
    a_bf, r_bf = compare(ref, bf16)
    floor, ceiling = min(AGREEMENT, a_bf), max(LOGITS_REL, r_bf)
    agree, rel = compare(ref, forced(path, ids, kernels='torch'))  # the non-expert projections by torch, experts by MLX
    assert agree >= floor and rel <= ceiling, (family, agree, rel, 'mlx-lm bf16:', a_bf, r_bf)
    conv = torch_layout(path, tmp_path / f'{family}-torch')
    if conv is not None:  # every projection by torch
        agree, rel = compare(ref, forced(conv, ids, kernels='torch'))
        assert agree >= floor and rel <= ceiling, (family, 'torch-cpu layout', agree, rel, 'mlx-lm bf16:', a_bf, r_bf)
        if family in TORCH_FAMILIES:  # the whole step in torch, as a prompt and token by token
            for how, got in zip(('prefill', 'decode'), stepped(conv, ids)):
                agree, rel = compare(ref, got)
                assert agree >= floor and rel <= ceiling, (family, 'torch step', how, agree, rel, 'mlx-lm bf16:', a_bf, r_bf)

@pytest.mark.parametrize('teacher', ['edge0-tiny', 'edge0-tiny-ds', 'edge0-tiny-q35'])
def test_trained_teachers_meet_the_targets(teacher, tmp_path):
    "On 256 tokens of the held-out excerpt (text, as served: random tokens give flat, near-tied distributions)"
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(teacher_path(teacher)))
    ids = np.array(tok.encode(' '.join(heldout_excerpt(4000).values()))[:N_TOKENS])[None].astype(np.int32)
    ref = forced(teacher_path(teacher), ids, resident=True)
    conv = convert(teacher_path(teacher), tmp_path / 't', layout='torch-cpu')
    agree, rel = compare(ref, forced(conv, ids, kernels='torch'))
    assert agree >= AGREEMENT and rel <= LOGITS_REL, (teacher, agree, rel)
    agree, rel = compare(ref, forced(conv, ids, resident=True))  # resident: every layer kept by the streaming layer
    assert agree >= AGREEMENT and rel <= LOGITS_REL, (teacher, 'resident', agree, rel)
    for how, got in zip(('prefill', 'decode'), stepped(conv, ids)):  # the torch step (every teacher's family)
        agree, rel = compare(ref, got)
        assert agree >= AGREEMENT and rel <= LOGITS_REL, (teacher, 'torch step', how, agree, rel)

def test_torch_is_the_cpu_default_and_close_restores(tiny_torch):
    with load(tiny_torch) as h: assert h.kernels == 'torch' and h.notes == []
    h = load(teacher_path('edge0-tiny'), kernels='torch')
    q = h.model.model.layers[0].self_attn.q_proj
    assert isinstance(q, bq.TorchLinear) and h.kernels == 'torch' and 'convert' in h.notes[0]
    h.close()
    assert isinstance(h.model.model.layers[0].self_attn.q_proj, QuantizedLinear)  # close() puts mlx-lm's modules back
    with pytest.raises(InputError, match="packed for torch"): load(tiny_torch, kernels='mlx')
    with pytest.raises(InputError, match='expected one of mlx, torch'): load(tiny_torch, kernels='cuda')

def test_converted_checkpoint_keeps_its_source_heads_and_adapters(tiny_torch):
    cfg = json.loads((tiny_torch / 'config.json').read_text())['edge0_layout']
    assert cfg['experts'] == 'torch-cpu' and cfg['torch'].startswith('2.') and cfg['source'] == 'edge0-tiny-int4'
    assert (tiny_torch / 'prerouter.safetensors').exists() and (tiny_torch / 'lora-k8.safetensors').exists()

def run(base, mode, k, n=16, trace=None, record=False, pool=40 + 2 * 64):
    with D.load(base, mode, k, trace=trace, record_trace=record, pool_bundles=pool, pool_bytes=None, kernels='torch') as h:
        ids = [t for t, _ in D.generate_ids(h.model, h.tokenizer.encode("Elizabeth said to her sister that"), n,
                                              decoder=h.decoder)]
        return ids, h.decoder

@pytest.mark.parametrize('k', [8, 4])
def test_decode_modes_keep_their_contracts_with_torch_kernels(tiny_torch, k):
    off, doff = run(tiny_torch, 'off', k, record=True)
    assert run(tiny_torch, 'prefetch', k)[0] == off
    assert run(tiny_torch, 'oracle', k, trace=doff.trace)[0] == off
    ids, dec = run(tiny_torch, 'routing', k)
    d = dec.stats
    assert d.dropped == 0 and d.experts_planned == d.experts_computed == d.planned * k and d.syncs == d.steps

# --- resident models of the torch-cpu layout (mlx-lm cannot load its experts; edge0 keeps them all) ---------------

def test_resident_generate_on_the_torch_layout_gives_the_source_text(edge0_cmd, tiny_torch):
    "`edge0 generate --resident` on a torch-cpu checkpoint: torch's kernels, every layer kept, the source's greedy text"
    import subprocess
    def text(model, *extra):
        r = subprocess.run([edge0_cmd, 'generate', '--model', str(model), '--resident', '--prompt', 'The history of the',
                            '--max-tokens', '24', '--ignore-chat-template', '--verbose', 'false', *extra],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and 'Traceback' not in r.stderr, r.stderr
        return r
    got, want = text(tiny_torch, '--stats'), text(teacher_path('edge0-tiny'))
    assert want.stdout.strip() and got.stdout.startswith(want.stdout), (got.stdout, want.stdout)  # then the counters
    assert 'served resident through' in got.stderr and 'expert memory budget: unbounded' in got.stdout

def test_resident_arms_and_the_planner_open_the_torch_layout(tiny_torch):
    "`load_resident` reads nothing after load; the harness's resident and compute arms and the planner's traces run"
    from edge0.conditions import sequence
    from edge0.harness import Arm, run_arm
    from edge0.plan_inputs import _trace
    from edge0.streaming import stats
    with load_resident(tiny_torch) as h:
        s = stats(h.engine)
        assert h.kernels == 'torch' and s['pool']['resident_layers'] == list(h.spec.moe_layers)
        B.eval(h.model(B.array([[5, 6, 7, 8]])))
        assert stats(h.engine)['total']['loads'] == 0
    seq = sequence(tiny_torch, 20)
    for mode, k in (('resident', None), ('compute', 4)):
        r = run_arm(Arm(tiny_torch, mode, k), seq, 16, 3)
        assert len(r['tokens']) == 4 and 'mb_per_step' not in r, r  # reported as resident: no reads
    traces = []
    for d in (tiny_torch, teacher_path('edge0-tiny')):
        traces.append({l: np.array(v) for l, v in _trace(str(d), 8, 32).items()})
    torch, mlx = traces
    same = np.mean([len(set(a) & set(b)) / 8 for l in mlx for a, b in zip(torch[l].tolist(), mlx[l].tolist())])
    assert same >= 0.95, same  # the routing of the checkpoint it came from, but for bfloat16 rounding

# --- torch packs int4 weights differently on different CPUs: every capability this CPU runs, in child processes ----

CAPABILITY_ORDER = ('default', 'avx2', 'avx512')
_CHILD = r'''
import json, sys
import numpy as np
from edge0.backend import core as B, quant as bq
from edge0.convert import convert
from edge0.streaming import load
cmd, *args = sys.argv[1:]
here = bq.torch_packing()
if cmd == 'packing':  # the running torch's packing is the scheme edge0 names, on shapes beyond the probe
    import torch
    rng = np.random.default_rng(5)
    for n, k in ((16, 64), (48, 128), (96, 256), (768, 2048), (2048, 768)):
        q = rng.integers(0, 16, (n, k), dtype=np.int32)
        got = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.from_numpy(q), 2).numpy()
        assert here['scheme'] and np.array_equal(bq.pack_as(here['scheme'], q), got), (here, n, k)
elif cmd == 'convert': convert(args[0], args[1], layout='torch-cpu')
else:  # serve: teacher-forced logits of each checkpoint over the ids, saved beside it, and the notes
    ids, notes = np.load(args[0]), {}
    for conv in args[1:]:
        with load(conv, kernels='torch') as h:
            np.save(f"{conv}.{here['capability']}.npy", B.to_numpy(h.model(B.array(ids)))[0])
            notes[conv] = h.notes
    here['notes'] = notes
print(json.dumps(here))
'''

def in_child(capability, *args):
    "Run `_CHILD` with torch's CPU code chosen by ATEN_CPU_CAPABILITY; its JSON line"
    r = subprocess.run([sys.executable, '-c', _CHILD, *map(str, args)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, 'ATEN_CPU_CAPABILITY': capability})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])

@pytest.fixture(scope='module')
def capabilities():
    "'default', then each vector level up to the one torch picks on this CPU (what a child can run here)"
    top = subprocess.run([sys.executable, '-c', 'import torch; print(torch.backends.cpu.get_cpu_capability().lower())'],
                         capture_output=True, text=True, timeout=120).stdout.strip()
    return list(CAPABILITY_ORDER[:CAPABILITY_ORDER.index(top) + 1]) if top in CAPABILITY_ORDER else ['default', top]

def test_every_capability_packs_as_a_known_scheme(capabilities):
    schemes = {c: in_child(c, 'packing')['scheme'] for c in capabilities}
    assert all(schemes.values()) and len(set(schemes.values())) == len(schemes), schemes

@pytest.mark.parametrize('name', ['edge0-tiny', 'edge0-tiny-ds'])
def test_a_checkpoint_packed_under_one_capability_serves_the_same_logits_under_another(name, capabilities, tmp_path):
    """Each capability's conversion of a bundled teacher, served under every capability: within the parity bounds of
    mlx-lm's model under its own, and under any other exactly the logits of that one's own conversion (re-packed)"""
    from transformers import AutoTokenizer
    teacher = teacher_path(name)
    tok = AutoTokenizer.from_pretrained(str(teacher))
    ids = np.array(tok.encode(' '.join(heldout_excerpt(2000).values()))[:128])[None].astype(np.int32)
    np.save(tmp_path / 'ids.npy', ids)
    ref = forced(teacher, ids, resident=True)
    convs = {c: tmp_path / f'packed-{c}' for c in capabilities}
    for c, d in convs.items(): in_child(c, 'convert', teacher, d)
    packings = {c: json.loads((d / 'config.json').read_text())['edge0_layout']['packing'] for c, d in convs.items()}
    for serve in capabilities:
        out = in_child(serve, 'serve', tmp_path / 'ids.npy', *convs.values())
        for c, d in convs.items():
            logits = np.load(f"{d}.{out['capability']}.npy")
            notes = ' '.join(out['notes'][str(d)])
            if c == serve:
                assert packings[c]['probe'] == out['probe'] and 're-packed' not in notes, (c, notes)
                agree, rel = compare(ref, logits)
                assert agree >= AGREEMENT and rel <= LOGITS_REL, (c, agree, rel)
            else:
                assert ('re-packed exactly' in notes) == (packings[c]['probe'] != out['probe']), (c, serve, notes)
                assert np.array_equal(logits, np.load(f"{convs[serve]}.{out['capability']}.npy")), (c, serve)

def test_generate_on_a_checkpoint_packed_elsewhere(edge0_cmd, capabilities, tmp_path):
    """The user's case: converted on one machine (here: torch's plain code), served on another (this CPU's vector code):
    the same text as a conversion made here, with a note; an unknown packing is refused in one line, exit 2"""
    if len(capabilities) < 2: pytest.skip(f"this CPU runs only torch's {capabilities[0]} code: no second packing")
    teacher, here = teacher_path('edge0-tiny'), capabilities[-1]
    def edge0(*args, capability=here):
        return subprocess.run([edge0_cmd, *map(str, args)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, 'ATEN_CPU_CAPABILITY': capability})
    for c in ('default', here):
        assert edge0('convert', teacher, tmp_path / c, '--layout', 'torch-cpu', capability=c).returncode == 0
    gen = ('generate', '-p', 'Once upon a time', '--max-tokens', '24', '--temp', '0', '--ignore-chat-template',
           '--verbose', 'false')
    want, got = edge0(*gen, '-m', tmp_path / here), edge0(*gen, '-m', tmp_path / 'default')
    assert want.returncode == got.returncode == 0 and 'Traceback' not in got.stderr, got.stderr
    assert got.stdout == want.stdout and want.stdout.strip(), (got.stdout, want.stdout)
    assert 're-packed exactly' in got.stderr and 're-packed' not in want.stderr, got.stderr
    assert edge0('convert', tmp_path / 'default', tmp_path / 'again', '--layout', 'torch-cpu').returncode == 0
    again = edge0(*gen, '-m', tmp_path / 'again')  # re-packed once for this machine: no note, the same text
    assert again.stdout == want.stdout and 're-packed' not in again.stderr, again.stderr
    cfg = json.loads((tmp_path / 'default' / 'config.json').read_text())
    cfg['edge0_layout']['packing'].update(probe='0123456789abcdef', scheme=None)  # a packing edge0 does not know
    (tmp_path / 'default' / 'config.json').write_text(json.dumps(cfg))
    r = edge0(*gen, '-m', tmp_path / 'default')
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert 'cannot re-pack' in lines[0] and 'edge0 convert' in lines[0], lines
