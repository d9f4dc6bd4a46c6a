"""Pre-attention probes (the Budgeting Bytes retrofit) against temporal locality and the prerouter's heads, held out.

    python bench/probes.py                          # edge0-tiny at K=8 and K=4, edge0-tiny-ds at K=4
    python bench/probes.py --tokens 16384 --steps 500

A probe per MoE layer l reads l's pre-attention hidden state (the output of its input_layernorm) and predicts l's own
router logits; they are routed through l's own routing function (edge0.probes). The probes are trained by phase 1's KL
to l's router distribution on windows of the corpus's training split (edge0.teachers.prepare,
edge0.calib.sample_windows). K does not enter that loss, so each base gets one set of probes, scored at every K.
Scored on the held-out excerpt (edge0/data): top-K recall of layer l's own top-K at a token by the probe, by its
untrained warm start (l's router applied to the pre-attention state), by temporal locality (l's experts at the
previous token) and, where a committed phase-1 head predicts l (from layer l-1, one token ahead), by that head.
Prints a table per model and K; writes bench/results/probes.txt and probes.json. Re-runs itself with Debian's OpenBLAS
preloaded where it is installed (as `make prerouters` does; the BLAS is recorded). About 9 minutes on 2 busy cores with
OpenBLAS (the forward passes over ~115k tokens take two thirds of it); training is ~4x slower without it.
"""
import argparse, json, os, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPENBLAS = [p for p in ('/usr/lib/x86_64-linux-gnu/libopenblas.so.0', '/usr/lib/aarch64-linux-gnu/libopenblas.so.0')
            if Path(p).exists()]
MODELS = {'edge0-tiny': (8, 4), 'edge0-tiny-ds': (4,)}

def write_atomic(path: Path, text: str):
    "Write `text` to a temporary file beside `path`, then rename it into place"
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)

def bench_model(name, ks, tokens, a, say):
    "Train one base's probes on corpus windows; score them, the warm start, temporal locality and the heads at each K"
    import numpy as np
    from edge0.files import teacher_path
    from edge0.calib import sample_windows, windows
    from edge0.prerouter import load_prerouter
    from edge0.probes import capture_pre, init_probes, probe_recall, train_probes
    from edge0.streaming import load_resident
    from edge0.files import heldout_ids
    base = teacher_path(name)
    h = load_resident(base)  # as served: the backend's dtype, the cast_predicate's parameters float32
    model, tokenizer, spec = h.model, h.tokenizer, h.spec
    ids = sample_windows(windows(tokens, a.seq), a.tokens, a.seed).ravel()
    t0 = time.time()
    cap = capture_pre(spec, model, ids, spec.k, a.seq)
    say(f"\n=== {name} ({spec.model_type}, MoE layers {list(spec.moe_layers)}, {spec.num_experts} experts, native K={spec.k})")
    say(f"captured {len(ids):,} training tokens in {time.time() - t0:.0f} s")
    probes = init_probes(spec, model, hidden=a.hidden, seed=a.seed)
    t0 = time.time()
    log = train_probes(probes, cap, a.steps, a.batch, a.lr, a.seed, show=False)
    final_kl = float(np.mean(log[-100:]))
    say(f"trained {a.steps} steps in {time.time() - t0:.0f} s: mean KL {log[0]:.4f} -> {final_kl:.4f}")
    del cap
    heldout = heldout_ids(tokenizer, dtype=np.int64)
    runs = {}
    for k in ks:
        held = capture_pre(spec, model, heldout, k)
        rows = probe_recall(probes, model, held, k, load_prerouter(base, spec, k))
        n = len(held[spec.moe_layers[0]]['pre'])
        say(f"\n{name} K={k}: top-{k} recall of layer l's own experts at token t, {n:,} held-out tokens "
            f"(chance {k / spec.num_experts:.3f})")
        say(f"  {'layer':>5}{'probe':>8}{'warm':>8}{'reuse':>8}{'head':>8}")
        for l, r in rows.items():
            head = f"{r['head']:>8.3f}" if 'head' in r else f"{'-':>8}"
            say(f"  {l:>5}{r['probe']:>8.3f}{r['warm']:>8.3f}{r['reuse']:>8.3f}{head}")
        mean = {key: float(np.mean([r[key] for r in rows.values()])) for key in ('probe', 'warm', 'reuse')}
        say(f"  {'mean':>5}{mean['probe']:>8.3f}{mean['warm']:>8.3f}{mean['reuse']:>8.3f}")
        runs[f"{name}/K{k}"] = dict(model=name, k=k, num_experts=spec.num_experts, train_tokens=len(ids),
                                    heldout_tokens=n, final_kl=final_kl, mean=mean,
                                    layers={str(l): r for l, r in rows.items()})
    return runs

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--corpus', default=str(ROOT.parent / 'shared' / 'data' / 'corpus'))
    ap.add_argument('--work', default=str(ROOT / 'build' / 'teachers'), help='tokenizer and token cache (prepare)')
    ap.add_argument('--tokens', type=int, default=49_152, help='training tokens per base (phase 1 uses 120,000)')
    ap.add_argument('--seq', type=int, default=256)
    ap.add_argument('--steps', type=int, default=2000)
    ap.add_argument('--batch', type=int, default=512)
    ap.add_argument('--lr', type=float, default=1e-3)
    ap.add_argument('--hidden', type=int, default=256)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'probes'), help='writes OUT.txt and OUT.json')
    a = ap.parse_args()
    if OPENBLAS and 'openblas' not in os.environ.get('LD_PRELOAD', ''):
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], dict(os.environ, LD_PRELOAD=OPENBLAS[0]))
    from edge0.teachers import blas_in_use, prepare
    lines, t0 = [], time.time()
    def say(line):
        print(line, flush=True)
        lines.append(line)
    recipe = dict(tokens=a.tokens, seq=a.seq, steps=a.steps, batch=a.batch, lr=a.lr, hidden=a.hidden, seed=a.seed)
    say(f"recipe: {json.dumps(recipe)}; one set of probes per base (K is not in the loss), every MoE layer probed;")
    say(f"  training windows from the corpus's training split ({a.corpus}), scored on the held-out excerpt; "
        f"BLAS: {blas_in_use()}")
    say("columns: probe = the trained pre-attention probe; warm = its untrained warm start (the layer's own router on the")
    say("  pre-attention state); reuse = temporal locality (the layer's experts at the previous token); head = the committed")
    say("  phase-1 head that predicts the layer (from layer l-1, one token ahead)")
    _, tokens, _ = prepare(a.corpus, a.work)
    runs = {}
    for name, ks in MODELS.items(): runs.update(bench_model(name, ks, tokens, a, say))
    run_s = time.time() - t0
    say(f"\ntotal {run_s:.0f} s")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = dict(recipe=recipe, blas=blas_in_use(), run_s=run_s, date=time.strftime('%Y-%m-%d'), runs=runs)
    write_atomic(out.with_suffix('.json'), json.dumps(result, indent=1) + '\n')
    write_atomic(out.with_suffix('.txt'), '\n'.join(lines) + '\n')

if __name__ == '__main__':
    main()
