"""The default expert budget (`--pool-mib auto`) under memory caps of 600, 900 and 1200 MB, by the harness, beside the
old fixed default of 256 MiB, on the 1.85 GB synthetic Qwen3-MoE checkpoint converted with `--layout torch-cpu`.

    python bench/memory_budget.py                     # build and convert the checkpoint if missing, run everything
    python bench/memory_budget.py --caps 600 --tokens 16

The checkpoint (edge0.zoo.build_synthetic, 16 layers x 128 experts, K=8, hidden 1024, expert FFN 512; cached under
build/bench; the same one bench/phase1_stream.py uses) has its routing printed first (measured on its mlx-layout
original, whose weights the torch-cpu copy holds byte for byte): degenerate routing would make the I/O figures
meaningless. Then, per cap, each arm in its own process in a child memory cgroup without swap (edge0.harness.run): a cold
prefill of 16 tokens, a warm one, then forced decode steps with the checkpoint evicted from the page cache before them.
Per arm: decode tok/s; expert bytes the store read per token; this process's reads from storage per token (/proc/self/io)
and its major page faults per token; peak RSS (ru_maxrss: it counts the libraries' pages, which earlier processes
read into the page cache and which are charged to the parent cgroup, so it can pass the cap); and for `auto` the budget it chose with each number it came from. Beside
them `edge0 generate` run the way a user runs it (default flags, --stats) under the same cap: exit status, wall time, reads.

Targets: every `auto` arm decodes under every cap, and none reads from storage more than twice the routed bytes of a token
(K experts x MoE layers). Writes bench/results/memory_budget.txt and .json.
"""
import argparse, json, subprocess, sys, threading, time
from pathlib import Path
from edge0.conditions import Cgroup, evict, memory_cap
from edge0.harness import Arm, routing_report, run

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20
NO_SWAP = ('memory.memsw.limit_in_bytes', 'memory.swap.max')

SHAPE_16L = dict(num_layers=16, num_experts=128, k=8, hidden=1024, expert_size=512)  # 1.85 GB
SHAPE_16L_CALIBRATED = dict(SHAPE_16L, routing='calibrated')  # the same, routing like a trained MoE's (zoo.ROUTINGS)

def packed_here(packed:Path) -> bool:
    "Whether the torch-cpu checkpoint `packed` was packed as this machine's torch packs"
    from edge0.backend.quant import torch_packing
    layout = json.loads((packed / 'config.json').read_text()).get('edge0_layout', {})
    return (layout.get('packing') or {}).get('probe') == torch_packing()['probe']

def stored_by_expert(packed:Path) -> bool:
    """Whether the torch-cpu checkpoint `packed` stores its experts expert by expert (each one aligned read), gate
    and up packed as one product"""
    from edge0.store import EXPERTS_META, read_header
    heads = [read_header(f)[1] for f in packed.glob('model-experts-L*.safetensors')]
    return all(EXPERTS_META in m and '.gate_up_proj.packed' in m[EXPERTS_META] for m in heads)

def checkpoint(model:Path, shape:dict|None=None) -> Path:
    "The mlx-layout checkpoint of `shape` (build_synthetic's arguments), built once, and its torch-cpu conversion"
    if not (model / 'config.json').exists():
        from edge0.zoo import build_synthetic
        print(f'building {model} ...', flush=True)
        t0 = time.time()
        build_synthetic(model, **(shape or SHAPE_16L))
        print(f'  {time.time() - t0:.0f} s', flush=True)
    packed = model.with_name(model.name + '-torch-cpu')
    again = (packed / 'config.json').exists() and not packed_here(packed)
    if again: print(f'{packed} was packed by another CPU\'s torch (re-packing at every load would be measured)', flush=True)
    elif (packed / 'config.json').exists() and not stored_by_expert(packed):
        print(f'{packed} stacks its experts tensor by tensor or packs gate and up apart (converted by an older edge0): converting again', flush=True)
        again = True
    if again or not (packed / 'config.json').exists():
        from edge0.convert import convert
        print(f'converting {model} to {packed} ...', flush=True)
        t0 = time.time()
        convert(model, packed, layout='torch-cpu', overwrite=again)
        print(f'  {time.time() - t0:.0f} s', flush=True)
    return packed

def user_run(model:Path, cap_mb:float, timeout:float) -> dict:
    "`edge0 generate` with its defaults and --stats under the cap, as a user runs it: status, wall, reads, the budget"
    evict(model)
    cg = Cgroup(memory_cap(int(cap_mb * MiB)), optional=NO_SWAP)
    cmd = [str(Path(sys.executable).with_name('edge0')), 'generate', '-m', str(model), '-p', 'def fibonacci(n):',
           '--ignore-chat-template', '--max-tokens', '32', '--stats', '--verbose', 'true']
    t0, io = time.perf_counter(), {}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=cg.preexec)
    def sample():
        while p.poll() is None:
            try: io.update(l.split(': ') for l in Path(f'/proc/{p.pid}/io').read_text().splitlines())
            except OSError: pass
            time.sleep(0.25)
    threading.Thread(target=sample, daemon=True).start()
    try: out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out = p.communicate()[0] + f'\n(killed after {timeout:.0f} s)'
    cg.close()
    lines = out.splitlines()
    keep = [l for l in lines if l.startswith(('expert memory budget', '  ', 'streamed:', 'warning', 'edge0', '('))]
    return dict(returncode=p.returncode, wall_s=time.perf_counter() - t0, read_mb=int(io.get('read_bytes', 0)) / 1e6,
                lines=keep)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l'))
    ap.add_argument('--caps', default='600,900,1200', help='memory caps, MB (MiB), comma-separated')
    ap.add_argument('--tokens', type=int, default=32)
    ap.add_argument('--fixed-mib', type=float, default=256, help='the old default budget, run beside auto')
    ap.add_argument('--timeout', type=float, default=600, help='seconds before an arm is stopped')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'memory_budget'))
    ap.add_argument('--note', default='', help='a line for the results (e.g. another job shared the CPU)')
    a = ap.parse_args()
    src = Path(a.model)
    model = checkpoint(src)
    from edge0.store import ExpertStore
    st = ExpertStore(model, residency=False)
    spec, bundle = st.spec, st.expert_nbytes
    st.close()
    routed = spec.k * bundle * len(spec.moe_layers)
    size = sum(f.stat().st_size for f in model.glob('*.safetensors'))
    out = [f"checkpoint {model}: {size / 1e9:.2f} GB, {len(spec.moe_layers)} MoE layers x {spec.num_experts} experts, "
           f"K={spec.k}, {bundle / MiB:.2f} MiB an expert: a token routes {routed / MiB:.0f} MiB of experts",
           routing_report(src)] + ([f"note: {a.note}"] if a.note else [])
    print('\n'.join(out), flush=True)
    routing = {str(model): out[1] + f"\n(measured on {src.name}, the same weights in mlx-lm's layout)"}
    arms = [Arm(model, 'off', name='auto'), Arm(model, 'off', pool_mib=a.fixed_mib, name=f'{a.fixed_mib:g} MiB')]
    report, ok = dict(model=str(model), routed_mb_per_token=routed / MiB, caps={}), True
    for cap in [float(c) for c in a.caps.split(',')]:
        r = run(arms, a.tokens, prompt=16, rounds=1, cache='cold', cap_mb=cap, routing=routing, progress=False,
                timeout=a.timeout, out=ROOT / 'build' / 'harness')
        u = user_run(model, cap, a.timeout)
        report['caps'][cap] = dict(results=r['results'], runs=r['runs'], user=u)
        out.append(f"\ncap {cap:.0f} MiB (child memory cgroup, no swap)")
        out.append(f"  {'arm':10}{'tok/s':>7}{'budget MiB':>11}{'store MiB/tok':>14}{'disk MiB/tok':>13}"
                   f"{'x routed':>9}{'faults/tok':>11}{'peak RSS':>9}")
        for name, res in r['results'].items():
            if not res.get('rounds'):
                f = res['failed'][0]
                why = 'killed (out of memory)' if f['killed'] else f"failed: {f['stderr'].strip().splitlines()[-1:]}"
                out.append(f"  {name:10}  {why}")
                if name == 'auto': ok = False
                continue
            disk = res.get('disk_mb_per_step')
            x = disk * MiB / routed if disk is not None else None
            if name == 'auto' and (x is None or x > 2): ok = False
            out.append(f"  {name:10}{res['decode_tps']:>7.2f}{res.get('pool_mib') or 0:>11.0f}{res['mb_per_step']:>14.1f}"
                       f"{disk if disk is not None else float('nan'):>13.1f}{x if x is not None else float('nan'):>9.2f}"
                       f"{res.get('faults_per_step', 0):>11.1f}{res['rss_mb']:>9.0f}")
            if name == 'auto' and res.get('budget'):
                from edge0.memory import Budget
                out += ['    ' + l for l in Budget(**res['budget']).lines()]
        out.append(f"  edge0 generate (defaults, --stats): exit {u['returncode']}, {u['wall_s']:.0f} s, "
                   f"{u['read_mb']:,.0f} MB read")
        out += ['    ' + l for l in u['lines'] if not l.startswith('  ') or 'budget' in l or 'free after' in l]
        if u['returncode'] != 0: ok = False
        print('\n'.join(out[-(len(r['results']) + 4 + len(u['lines'])):]), flush=True)
    out.append(f"\ntarget: auto decodes under every cap, reading at most 2x the routed bytes a token: "
               f"{'MET' if ok else 'NOT MET'}")
    print(out[-1])
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out + '.txt').write_text('\n'.join(out) + '\n')
    Path(a.out + '.json').write_text(json.dumps(report, indent=1, default=str))

if __name__ == '__main__': main()
