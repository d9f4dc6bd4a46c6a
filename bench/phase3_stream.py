"""Phase 3 of any model (`edge0 train MODEL --phase distil`, edge0.distil) end to end on a synthetic checkpoint of >= 1.5 GB,
under a memory cap of half its size: it runs within the budget, and what a step reads.

    python bench/phase3_stream.py                # build the checkpoint and its heads if missing, then run (about 30 min on 2 CPUs)

The checkpoint is phase1_stream's (edge0.zoo.build_synthetic, 16 layers x 128 experts, K=8, 1.84 GB, mlx layout: phase 3
trains through MLX's kernels), its routing printed first. Its heads are trained once, uncapped, on a small recipe
(random weights: their recall is not the point). Then, each in a child process in a child memory cgroup capped at half
the checkpoint's bytes (no swap), with the checkpoint dropped from the page cache before it:
  1. mlx_lm.load of the checkpoint, which should be OOM-killed;
  2. phase 3, self-distillation at K=8 (`distil(...)`, the recipe below): the student's own text written streamed in
     `routing` mode, the teacher's pass (own routing at native K) layer by layer, and --steps training steps, each
     reading every MoE layer's experts forward and again backward.
Reported: bytes the cgroup read from the disk, expert bytes the run read per step and in the teacher's pass, peak memory
(cgroup, page cache included; the child's maxrss) against the cap, the time per step. Quality on random weights means
nothing and is not claimed. Targets: mlx_lm.load is killed; phase 3 finishes under the cap; a step reads at most
2.1 x the checkpoint's expert bytes (each layer once forward and once backward).
Writes bench/results/phase3_stream.txt and .json.
"""
import argparse, json, os, shutil, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from phase1_stream import MiB, build, calibration_file, capped

ROOT = Path(__file__).resolve().parent.parent

def heads(model:Path, tokens:int, steps:int, pool_mib:float) -> Path:
    "Phase 1 at K=8 beside the checkpoint, once (uncapped, small recipe)"
    out = model / 'prerouter.safetensors'
    if not out.exists():
        data = calibration_file(model, model.parent / f"{model.name}-calibration.txt", tokens, 2)
        cmd = [str(Path(sys.executable).parent / 'edge0'), 'train', str(model), '--phase', '1', '--k', '8', '--tokens',
               str(tokens), '--steps', str(steps), '--data', str(data), '--pool-mib', f"{pool_mib:g}",
               '--work', str(model.parent / 'phase1-work'), '--dst', str(model)]
        print(' '.join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return out

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l'))
    ap.add_argument('--steps', type=int, default=4, help='phase-3 training steps')
    ap.add_argument('--windows', type=int, default=8, help="windows of the student's own text")
    ap.add_argument('--prompt', type=int, default=64)
    ap.add_argument('--gen', type=int, default=32)
    ap.add_argument('--batch', type=int, default=2)
    ap.add_argument('--pool-mib', type=float, default=128)
    ap.add_argument('--cap-mib', type=float, help='the memory cap (default: half the checkpoint)')
    ap.add_argument('--scratch', default=str(ROOT / 'build' / 'phase3-stream'))
    ap.add_argument('--note', default='', help='a line for the results (e.g. another job shared the CPU)')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'phase3_stream'))
    ap.add_argument('--report', action='store_true', help="only write the .txt again from the run's .json")
    a = ap.parse_args()
    if a.report: return Path(a.out + '.txt').write_text(report(json.loads(Path(a.out + '.json').read_text())) + '\n')
    model, scratch = Path(a.model), Path(a.scratch)
    size = build(model, 16, 1024, 512)
    from edge0.harness import routing_report
    from edge0.heads import layer_bytes
    from edge0.store import ExpertStore, read_header
    st = ExpertStore(model, residency=False)
    layer, spec = layer_bytes(st), st.spec
    experts = sum(t.nbytes for ts in st.layers.values() for t in ts.values())
    st.close()
    print(f"checkpoint {model}: {size / 1e9:.2f} GB; experts {experts / MiB:,.0f} MiB, largest layer's {layer / MiB:.1f} MiB",
          flush=True)
    routing = routing_report(model)
    print(routing, flush=True)
    heads(model, 2048, 40, a.pool_mib)
    cap = int(a.cap_mib * MiB) if a.cap_mib else size // 2
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    print(f"\nmemory cap {cap / MiB:,.0f} MiB: mlx_lm.load ...", flush=True)
    code = f"import mlx.core as mx, mlx_lm; m, _ = mlx_lm.load({str(model)!r}); mx.eval(m.parameters()); print('loaded')"
    load = capped(cap, [sys.executable, '-c', code], model, scratch / 'mlx_lm_load.log')
    print(f"  exit status {load['returncode']}, oom_kill {load['oom_kills']}", flush=True)
    recipe = dict(windows=a.windows, prompt=a.prompt, gen=a.gen, steps=a.steps, batch=a.batch)
    budget = f"StreamOptions(pool_bytes={int(a.pool_mib * MiB)})"
    call = ("from edge0.distil import distil; from edge0.engine import StreamOptions; "
            f"from edge0.serving import Serving; distil({str(model)!r}, Serving('routing', 8, options={budget}), "
            f"work={str(scratch / 'work')!r}, dst={str(scratch / 'adapter')!r}, **{recipe!r})")
    (scratch / 'adapter').mkdir()
    print(f"phase 3 under the cap: python -c {call!r} ...", flush=True)
    log = scratch / 'phase3.log'
    env_note = ' (LD_PRELOAD ' + os.environ['LD_PRELOAD'] + ')' if os.environ.get('LD_PRELOAD') else ''
    p3 = capped(cap, [sys.executable, '-c', call], model, log)
    out = scratch / 'adapter' / 'lora-k8.safetensors'
    if p3['returncode'] or not out.exists():
        sys.exit(f"phase 3 failed under the cap: {json.dumps(p3)}\n{log.read_text()[-3000:]}")
    meta = read_header(out)[1]
    said = [ln.strip() for ln in log.read_text().splitlines() if ln.startswith("the student's own text:")]
    sampling = said[0] if said else "the student's own text: the layers no head predicts kept resident within the pool"
    d = dict(model=str(model), checkpoint_bytes=size, expert_bytes=experts, layer_bytes=layer, cap=cap, call=call,
             routing=routing, mlx_lm_load=load, phase3=p3, metadata=meta, note=a.note, sampling=sampling,
             date=time.strftime('%Y-%m-%d %H:%M'), cpus=os.cpu_count(), env=env_note,
             shape=[len(spec.moe_layers), spec.num_experts, spec.k])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out + '.json').write_text(json.dumps(d, indent=1))
    text = report(d)
    print('\n' + text)
    Path(a.out + '.txt').write_text(text + '\n')

def report(d:dict) -> str:
    "The results as text, from the run's JSON record"
    size, experts, layer, cap, load, p3, meta = (d[key] for key in ('checkpoint_bytes', 'expert_bytes', 'layer_bytes',
                                                                    'cap', 'mlx_lm_load', 'phase3', 'metadata'))
    moe, n_experts, k = d['shape']
    steps, per_step = json.loads(meta['step_log']), int(meta['bytes_read_per_step'])
    ok = lambda b: 'MET' if b else 'NOT MET'
    killed = load['returncode'] in (-9, 137) or load['oom_kills'] > 0
    disk = (f"{p3['read_bytes'] / MiB:>10,.0f} MiB" if p3['read_bytes'] else
            "  not counted (no blkio/io controller in this cgroup)")
    lines = [f"phase 3 streamed (self-distillation), {d['date']}, {d['cpus']} CPUs{d['env']}"
             + (f"; NOTE: {d['note']}" if d['note'] else ''),
             f"checkpoint {d['model']}: {size / 1e9:.2f} GB on disk ({size / MiB:,.0f} MiB), {moe} MoE layers x "
             f"{n_experts} experts, K={k}; experts {experts / MiB:,.0f} MiB, largest MoE layer's "
             f"{layer / MiB:.1f} MiB", d['routing'], '',
             f"memory cap: {cap / MiB:,.0f} MiB ({cap / size:.2f} x the checkpoint), child memory cgroup, no swap; pool "
             f"{meta['pool_mib']} MiB",
             f"1. mlx_lm.load under the cap: exit status {load['returncode']}, oom_kill {load['oom_kills']}: "
             f"{'OOM-killed' if killed else 'NOT killed'}",
             f"2. python -c {d['call']!r}",
             f"   exit status {p3['returncode']}, cgroup oom_kill {p3['oom_kills']}, wall {p3['wall_s']:.0f} s "
             f"(the run: {meta['seconds']} s)", f"   {d['sampling']}", '',
             f"{'bytes the cgroup read from the disk':44}{disk}",
             f"{'bytes the child read from the disk (getrusage)':44}{p3['child_read_blocks_bytes'] / MiB:>10,.0f} MiB"
             "  (the page cache cannot hold the checkpoint under the cap: the student's text re-reads what it stages)",
             f"{'expert bytes read: the teacher pass':44}{int(meta['teacher_bytes_read']) / MiB:>10,.0f} MiB"
             f"  ({int(meta['teacher_bytes_read']) / experts:.2f} x the experts)",
             f"{'expert bytes read per training step (median)':44}{per_step / MiB:>10,.0f} MiB"
             f"  ({per_step / experts:.2f} x the experts)",
             f"{'peak memory, page cache included (cgroup)':44}{p3['peak_charged'] / MiB:>10,.0f} MiB",
             f"{'peak anonymous memory (sampled)':44}{p3['peak_anon'] / MiB:>10,.0f} MiB"
             f"  ({p3['peak_anon'] / cap:.2f} x the cap)",
             f"{'peak RSS (child maxrss / run)':44}{p3['child_maxrss'] / MiB:>10,.0f} MiB / "
             f"{int(meta['peak_rss']) / MiB:,.0f} MiB  ({p3['child_maxrss'] / cap:.2f} x the cap"
             + ("; RSS counts shared-library pages already cached and charged outside this cgroup)"
                if p3['child_maxrss'] > cap else ')'), '',
             f"{'step':>6}{'loss':>10}{'seconds':>10}{'expert MiB read':>17}",
             *(f"{e['step']:>6}{e['loss']:>10.4f}{e['seconds']:>10.1f}{e['bytes_read'] / MiB:>17,.0f}" for e in steps), '',
             f"recipe {meta['recipe']}", f"data: {meta['data']}", '', 'targets',
             f"  mlx_lm.load is OOM-killed under the cap: {ok(killed)}",
             f"  phase 3 finishes under the cap: {ok(p3['returncode'] == 0 and p3['oom_kills'] == 0)}",
             f"  a step reads <= 2.1 x the experts: {per_step / experts:.2f} {ok(per_step <= 2.1 * experts)}"]
    return '\n'.join(lines)

if __name__ == '__main__': main()
