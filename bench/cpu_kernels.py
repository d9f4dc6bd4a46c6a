"""Torch's int4 kernels against MLX's on the CPU: a Qwen3-30B-A3B-shaped checkpoint served under a 3 GB memory cap, and a 2 GB
synthetic served warm against mlx-lm's resident model.

    python bench/cpu_kernels.py                      # build what is missing (about 20 min, 34 GB of disk), run, print both tables
    python bench/cpu_kernels.py --rounds 3 --tokens 8 --skip-small

1. The 30B shape (48 layers, 128 experts, top-8, hidden 2048, expert FFN 768; 16.6 GB) is built by `edge0.zoo.build_synthetic`
   (weights that route like a trained model's: its routing statistics are printed first) and converted to the torch-cpu layout.
   Its prerouter heads are warm-started from the routers and (--head-steps) distilled briefly on its own forward passes
   (streamed, torch kernels, in a child process with OpenBLAS where Debian's is installed), and saved for both layouts.
   Arms: kernels mlx (the mlx-lm checkpoint) vs torch (the converted one) x prerouter off vs routing x K=8 and K=4. Every arm
   runs in its own process inside a child memory cgroup capped at 3 GB, starts with the checkpoint evicted from the page
   cache, and decodes the same forced token sequence under one expert budget (--pool-mb, 1400 MiB by default: it must hold
   the routing arms' resident first layer and K slots for each other layer); arm order rotates every round; medians over
   rounds. Per arm: decode tok/s, step ms, blocked and compute ms per step, MB read per token, peak RSS, and the roofline
   bound max(compute ms per step, MB per step / the read rate the same kernels' `off` arm saw). The main thread waits out
   each of the `off` arm's reads, so that rate is this disk's at this grain, as served, in the same run.
   Targets: torch >= 5x mlx decode (off, K=8); routing within 1.15x of its bound.
2. The streaming benchmark's 2 GB synthetic (20 layers, hidden 1024), no cap, page cache warm: edge0 (torch kernels, experts in
   the torch-cpu layout, a pool that holds every expert) against mlx-lm's resident model. Target: edge0 >= 2x resident decode.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edge0.eval import Cgroup, memory_cap  # noqa: E402
from prerouter_ab import sequence, evict, read_bandwidth, med, shards, OPENBLAS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
AB = Path(__file__).resolve().parent / 'prerouter_ab.py'
SHAPE_30B = dict(num_layers=48, num_experts=128, k=8, hidden=2048, expert_size=768)

def build(mlx_dir:Path, torch_dir:Path, **shape):
    "The mlx-lm checkpoint and its torch-cpu conversion, built where missing"
    from edge0.zoo import build_synthetic
    from edge0.convert import convert
    if not (mlx_dir / 'config.json').exists():
        t0 = time.time(); print(f'building {mlx_dir} ...', flush=True)
        build_synthetic(mlx_dir, overwrite=True, **shape); print(f'  {time.time() - t0:.0f} s', flush=True)
    if not (torch_dir / 'config.json').exists():
        t0 = time.time(); print(f'converting to {torch_dir} (--layout torch-cpu) ...', flush=True)
        convert(mlx_dir, torch_dir, layout='torch-cpu', overwrite=True); print(f'  {time.time() - t0:.0f} s', flush=True)

def make_heads(mlx_dir, torch_dir, k, tokens=512, steps=60):
    """Heads warm-started from the routers and (steps > 0) distilled on the converted checkpoint's own streamed forward
    passes. The speed arms need heads, not good ones: with `steps=0` they are the warm start alone"""
    import numpy as np
    from edge0.prerouter import init_prerouter, capture, phase1, save_prerouter, prerouter_file
    from edge0.streaming import load
    mlx_dir, torch_dir = Path(mlx_dir), Path(torch_dir)
    with load(torch_dir, kernels='torch', prefill_path='exact', pool_bytes=1 << 30) as h:
        pr = init_prerouter(h.spec, h.model, owners=h.spec.moe_layers[:-1], k=k)
        if steps:
            ids = np.array(sequence(torch_dir, tokens))
            t0 = time.time(); cap = capture(h.spec, h.model, ids, k, seq=256)
            print(f'  captured {len(ids)} tokens in {time.time() - t0:.0f} s', flush=True)
    if steps:
        log = phase1(pr, cap, steps=steps, batch=128, lr=1e-4, show=False, weighted=0)  # as its committed run (KL alone)
        print(f'  phase 1: KL {log[0]:.3f} -> {log[-1]:.3f}', flush=True)
    else: ids = []
    p = save_prerouter(pr, mlx_dir, extra=dict(builder='bench/cpu_kernels.py', train_tokens=len(ids), steps=steps, lr=1e-4))
    shutil.copy2(p, torch_dir / p.name)  # the converted checkpoint accepts its source's heads (edge0_layout.source_fingerprint)

def run_arm(kernels, mode, k, model, seq, a, cap=None):
    cmd = [sys.executable, str(AB), '--arm', mode, '--k', str(k), '--model', str(model), '--seq', str(seq), '--tokens',
           str(a.tokens), '--prompt', str(a.prompt), '--pool-mb', str(a.pool_mb), '--kernels', kernels, '--total-budget']
    evict(model)
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=cap.preexec if cap else None, timeout=3600)
    for line in r.stdout.splitlines():
        if line.startswith('RESULT '): return dict(json.loads(line[7:]), wall_s=time.time() - t0)
    return dict(arm=mode, k=k, failed=True, returncode=r.returncode, killed=r.returncode in (-9, 137), stderr=r.stderr[-600:])

def routing_report(model):
    from edge0.routing_stats import checkpoint_routing, format_routing
    t0 = time.time()
    rep = checkpoint_routing(model, kernels='torch')
    print(format_routing(rep, Path(model).name) + f"  [{time.time() - t0:.0f} s]", flush=True)
    return {str(l): v for l, v in rep.items()}

def verdicts(rows:dict, ks, probe:dict) -> list:
    "The two 30B targets, met or not, and when not, why, from the counters of one run"
    out = []
    for k in ks:
        mlx, torch, routed = rows[f'mlx/off/K{k}'], rows[f'torch/off/K{k}'], rows[f'torch/routing/K{k}']
        out.append(f"  K={k}: reads ran at {mlx['read_mib_s']:.0f} (mlx arm) and {torch['read_mib_s']:.0f} MiB/s (torch arm) "
                   f"when off; a cold probe of {k} random experts at a time through the store: {probe[str(k)]:.0f} MiB/s")
        ratio = torch['tps'] / mlx['tps']
        out.append(f"  target: torch >= 5x mlx decode (off, K={k}): {ratio:.2f}x -> {'MET' if ratio >= 5 else 'NOT MET'}")
        if ratio < 5:
            fastest = max(probe[str(k)], mlx['read_mib_s'], torch['read_mib_s'])
            reads = 1e3 * torch['mb'] / fastest
            ceiling = (mlx['compute_ms'] + reads) / (torch['compute_ms'] + reads)
            out.append(f"    why: under the cap `off` must read {torch['mb']:.0f} MiB a step and waits out each read; at the "
                       f"fastest rate this disk served ({fastest:.0f} MiB/s) that is {reads:.0f} ms a step for both kernels, "
                       f"so compute {mlx['compute_ms']:.0f} (mlx) vs {torch['compute_ms']:.0f} ms (torch, "
                       f"{mlx['compute_ms'] / torch['compute_ms']:.1f}x faster) can give at most {ceiling:.2f}x")
        within = routed['step_ms'] / routed['bound_ms']
        out.append(f"  target: routing (torch) within 1.15x of its bound at K={k}: {within:.2f}x -> "
                   f"{'MET' if within <= 1.15 else 'NOT MET'} (blocked {routed['blocked_ms']:.0f} of {routed['step_ms']:.0f} ms)")
        if within > 1.15:
            alone = max(torch['compute_ms'], routed['bound_ms'])
            out.append(f"    why: the reads are hidden behind compute only in part, and compute itself grows from "
                       f"{torch['compute_ms']:.0f} ms a step (off: reads wait, nothing else runs) to "
                       f"{routed['compute_ms']:.0f} ms when the background reads run beside it: two cores hold the "
                       f"main thread and the reader threads' copies. With compute as in `off`, the step would be "
                       f"{alone:.0f} ms ({alone / routed['bound_ms']:.2f}x its bound)")
    return out

def report(path) -> None:
    "Print the 30B table's verdicts again from a run's JSON (the same run's figures)"
    big = json.loads(Path(path).read_text())['big']
    ks = sorted({int(key.rsplit('K', 1)[1]) for key in big['rows']}, reverse=True)
    for line in verdicts(big['rows'], ks, {str(k): v for k, v in big['probe_mib_s'].items()}): print(line)

def big(a):
    mlx_dir, torch_dir = Path(a.out) / 'qwen3-30b-shape', Path(a.out) / 'qwen3-30b-shape-torch'
    build(mlx_dir, torch_dir, **SHAPE_30B)
    routing = routing_report(torch_dir)
    from edge0.prerouter import prerouter_file
    from edge0.streaming import model_spec
    spec = model_spec(mlx_dir)
    for k in a.ks:
        if not (mlx_dir / prerouter_file(spec, k)).exists():
            print(f'heads at K={k}: warm start{f", distilled {a.head_steps} steps" if a.head_steps else " only"} ...', flush=True)
            env = dict(os.environ, **({'LD_PRELOAD': OPENBLAS[0]} if OPENBLAS else {}))  # training: 5x with OpenBLAS
            subprocess.run([sys.executable, __file__, '--make-heads', str(mlx_dir), str(torch_dir), str(k),
                            '--head-steps', str(a.head_steps)], env=env, check=True, timeout=7200)
    size = sum(f.stat().st_size for f in shards(mlx_dir))
    seq = Path(a.out) / '30b-sequence.json'
    seq.write_text(json.dumps(sequence(mlx_dir, a.prompt + a.tokens + 1)))
    cap = Cgroup(memory_cap(int(a.cap_gb * 2**30)), optional=('memory.memsw.limit_in_bytes', 'memory.swap.max'))
    print(f"\n=== 30B shape, {size / 2**30:.1f} GiB, under a {a.cap_gb:g} GiB memory cap; expert budget {a.pool_mb:g} MiB; "
          f"{a.tokens} forced decode steps after a {a.prompt}-token prompt; {a.rounds} rounds", flush=True)
    probe = {str(k): read_bandwidth(torch_dir, k) for k in a.ks}
    arms = [(kern, mode, k) for k in a.ks for mode in ('off', 'routing') for kern in ('mlx', 'torch')]
    res = {}
    for rnd in range(a.rounds):
        order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]
        for kern, mode, k in order:
            r = run_arm(kern, mode, k, mlx_dir if kern == 'mlx' else torch_dir, seq, a, cap)
            res.setdefault((kern, mode, k), []).append(r)
            print(f"  round {rnd + 1} {kern}/{mode}/K{k}: " + (f"{r['decode_tps']:.2f} tok/s ({r['wall_s']:.0f} s)"
                  if not r.get('failed') else f"FAILED {r.get('returncode')} {r.get('stderr', '')[-200:]}"), flush=True)
    cap.close()
    def seen(kern, k):  # MiB/s of the off arm's reads (the main thread waits out each one): this disk, as served
        rs = res[kern, 'off', k]
        return 1e3 * med(rs, 'mb_per_step') / med(rs, 'blocked_ms_per_step')
    rows = {}
    print(f"\n  {'kernels':8}{'mode':9}{'K':>2}{'tok/s':>8}{'step ms':>9}{'blocked':>8}{'compute':>8}{'MB/tok':>8}{'RSS MB':>8}"
          f"{'bound ms':>9}{'x bound':>8}  notes")
    for kern, mode, k in arms:
        rs = res[kern, mode, k]
        step, blocked, mb = med(rs, 'step_ms'), med(rs, 'blocked_ms_per_step'), med(rs, 'mb_per_step')
        compute, bw = step - blocked, seen(kern, k)
        bound = max(compute, 1e3 * mb / bw)
        fails = [r for r in rs if r.get('failed')]
        notes = [f"{len(fails)} failed (exit {fails[0]['returncode']})"] if fails else []
        if mode == 'routing': notes.append(f"dropped {sum(r.get('dropped', 0) for r in rs)}")
        rows[f"{kern}/{mode}/K{k}"] = dict(tps=med(rs, 'decode_tps'), step_ms=step, blocked_ms=blocked, compute_ms=compute, mb=mb,
                                           rss_mb=med(rs, 'rss_mb'), bound_ms=bound, read_mib_s=bw, failed=len(fails))
        print(f"  {kern:8}{mode:9}{k:>2}{med(rs, 'decode_tps'):>8.2f}{step:>9.0f}{blocked:>8.0f}{compute:>8.0f}{mb:>8.0f}"
              f"{med(rs, 'rss_mb'):>8.0f}{bound:>9.0f}{step / bound:>8.2f}  {'; '.join(notes)}")
    for line in verdicts(rows, a.ks, probe): print(line)
    return dict(routing=routing, rows=rows, cap_gb=a.cap_gb, pool_mb=a.pool_mb, size_gib=size / 2**30, probe_mib_s=probe)

def small(a):
    mlx_dir, torch_dir = Path(a.out) / 'qwen3moe-2g', Path(a.out) / 'qwen3moe-2g-torch'
    build(mlx_dir, torch_dir)  # the streaming benchmark's default shape
    routing = routing_report(torch_dir)
    size = sum(f.stat().st_size for f in shards(mlx_dir))
    seq = Path(a.out) / '2g-sequence.json'
    seq.write_text(json.dumps(sequence(mlx_dir, a.prompt + a.small_tokens + 1)))
    print(f"\n=== 2 GB synthetic ({size / 2**30:.2f} GiB), no cap, page cache warm; {a.small_tokens} forced decode steps", flush=True)
    arms, res = (('resident', mlx_dir), ('torch', torch_dir), ('mlx', mlx_dir)), {}
    b = argparse.Namespace(**{**vars(a), 'tokens': a.small_tokens, 'pool_mb': 1.2 * size / 2**20})
    for rnd in range(a.rounds):
        order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]
        for name, model in order:
            for f in shards(model): f.read_bytes()  # warm: the page cache holds the checkpoint for every arm
            mode, kern = ('compute', 'mlx') if name == 'resident' else ('off', name)
            cmd = [sys.executable, str(AB), '--arm', mode, '--k', '8', '--model', str(model), '--seq', str(seq), '--tokens',
                   str(b.tokens), '--prompt', str(a.prompt), '--pool-mb', str(b.pool_mb), '--kernels', kern]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            out = next((json.loads(l[7:]) for l in r.stdout.splitlines() if l.startswith('RESULT ')),
                       dict(failed=True, returncode=r.returncode, stderr=r.stderr[-400:]))
            res.setdefault(name, []).append(out)
            print(f"  round {rnd + 1} {name}: " + (f"{out['decode_tps']:.2f} tok/s" if not out.get('failed') else f"FAILED {out}"), flush=True)
    rows = {n: dict(tps=med(rs, 'decode_tps'), step_ms=med(rs, 'step_ms'), rss_mb=med(rs, 'rss_mb')) for n, rs in res.items()}
    names = dict(resident="mlx-lm resident (MLX kernels)", torch="edge0 streamed, torch kernels", mlx="edge0 streamed, MLX kernels")
    for n, r in rows.items(): print(f"  {names[n]:32} {r['tps']:7.2f} tok/s  step {r['step_ms']:7.1f} ms  peak RSS {r['rss_mb']:7.0f} MB")
    same = all(r.get('tokens') == res['resident'][0].get('tokens') for r in res['mlx'])
    print(f"  edge0 with MLX kernels decodes the resident model's tokens: {same}")
    ratio = rows['torch']['tps'] / rows['resident']['tps']
    print(f"  target: edge0 (torch) >= 2x mlx-lm's resident decode: {ratio:.2f}x -> {'MET' if ratio >= 2 else 'NOT MET'}")
    return dict(routing=routing, rows=rows, size_gib=size / 2**30)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--ks', default='8,4')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--tokens', type=int, default=8, help='forced decode steps per arm on the 30B shape')
    ap.add_argument('--small-tokens', type=int, default=32, help='forced decode steps per arm on the 2 GB synthetic')
    ap.add_argument('--prompt', type=int, default=5)
    ap.add_argument('--cap-gb', type=float, default=3.0)
    ap.add_argument('--pool-mb', type=float, default=1400, help="every arm's expert budget (routing at K=8 holds 1.27 GiB "
                    "of it: layer 0 resident, K slots for each of the other 47 layers)")
    ap.add_argument('--head-steps', type=int, default=60, help='phase-1 steps for the 30B shape\'s heads (0: warm start only)')
    ap.add_argument('--skip-big', action='store_true'); ap.add_argument('--skip-small', action='store_true')
    ap.add_argument('--out', default=str(ROOT / 'build' / 'bench'))
    ap.add_argument('--json', default=str(ROOT / 'bench' / 'results' / 'cpu_kernels.json'))
    ap.add_argument('--report', action='store_true', help="print the 30B targets' verdicts again from --json; run nothing")
    ap.add_argument('--make-heads', nargs=3, metavar=('MLX_DIR', 'TORCH_DIR', 'K'), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.report: return report(a.json)
    if a.make_heads: return make_heads(a.make_heads[0], a.make_heads[1], int(a.make_heads[2]), steps=a.head_steps)
    a.ks = [int(k) for k in a.ks.split(',')]
    Path(a.out).mkdir(parents=True, exist_ok=True)
    out = dict(date=time.strftime('%Y-%m-%d %H:%M'), machine=f"{os.uname().machine}, {os.cpu_count()} cores", rounds=a.rounds)
    if not a.skip_small: out['small'] = small(a)
    if not a.skip_big: out['big'] = big(a)
    Path(a.json).write_text(json.dumps(out, indent=1))
    print(f"\nwrote {a.json}")

if __name__ == '__main__': main()
