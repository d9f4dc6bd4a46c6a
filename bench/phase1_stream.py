"""Phase 1 (`edge0 train MODEL --phase heads`) end to end on a synthetic checkpoint of >= 1.5 GB, under a memory cap of half its size.

    python bench/phase1_stream.py                         # build the checkpoint if missing, run everything (about 25 min on 2 CPUs)
    python bench/phase1_stream.py --tokens 16384 --steps 300 --heldout-windows 16          # longer, closer to the recipe

The checkpoint (edge0.zoo.build_synthetic, 16 layers x 128 experts, K=8, 1.84 GB, cached under build/bench; phase 1 runs on
its copy repacked by `edge0 convert --layout torch-cpu`, same bytes, unless --layout mlx) has its routing printed first:
degenerate routing would make the I/O figures meaningless. The calibration data is one text file of the bundled
documents whose held-out tail is --heldout-windows windows (the committed run was made when the held-out set scored
was 16,384 tokens whatever --tokens; it is a quarter of --tokens now, or --heldout-tokens). Then, each in a child process in a child memory cgroup
capped at half the checkpoint's bytes (no swap), with the checkpoint dropped from the page cache before it:
  1. mlx_lm.load of the checkpoint (the mlx layout), which should be OOM-killed (its exit status, the cgroup's oom_kill count);
  2. `edge0 train CKPT --phase heads --k 8 --tokens N --steps S --pool-mib P --work W --dst D`, measured from outside: the
     bytes the cgroup read from the checkpoint's disk (blkio on cgroup v1, io.stat on v2) and the child's read blocks,
     the cgroup's peak memory (page cache included) and the sampled peak of its resident anonymous memory against the
     cap, the wall time; beside them the run's own figures from the heads file's metadata (expert bytes read, peak RSS,
     the time split into reads, capture compute and training, states in memory or scratch files) and the per-head
     held-out recall against the reuse and heaviest-experts baselines.
Targets: mlx_lm.load is killed; phase 1 finishes under the cap; bytes read <= 1.5 x the checkpoint.
Writes bench/results/phase1_stream.txt and .json.
"""
import argparse, json, os, shutil, subprocess, sys, threading, time
from pathlib import Path
from edge0.conditions import Cgroup, _own_cgroups, disk_of, evict, memory_cap, read_counter
from edge0.harness import routing_report

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = ('memory.memsw.limit_in_bytes', 'memory.swap.max')

class Meter:
    "A child memory cgroup capped at `cap` bytes that also counts its reads and writes (a blkio group on cgroup v1)"
    def __init__(self, cap:int, model:Path):
        own = _own_cgroups()
        self.v1 = 'memory' in own
        limits = dict(memory_cap(cap), **(read_counter(model) if self.v1 and 'blkio' in own else {}))
        self.cg, self.cap = Cgroup(limits, OPTIONAL, prefix='edge0-phase1'), cap
        self.mem = next(p for p in self.cg.paths if not self.v1 or 'memory' in p.parts)

    def read(self, name:str) -> str: return (self.mem / name).read_text()

    def anon(self) -> int:
        "Resident anonymous memory of the cgroup now (page cache, reclaimable, not counted)"
        st = dict(l.split() for l in self.read('memory.stat').splitlines())
        return int(st['total_rss'] if self.v1 else st['anon'])

    def peak(self) -> int:
        "The cgroup's peak charged memory, page cache included"
        return int(self.read('memory.max_usage_in_bytes' if self.v1 else 'memory.peak'))

    def oom_kills(self) -> int:
        text = self.read('memory.oom_control' if self.v1 else 'memory.events')
        return int(dict(l.split() for l in text.splitlines()).get('oom_kill', 0))

    def run(self, cmd:list, dev:str, log:Path) -> dict:
        "Run `cmd` in the cgroup (output to `log`): exit status, oom kills, bytes moved, peak memory, wall time"
        io0, peak_anon, done = self.cg.io_bytes(dev), [0], threading.Event()
        def sample():
            while not done.wait(0.25):
                try: peak_anon[0] = max(peak_anon[0], self.anon())
                except (OSError, KeyError): pass
        t0 = time.time()
        with open(log, 'w') as f:
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, preexec_fn=self.cg.preexec)
            th = threading.Thread(target=sample, daemon=True)
            th.start()
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.time() - t0
        done.set(); th.join()
        io1 = self.cg.io_bytes(dev)
        return dict(returncode=p.returncode, oom_kills=self.oom_kills(), wall_s=round(wall, 1),
                    read_bytes=io1['read'] - io0['read'], write_bytes=io1['write'] - io0['write'],
                    child_read_blocks_bytes=ru.ru_inblock * 512, child_maxrss=ru.ru_maxrss * 1024,
                    peak_charged=self.peak(), peak_anon=peak_anon[0], cap=self.cap)

    def close(self): self.cg.close()

def build(model:Path, layers:int, hidden:int, expert_size:int) -> int:
    "Build the checkpoint once; its bytes on disk"
    if not (model / 'config.json').exists():
        from edge0.zoo import build_synthetic
        print(f'building {model} ...', flush=True)
        build_synthetic(model, num_layers=layers, num_experts=128, k=8, hidden=hidden, expert_size=expert_size)
    return sum(f.stat().st_size for f in model.glob('*.safetensors'))

def calibration_file(model:Path, path:Path, tokens:int, heldout_windows:int, seq:int=256) -> Path:
    """One text file of the bundled calibration documents (round robin over their sources) whose last 5% (the held-out
    split of a single document) is about `heldout_windows` windows, so the run scores a held-out set of a known size"""
    from itertools import chain, zip_longest
    from edge0.calib import default_documents
    from mlx_lm.utils import load_tokenizer
    tok, by = load_tokenizer(str(model)), {}
    for d in default_documents(): by.setdefault(d.source, []).append(d.text)
    want, parts, n = max(tokens, 20 * heldout_windows * seq) + (heldout_windows + 1) * seq, [], 0
    for text in (t for t in chain(*zip_longest(*by.values())) if t):
        parts.append(text)
        n += len(tok.encode(text))
        if n >= want: break
    path.write_text('\n\n'.join(parts))
    return path

def capped(cap:int, cmd:list, model:Path, log:Path) -> dict:
    "`cmd` in a fresh capped cgroup, the checkpoint dropped from the page cache first"
    evict(model)
    m = Meter(cap, model)
    try: return m.run(cmd, disk_of(model), log)
    finally: m.close()

MiB = 2**20

def report(a, size:int, layer:int, routing:str, load:dict, p1:dict, meta:dict, tail:str) -> str:
    t, recall = json.loads(meta['time']), json.loads(meta['heldout_recall'])
    cap, ckpt, read = load['cap'], int(meta['checkpoint_bytes']), int(meta['expert_bytes_read'])
    ok = lambda b: 'MET' if b else 'NOT MET'
    killed = load['returncode'] in (-9, 137) or load['oom_kills'] > 0
    lines = [f"phase 1 streamed, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs"
             + (f"; NOTE: {a.note}" if a.note else ''),
             f"checkpoint {a.model}: {size / 1e9:.2f} GB on disk ({size / MiB:,.0f} MiB), {len(a.spec.moe_layers)} MoE layers x "
             f"{a.spec.num_experts} experts, K={a.spec.k}, {a.layout} layout; "
             f"largest MoE layer's experts {layer / MiB:.1f} MiB",
             routing, '',
             f"memory cap: {cap / MiB:,.0f} MiB ({cap / size:.2f} x the checkpoint), child memory cgroup, no swap",
             f"1. mlx_lm.load of {load['model']} under the cap: exit status {load['returncode']}, cgroup oom_kill {load['oom_kills']}, "
             f"peak charged {load['peak_charged'] / MiB:,.0f} MiB, after {load['wall_s']:.0f} s: "
             f"{'OOM-killed' if killed else 'NOT killed'}",
             f"2. {' '.join(a.shown)}",
             f"   exit status {p1['returncode']}, cgroup oom_kill {p1['oom_kills']}, wall {p1['wall_s']:.0f} s", '',
             f"{'':38}{'outside (cgroup)':>18}{'run (heads metadata)':>24}",
             f"{'bytes read':38}{p1['read_bytes'] / MiB:>14,.0f} MiB{read / MiB:>20,.0f} MiB",
             f"{'  / checkpoint bytes (target <= 1.5)':38}{p1['read_bytes'] / size:>18.2f}{read / ckpt:>24.2f}",
             f"{'  child read blocks (getrusage)':38}{p1['child_read_blocks_bytes'] / MiB:>14,.0f} MiB",
             f"{'bytes written (v1: not writeback)':38}{p1['write_bytes'] / MiB:>14,.0f} MiB",
             f"{'peak memory, page cache included':38}{p1['peak_charged'] / MiB:>14,.0f} MiB",
             f"{'peak resident anonymous (sampled)':38}{p1['peak_anon'] / MiB:>14,.0f} MiB",
             f"{'peak RSS (child maxrss / run)':38}{p1['child_maxrss'] / MiB:>14,.0f} MiB{int(meta['peak_rss_mib']):>20,} MiB",
             f"{'  / cap':38}{p1['child_maxrss'] / cap:>18.2f}{int(meta['peak_rss_mib']) * MiB / cap:>24.2f}",
             f"{'wall time':38}{p1['wall_s']:>16.0f} s{t['last_run_s']:>22.0f} s",
             f"{'  expert reads':38}{'':18}{t['read_s']:>22.1f} s",
             f"{'  capture compute':38}{'':18}{t['capture_s']:>22.1f} s",
             f"{'  training':38}{'':18}{t['train_s']:>22.1f} s",
             f"pool {meta['pool_mib']} MiB; states in {meta['states']}; {int(meta['train_tokens']):,} training tokens, "
             f"{int(meta['heldout_tokens']):,} held out; kernels {meta['kernels']}", '',
             f"{'head':>8}{'recall':>8}{'reuse':>8}{'heaviest':>10}{'final KL':>10}   recall over reuse",
             *(f"{f'{n}->{int(n) + 1}':>8}{r['head']:>8.3f}{r['reuse']:>8.3f}{r['heaviest']:>10.3f}{r['final_kl']:>10.4f}"
               f"{r['head'] - r['reuse']:>+10.3f}" for n, r in recall.items()), '',
             'targets',
             f"  mlx_lm.load is OOM-killed under the cap: {ok(killed)}",
             f"  phase 1 finishes under the cap: {ok(p1['returncode'] == 0 and p1['oom_kills'] == 0)}",
             f"  bytes read <= 1.5 x the checkpoint (outside): {p1['read_bytes'] / size:.2f} {ok(p1['read_bytes'] <= 1.5 * size)}",
             '', 'the run\'s own closing lines:', tail]
    return '\n'.join(lines)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--model', default=str(ROOT / 'build' / 'bench' / 'qwen3moe-16l'))
    ap.add_argument('--layers', type=int, default=16)
    ap.add_argument('--hidden', type=int, default=1024)
    ap.add_argument('--expert-size', type=int, default=512)
    ap.add_argument('--tokens', type=int, default=8192, help='calibration tokens (5%% of them held out)')
    ap.add_argument('--steps', type=int, default=40, help='training steps per head')
    ap.add_argument('--heldout-windows', type=int, default=6, help='held-out windows of 256 tokens (about)')
    ap.add_argument('--layout', choices=('mlx', 'torch-cpu'), default='torch-cpu',
                    help="the experts' layout (edge0 convert): torch's int4 CPU kernel captures about 2x faster here")
    ap.add_argument('--pool-mib', type=float, default=256)
    ap.add_argument('--cap-mib', type=float, help='the memory cap (default: half the checkpoint)')
    ap.add_argument('--scratch', default=str(ROOT / 'build' / 'phase1-stream'))
    ap.add_argument('--note', default='', help='a line for the results (e.g. another job shared the CPU)')
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'phase1_stream'))
    a = ap.parse_args()
    model, scratch = Path(a.model), Path(a.scratch)
    size = build(model, a.layers, a.hidden, a.expert_size)
    a.mlx_model = model  # mlx_lm.load reads the layout mlx-lm writes
    if a.layout != 'mlx':
        src, model = model, model.with_name(f"{model.name}-{a.layout}")
        if not (model / 'config.json').exists():
            from edge0.convert import convert
            print(f'converting {src} to {model} ...', flush=True)
            convert(src, model, layout=a.layout)
        size = sum(f.stat().st_size for f in model.glob('*.safetensors'))
        a.model = str(model)
    from edge0.heads import layer_bytes
    from edge0.store import ExpertStore, read_header
    st = ExpertStore(model, residency=False)
    layer, a.spec = layer_bytes(st), st.spec; st.close()
    print(f"checkpoint {model}: {size / 1e9:.2f} GB; largest MoE layer's experts {layer / MiB:.1f} MiB", flush=True)
    routing = routing_report(model)
    print(routing, flush=True)
    cap = int(a.cap_mib * MiB) if a.cap_mib else size // 2
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    print(f"\nmemory cap {cap / MiB:,.0f} MiB: mlx_lm.load ...", flush=True)
    code = f"import mlx.core as mx, mlx_lm; m, _ = mlx_lm.load({str(a.mlx_model)!r}); mx.eval(m.parameters()); print('loaded')"
    load = capped(cap, [sys.executable, '-c', code], a.mlx_model, scratch / 'mlx_lm_load.log')
    load['model'] = str(a.mlx_model)
    print(f"  exit status {load['returncode']}, oom_kill {load['oom_kills']}", flush=True)
    dst = scratch / 'heads'
    data = calibration_file(model, model.parent / f"{model.name}-calibration.txt", a.tokens, a.heldout_windows)
    args = [str(model), '--phase', '1', '--k', '8', '--tokens', str(a.tokens), '--steps', str(a.steps), '--data', str(data),
            '--pool-mib', f"{a.pool_mib:g}", '--work', str(scratch / 'work'), '--dst', str(dst)]
    a.shown = ['edge0', 'train', *args]
    print(f"phase 1 under the cap: {' '.join(a.shown)} ...", flush=True)
    log = scratch / 'phase1.log'
    p1 = capped(cap, [str(Path(sys.executable).parent / 'edge0'), 'train', *args], model, log)
    heads = sorted(dst.glob('*.safetensors'), key=lambda p: p.stat().st_mtime)
    if p1['returncode'] or not heads:
        sys.exit(f"phase 1 failed under the cap: {json.dumps(p1)}\n{log.read_text()[-3000:]}")
    meta = read_header(heads[-1])[1]
    lines = log.read_text().replace('\r', '\n').splitlines()
    tail = '\n'.join(lines[max(i for i, l in enumerate(lines) if ' heads at K=' in l):])  # the closing table
    text = report(a, size, layer, routing, load, p1, meta, tail)
    print('\n' + text)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out + '.txt').write_text(text + '\n')
    Path(a.out + '.json').write_text(json.dumps(dict(model=str(model), checkpoint_bytes=size, layer_bytes=layer, cap=cap,
                                                     command=a.shown, routing=routing, mlx_lm_load=load, phase1=p1,
                                                     heads=str(heads[-1]), metadata=meta, note=a.note), indent=1))

if __name__ == '__main__': main()
