"""The prerouter's advantage, measured: decode modes off / routing / prefetch / oracle at K=8 and K=4, against the roofline bound.

    python bench/prerouter_ab.py                     # both checkpoints, 3 rounds, 32 decode steps per arm
    python bench/prerouter_ab.py --models tiny --rounds 5

Checkpoints: `edge0-tiny` (the committed int4 teacher with its committed phase-1 heads) and the synthetic 2.3 GB Qwen3-MoE-shaped
checkpoint of the streaming benchmark (random weights; its heads are warm-started and distilled here for a few seconds on its own
forward passes, cached beside it). Neither fits in what the run may keep of it:
  - synthetic: every arm runs in a child memory cgroup capped at half the checkpoint (no swap);
  - edge0-tiny (6.7 MB, dwarfed by the ~400 MB runtime a cap must leave room for): every arm evicts the checkpoint from the page
    cache at every step, so no step finds an expert there — what a checkpoint far larger than memory does.
Every arm is its own process, decodes the same token sequence (teacher-forced from the held-out excerpt), starts with the
checkpoint evicted from the page cache and an expert pool of the same size; arm order rotates every round; medians over rounds.
Per arm: decode tok/s, step ms, blocked ms/step, MB and loads per step, cold fraction, host syncs per step. Per K: the compute-only
step (all experts resident, mlx-lm's model with edge0's block at that K, no cap: it cannot fit under one), the cold read bandwidth
measured through the store, the roofline bound max(compute-only step, MB per step / bandwidth), and the targets:
routing within 1.15x of its bound; routing >= 1.3x faster than off where off's step / the bound allows >= 1.5x.
"""
import argparse, json, os, resource, shutil, statistics, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from streaming_memory import MemoryCap  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODES = ('off', 'routing', 'prefetch', 'oracle')

def shards(model): return sorted(Path(model).glob('model*.safetensors'))

def evict(model):
    from edge0.store import drop_cache
    for f in shards(model): drop_cache(f)

def sequence(model, n):
    "Token ids of the held-out excerpt, as this model's tokenizer encodes it"
    from transformers import AutoTokenizer
    from edge0.files import heldout_excerpt
    tok = AutoTokenizer.from_pretrained(str(model))
    return tok.encode(' '.join(heldout_excerpt(4000).values()))[:n]

def arm(a):
    "One arm, in this process: load, prefill, decode a.tokens steps on the forced sequence; print one JSON line"
    from edge0.backend import core as B
    from edge0.decode import load, generate_ids, decode_stats, Decoder, DecodeStats
    from edge0.streaming import reset_stats
    seq = json.loads(Path(a.seq).read_text())
    prompt, force = seq[:a.prompt], seq[a.prompt:]
    if a.arm == 'compute':  # every expert resident: mlx-lm's model, edge0's block at K
        import mlx_lm
        from edge0.routing import spec_for
        model, _ = mlx_lm.load(a.model)
        model.set_dtype(B.compute_dtype())
        dec = Decoder(model, spec_for(json.loads((Path(a.model) / 'config.json').read_text())), mode='off', k=a.k)
    else:
        # what `routing` and `oracle` hold outside the pool's LRU (resident layers, planned slots) comes out of the same
        # budget: it is added, so every arm's LRU is a.pool_mb, unless --total-budget makes a.pool_mb every arm's whole budget
        budget = int(a.pool_mb * 2**20) + (0 if a.total_budget else held_bytes(a.model, a.arm, a.k))
        handle = load(a.model, a.arm, a.k, trace=a.trace if a.arm == 'oracle' else None, record_trace=bool(a.record),
                      pool_bytes=budget, prefill_path='exact', kernels=a.kernels)
        model, dec = handle.model, handle.decoder
    evicting = []  # seconds spent evicting the checkpoint, taken out of the step times
    if a.cold_steps and a.arm != 'compute':
        flush = dec.flush
        def cold_flush(*xs):
            t0 = time.perf_counter(); evict(a.model); evicting.append(time.perf_counter() - t0); flush(*xs)
        dec.flush = cold_flush
    gen = generate_ids(model, prompt, a.tokens + 1, decoder=dec, force=force)
    toks = [next(gen)[0]]  # prefill
    if a.arm != 'compute': reset_stats(handle.engine)
    dec.stats = DecodeStats()
    times, evicting[:] = [], []
    for t, dt in gen: toks.append(t); times.append(dt - (evicting.pop() if evicting else 0.0))
    n = len(times)
    out = dict(arm=a.arm, k=a.k, steps=n, step_ms=1e3 * statistics.median(times), decode_tps=n / sum(times),
               rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, tokens=toks)
    if a.arm != 'compute':
        s = decode_stats(handle)
        t, d = s['total'], s['decoder']
        out.update(mb_per_step=t['bytes_read'] / n / 2**20, loads_per_step=t['loads'] / n, blocked_ms_per_step=t['blocked_ms'] / n,
                   cold_fraction=t['cold_fraction'], hits_per_step=t['hits'] / n, syncs_per_step=d['syncs'] / n,
                   flush_ms_per_step=1e3 * d['flush_s'] / n, dropped=d['dropped'], planned=d['planned'],
                   experts_planned=d['experts_planned'], experts_computed=d['experts_computed'],
                   prefetch_used=d['prefetch_used'], prefetch_wasted=d['prefetch_wasted'])
    if a.record:
        from edge0.decode import save_trace
        save_trace(dec.trace, a.record, dec.spec, dec.k)
    print('RESULT ' + json.dumps(out), flush=True)

def held_bytes(model, mode, k):
    "Bytes `mode` holds outside the pool's LRU: the layers no head predicts, kept resident, and K slots a planned layer"
    from edge0.prerouter import prerouter_file
    from edge0.store import read_header, ExpertStore
    from edge0.streaming import model_spec
    if mode not in ('routing', 'oracle'): return 0
    spec = model_spec(model)
    moe = list(spec.moe_layers)
    if mode == 'oracle': predicted = set(moe)  # every layer replays the trace from K slots
    else:
        owners = json.loads(read_header(Path(model) / prerouter_file(spec, k))[1]['owners'])
        predicted = {moe[moe.index(n) + 1] for n in owners}
    store = ExpertStore(model, spec, residency=False)
    try: return (sum(t.nbytes for layer in moe if layer not in predicted for t in store.layers[layer].values())
                 + len(predicted) * k * store.expert_nbytes)
    finally: store.close()

def run_arm(name, k, a, key, seq, trace=None, record=None, cap=None, cold_steps=False):
    model = str(key).split('@')[0]
    cmd = [sys.executable, __file__, '--arm', name, '--k', str(k), '--model', model, '--seq', str(seq), '--tokens', str(a.tokens),
           '--prompt', str(a.prompt), '--pool-mb', str(a.pool_mb_for[str(key)])]
    if trace: cmd += ['--trace', str(trace)]
    if record: cmd += ['--record', str(record)]
    if cold_steps: cmd += ['--cold-steps']
    evict(model)
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=cap.preexec if cap else None, timeout=3600)
    for line in r.stdout.splitlines():
        if line.startswith('RESULT '): return json.loads(line[7:])
    return dict(arm=name, k=k, failed=True, returncode=r.returncode, killed=r.returncode in (-9, 137), stderr=r.stderr[-600:])

def read_bandwidth(model, k, batches=64, seed=0):
    "Cold read bandwidth through the store, K random experts of a random layer at a time (as a layer's misses are read)"
    import numpy as np
    from edge0.store import ExpertStore
    st, rng = ExpertStore(model), np.random.default_rng(seed)
    evict(model)
    t0, nbytes = time.perf_counter(), 0
    for _ in range(batches):
        l = int(rng.choice(st.spec.moe_layers))
        for _, ls in st.read_experts(l, rng.choice(st.spec.num_experts, k, replace=False).tolist()): nbytes += ls.nbytes
    dt = time.perf_counter() - t0
    st.close()
    return nbytes / dt / 2**20

OPENBLAS = [p for p in ('/usr/lib/x86_64-linux-gnu/libopenblas.so.0', '/usr/lib/aarch64-linux-gnu/libopenblas.so.0') if Path(p).exists()]

def synthetic_heads(model, ks):
    "Heads for the synthetic checkpoint (made once, in a child process: with OpenBLAS preloaded where Debian's is installed)"
    from edge0.routing import spec_for
    from edge0.prerouter import prerouter_file
    spec = spec_for(json.loads((model / 'config.json').read_text()))
    for k in ks:
        if (model / prerouter_file(spec, k)).exists(): continue
        print(f'  distilling heads for {model.name} at K={k} ...', flush=True)
        env = dict(os.environ, **({'LD_PRELOAD': OPENBLAS[0]} if OPENBLAS else {}))
        t0 = time.time()
        subprocess.run([sys.executable, __file__, '--make-heads', str(model), '--k', str(k)], env=env, check=True, timeout=7200)
        print(f'  done in {time.time() - t0:.0f} s', flush=True)

def make_heads(model, k):
    "Warm-started heads for the synthetic checkpoint, distilled briefly on its own forward passes over the excerpt"
    import numpy as np, mlx_lm
    from edge0.backend import core as B
    from edge0.routing import spec_for
    from edge0.prerouter import init_prerouter, capture, phase1, save_prerouter
    model = Path(model)
    spec = spec_for(json.loads((model / 'config.json').read_text()))
    m, _ = mlx_lm.load(str(model)); m.set_dtype(B.compute_dtype())
    ids = np.array(sequence(model, 512))
    t0 = time.time(); cap = capture(spec, m, ids, k, seq=256); print(f'  captured {len(ids)} tokens in {time.time() - t0:.0f} s', flush=True)
    best = (float('inf'), None, None)
    for lr in (1e-4, 1e-5):  # random weights give large hidden states: the teacher's learning rate diverges here
        pr = init_prerouter(spec, m, owners=spec.moe_layers[:-1], k=k)
        log = phase1(pr, cap, steps=60, batch=128, lr=lr, show=False)
        print(f'  phase 1 at lr {lr:g}: KL {log[0]:.3f} -> {log[-1]:.3f}', flush=True)
        if log[-1] < min(best[0], log[0]): best = (log[-1], pr, lr)
    pr = best[1] or init_prerouter(spec, m, owners=spec.moe_layers[:-1], k=k)
    save_prerouter(pr, model, extra=dict(builder='bench/prerouter_ab.py', train_tokens=len(ids), steps=60 if best[1] else 0, lr=best[2]))

def med(rs, key):
    v = [r[key] for r in rs if not r.get('failed') and key in r]
    return statistics.median(v) if v else float('nan')

def bench(a, name, key, capped):
    model = Path(str(key).split('@')[0])
    print(f"\n=== {name}: {model}", flush=True)
    size = sum(f.stat().st_size for f in shards(model))
    tag = name.replace(' ', '').replace(',', '-')
    seq = Path(a.out) / f'{tag}-sequence.json'
    seq.write_text(json.dumps(sequence(model, a.prompt + a.tokens + 1)))
    cap = None
    if capped:
        cap = MemoryCap(size / 2)
        if cap.path is None: print('  no memory cgroup could be made here: capped runs fall back to per-step eviction'); capped = False
    how = (f"child memory cgroup capped at {size / 2 / 2**20:.0f} MiB (half of the {size / 2**20:.0f} MiB checkpoint)" if capped
           else f"checkpoint ({size / 2**20:.1f} MiB) evicted from the page cache at every step")
    print(f"  checkpoint {size / 2**20:.1f} MiB; {how}; pool {a.pool_mb_for[str(key)]:.1f} MiB; {a.tokens} decode steps, forced tokens", flush=True)
    res, traces = {}, {}
    for k in a.ks:
        traces[k] = Path(a.out) / f'{tag}-k{k}-trace.json'
        r = run_arm('off', k, a, key, seq, record=traces[k], cap=cap, cold_steps=not capped)
        if r.get('failed'): raise SystemExit(f"recording the off trace at K={k} failed: {r}")
    bw = {k: read_bandwidth(model, k) for k in a.ks}
    arms = [(m, k) for k in a.ks for m in MODES + ('compute',)]
    for rnd in range(a.rounds):
        order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]
        for m, k in order:
            r = run_arm(m, k, a, key, seq, trace=traces[k] if m == 'oracle' else None,
                        cap=cap if m != 'compute' else None, cold_steps=not capped and m != 'compute')
            res.setdefault((m, k), []).append(r)
        print(f"  round {rnd + 1}: " + ', '.join(f"{m}/K{k} {res[m, k][-1].get('decode_tps', float('nan')):.1f}" for m, k in order), flush=True)
    if cap: cap.close()
    rows = {}
    for k in a.ks:
        comp = med(res['compute', k], 'step_ms')
        print(f"\n  K={k}: compute-only step (all experts resident) {comp:.1f} ms; cold read bandwidth {bw[k]:.0f} MiB/s")
        print(f"  {'mode':9}{'tok/s':>7}{'step ms':>8}{'blocked':>8}{'MB/step':>8}{'loads':>7}{'cold':>6}{'syncs':>6}{'bound ms':>9}{'x bound':>8}{'vs off':>7}  notes")
        off_ms = med(res['off', k], 'step_ms')
        for m in MODES:
            rs = res[m, k]
            fails = [r for r in rs if r.get('failed')]
            mb, step = med(rs, 'mb_per_step'), med(rs, 'step_ms')
            bound = max(comp, 1e3 * mb / bw[k])
            note = []
            if fails: note.append(f"{len(fails)} failed: exit {fails[0]['returncode']}{' (OOM-killed)' if fails[0]['killed'] else ''}")
            if m == 'routing': note.append(f"dropped {sum(r.get('dropped', 0) for r in rs)}, computed {sum(r.get('experts_computed', 0) for r in rs)}/{sum(r.get('experts_planned', 0) for r in rs)} planned")
            if m == 'prefetch': note.append(f"prediction used {med(rs, 'prefetch_used'):.0f}, wasted {med(rs, 'prefetch_wasted'):.0f} bundles")
            ok = [r for r in rs if not r.get('failed')]
            if m in ('prefetch', 'oracle') and ok: note.append('tokens == off: ' + str(all(r['tokens'] == res['off', k][0]['tokens'] for r in ok)))
            rows[m, k] = dict(tps=med(rs, 'decode_tps'), step_ms=step, blocked_ms=med(rs, 'blocked_ms_per_step'), mb=mb,
                              loads=med(rs, 'loads_per_step'), cold=med(rs, 'cold_fraction'), syncs=med(rs, 'syncs_per_step'),
                              bound_ms=bound, rss_mb=med(rs, 'rss_mb'), failed=len(fails), notes='; '.join(note))
            print(f"  {m:9}{rows[m, k]['tps']:>7.2f}{step:>8.1f}{rows[m, k]['blocked_ms']:>8.1f}{mb:>8.2f}{rows[m, k]['loads']:>7.1f}"
                  f"{rows[m, k]['cold']:>6.2f}{rows[m, k]['syncs']:>6.1f}{bound:>9.1f}{step / bound:>8.2f}{off_ms / step:>7.2f}  {'; '.join(note)}")
        rb = rows['routing', k]['bound_ms']
        allow, got = off_ms / rb, off_ms / rows['routing', k]['step_ms']
        rows['compute', k] = dict(step_ms=comp, read_mib_s=bw[k], allowed_speedup=allow, routing_speedup=got)
        within = rows['routing', k]['step_ms'] / rb
        print(f"  bound allows {allow:.2f}x over off (off {off_ms:.1f} ms / routing's bound {rb:.1f} ms); routing gets {got:.2f}x")
        print(f"  target: routing within 1.15x of its bound: {within:.2f}x -> {'MET' if within <= 1.15 else 'NOT MET'}")
        print("  target: routing >= 1.3x faster than off where the bound allows >= 1.5x: "
              + (f"{got:.2f}x -> {'MET' if got >= 1.3 else 'NOT MET'}" if allow >= 1.5 else f"bound allows {allow:.2f}x < 1.5x -> not applicable"))
    return {f"{m}/K{k}": v for (m, k), v in rows.items()}

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--models', default='tiny,synthetic')
    ap.add_argument('--synthetic', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-2g'))
    ap.add_argument('--synthetic-pools', default='256,32', help='expert pool sizes (MiB) to run the synthetic checkpoint with')
    ap.add_argument('--ks', default='8,4')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--tokens', type=int, default=32)
    ap.add_argument('--prompt', type=int, default=16)
    ap.add_argument('--out', default=str(ROOT / 'build' / 'bench' / 'prerouter'))
    ap.add_argument('--json', default=str(ROOT / 'bench' / 'results' / 'prerouter_ab.json'))
    # one arm (internal)
    ap.add_argument('--arm'); ap.add_argument('--k', type=int); ap.add_argument('--model'); ap.add_argument('--seq')
    ap.add_argument('--make-heads')
    ap.add_argument('--kernels', choices=('mlx', 'torch'), help="what computes the quantized products (default: edge0's)")
    ap.add_argument('--trace'); ap.add_argument('--record'); ap.add_argument('--pool-mb', type=float); ap.add_argument('--cold-steps', action='store_true')
    ap.add_argument('--total-budget', action='store_true', help="--pool-mb bounds the arm's resident layers and slots too")
    a = ap.parse_args()
    if a.arm: return arm(a)
    if a.make_heads: return make_heads(a.make_heads, a.k)
    a.ks = [int(k) for k in a.ks.split(',')]
    Path(a.out).mkdir(parents=True, exist_ok=True)
    from edge0.files import teacher_path
    models, a.pool_mb_for = [], {}
    for name in a.models.split(','):
        if name == 'tiny':
            m = Path(a.out) / 'edge0-tiny-int4'
            if m.exists(): shutil.rmtree(m)
            shutil.copytree(teacher_path('edge0-tiny'), m)  # with its committed heads
            from edge0.store import ExpertStore
            st = ExpertStore(m); a.pool_mb_for[str(m)] = 48 * st.expert_nbytes / 2**20; st.close()  # 48 bundles: 1/8 of the experts
            models.append(('edge0-tiny', str(m), False))
        elif name == 'synthetic':
            m = Path(a.synthetic)
            if not (m / 'config.json').exists():
                from edge0.zoo import build_synthetic
                print(f'building {m} ...', flush=True); build_synthetic(m)
            synthetic_heads(m, a.ks)
            for mb in (float(x) for x in a.synthetic_pools.split(',')):
                a.pool_mb_for[f"{m}@{mb:g}"] = mb
                models.append((f"synthetic, pool {mb:g} MiB", f"{m}@{mb:g}", True))
        else: raise SystemExit(f"--models: unknown checkpoint {name!r}; expected tiny and/or synthetic")
    out = {name: bench(a, name, m, capped) for name, m, capped in models}
    Path(a.json).write_text(json.dumps(dict(date=time.strftime('%Y-%m-%d %H:%M'), rounds=a.rounds, tokens=a.tokens, results=out), indent=1))
    print(f"\nwrote {a.json}")

if __name__ == '__main__': main()
