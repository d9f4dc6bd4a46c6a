"The decode modes on the committed teacher and its committed heads: what each mode promises, checked from outside the counters."
import json, os, subprocess
import numpy as np
import pytest
from edge0.backend import core as B
from edge0.files import teacher_path, InputError
import edge0.decode as D

PROMPT = "Elizabeth said to her sister that"

def held(mode, k):
    "Bundles `mode` holds outside the pool's LRU on edge0-tiny (same budget): 2 resident layers, K slots a planned layer"
    return {'routing': 2 * 64 + 4 * k, 'oracle': 6 * k}.get(mode, 0)

def run(mode, k, n=20, trace=None, record=False, pool=40):
    pool += held(mode, k)
    with D.load(teacher_path('edge0-tiny'), mode, k, trace=trace, record_trace=record, pool_bundles=pool, pool_bytes=None) as h:
        ids = [t for t, _ in D.generate_ids(h.model, h.tokenizer.encode(PROMPT), n, decoder=h.decoder)]
        return ids, h.decoder

@pytest.mark.parametrize('k', [8, 4])
def test_prefetch_and_oracle_reproduce_off(k):
    off, doff = run('off', k, record=True)
    assert D.trace_len(doff.trace) == len(off) - 1 and len(doff.trace) == 6  # {layer: (steps, K) ids}
    pre, dpre = run('prefetch', k)
    assert pre == off
    assert dpre.stats.background_loads > 0 and dpre.stats.prefetch_used > 0  # the prediction did read ahead, and some of it was used
    orc, dorc = run('oracle', k, trace=doff.trace)
    assert orc == off
    assert dorc.stats.planned == dorc.stats.steps * 6 and dorc.stats.syncs == dorc.stats.steps  # every layer replayed, one sync a step
    # a tampered trace changes the output: the replay is really what is computed
    bad = {l: (ids + 1) % 64 for l, ids in doff.trace.items()}
    assert run('oracle', k, trace=bad)[0] != off

@pytest.mark.parametrize('k', [8, 4])
def test_routing_computes_exactly_the_predicted_set(k, monkeypatch):
    seen, plans = [], []
    orig_planned, orig_flush = D.Decoder._planned, D.Decoder.flush
    def planned(self, ex, layer, blk, x, ids, inds):
        y = orig_planned(self, ex, layer, blk, x, ids, inds)
        slots = self.engine.planned[layer]  # prerouted slots: one stack per layer
        snapshot = {p: B.to_numpy(a) for p, a in slots.stacks[0].items()}  # the stack is rewritten later
        seen.append((self.step, layer, ids.copy(), slots.table[ids].copy(), snapshot))
        return y
    def flush(self, *xs, **kw):
        orig_flush(self, *xs, **kw); plans.append((self.step, {l: v.copy() for l, v in self.plan.items()}))
    monkeypatch.setattr(D.Decoder, '_planned', planned); monkeypatch.setattr(D.Decoder, 'flush', flush)
    ids, dec = run('routing', k)
    d = dec.stats
    assert d.dropped == 0 and d.steps == len(ids) - 1
    assert d.planned == d.steps * len(dec.planned) and d.experts_planned == d.experts_computed == d.planned * k
    assert d.syncs == d.steps  # one flush a step, no per-layer host sync
    plan_at = dict(plans)
    from edge0.store import ExpertStore
    store = ExpertStore(teacher_path('edge0-tiny'))  # the run's own store closed with its handle
    for step, layer, want, slots, stack in seen:
        assert (want == plan_at[step][layer]).all()  # the layer computed the set the flush planned
        assert len(set(want.tolist())) == k
        for e, s in zip(want.tolist(), slots.tolist()):  # and the slots it read hold exactly those experts' weights
            ref, _ = store.read_expert(layer, e)
            for p, a in ref.items(): assert (stack[p][s] == B.to_numpy(a)).all(), (step, layer, e, p)
    assert len(seen) == d.planned

def test_mode_errors_name_the_fault(tmp_path):
    import shutil
    bare = shutil.copytree(teacher_path('edge0-tiny'), tmp_path / 'bare', ignore=shutil.ignore_patterns('prerouter*'))
    with pytest.raises(FileNotFoundError, match='no prerouter heads for K=4 of .*bare: looked for .*bare/prerouter-k4.safetensors, .*edge0 train'):
        D.load(bare, 'routing', 4)
    with pytest.raises(InputError, match="'fast' is not one of"): D.load(bare, 'fast')
    heads8 = teacher_path('edge0-tiny') / 'prerouter.safetensors'
    with pytest.raises(InputError, match='trained for K=8'): D.load(teacher_path('edge0-tiny'), 'routing', 4, prerouter_path=heads8)

def test_cli_prerouter(edge0_cmd, tmp_path):
    m, t = teacher_path('edge0-tiny'), tmp_path / 'trace.json'
    base = [edge0_cmd, 'generate', '--model', str(m), '--prompt', 'The history of the city', '--max-tokens', '12']
    r = subprocess.run(base + ['--mode', 'off', '--k', '4', '--record-trace', str(t)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(t.read_text())['k'] == 4
    o = subprocess.run(base + ['--mode', 'oracle', '--k', '4', '--trace', str(t), '--stats'], capture_output=True, text=True, timeout=300)
    assert o.returncode == 0, o.stderr
    assert o.stdout.splitlines()[0] == r.stdout.splitlines()[0] and 'mode oracle K=4' in o.stdout
    for mode in ('routing', 'prefetch'):
        g = subprocess.run(base + ['--mode', mode, '--k', '4', '--stats'], capture_output=True, text=True, timeout=300)
        assert g.returncode == 0 and ' 0 dropped' in g.stdout, g.stderr
        assert g.stderr.count('note: prerouter heads: ') == 1 and f"{m / 'prerouter-k4.safetensors'}\n" in g.stderr, g.stderr
    e = subprocess.run(base + ['--mode', 'oracle', '--trace', str(t)], capture_output=True, text=True, timeout=300)
    assert e.returncode == 2 and 'recorded at K=4' in e.stderr and 'K=8' in e.stderr
    e = subprocess.run(base + ['--mode', 'routing', '--k', '3'], capture_output=True, text=True, timeout=300)
    assert e.returncode == 2 and 'no prerouter heads for K=3' in e.stderr and '--phase heads --k 3' in e.stderr

def test_cli_finds_heads_in_the_home(edge0_cmd, tmp_path):
    "Heads under EDGE0_HOME (where a read-only model's go) serve `edge0 generate`, which says which file it used"
    import shutil
    from edge0.prerouter import fingerprint
    m = shutil.copytree(teacher_path('edge0-tiny'), tmp_path / 'm', ignore=shutil.ignore_patterns('prerouter*'))
    heads = tmp_path / 'home' / 'heads' / fingerprint(m) / 'prerouter-k4.safetensors'
    heads.parent.mkdir(parents=True)
    shutil.copy(teacher_path('edge0-tiny') / 'prerouter-k4.safetensors', heads)
    r = subprocess.run([edge0_cmd, 'generate', '--model', str(m), '--prompt', 'The city', '--max-tokens', '4',
                        '--mode', 'routing', '--k', '4'], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, EDGE0_HOME=str(tmp_path / 'home')))
    assert r.returncode == 0 and f"note: prerouter heads: {heads}\n" in r.stderr, r.stderr
