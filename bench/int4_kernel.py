"""What a decode step's int4 expert products could cost with a kernel of edge0's own: torch's `_weight_int4pack_mm_for_cpu`
(what the torch step calls, one call an expert and projection) against bench/int4_kernel.c (the int8 dot products
llama.cpp's Q4_0 x Q8_0 uses, on MLX's own affine int4 layout, every routed expert of a layer in one call), on the same
weights, from one run.

    python bench/int4_kernel.py               # both expert shapes, 5 rounds; writes bench/results/int4_kernel.*
    python bench/int4_kernel.py --rounds 9

The C kernel (x86-64 with AVX2; AVX512-VNNI where the CPU has it) is built here with the system's C compiler (-O3
-march=native, OpenMP: torch's own runtime, loaded first), into build/int4_kernel. It is a measurement, not part of edge0: the torch step does not call it.

Shapes: the decode table's Qwen3-MoE synthetic (hidden 1024, expert FFN 512) and Qwen3-30B-A3B's (hidden 2048, expert FFN
768). For each, 8 layers of 64 random experts (each nibble uniform, scales and biases random; more bytes than any cache),
written both ways from the same values (torch's packing with its zero points set to MLX's biases plus 8 scales, so the two
dequantize to the same matrix). Per decode layer, 8 experts drawn at random: gate-and-up of the one input row, then down of
one row per expert. Arms alternate within each round; figures are medians over rounds of microseconds an expert
(gate-and-up plus down) and the rate its bytes were read at. Error: each product's largest deviation from the float64
product of the dequantized matrix, over that product's largest magnitude (torch rounds the input to bfloat16, the kernel
to int8 per group of 64).
"""
import argparse, ctypes, hashlib, json, os, platform, shutil, statistics, subprocess, sys, time
from pathlib import Path
import numpy as np
import torch  # first: the kernel's OpenMP calls resolve to torch's libgomp (one thread pool)

ROOT = Path(__file__).resolve().parent.parent
SRC = Path(__file__).with_suffix('.c')
SHAPES = {'qwen3moe-16l (hidden 1024, FFN 512)': (1024, 512), 'Qwen3-30B-A3B (hidden 2048, FFN 768)': (2048, 768)}
LAYERS, EXPERTS, K_ROUTED, GROUP = 8, 64, 8, 64
_INT4 = torch.ops.aten._weight_int4pack_mm_for_cpu
P = ctypes.c_void_p


def build(out:Path) -> ctypes.CDLL:
    "The kernel compiled for this CPU (cached by source and compiler), or exit 1 saying what is missing"
    cc = shutil.which(os.environ.get('CC', 'cc'))
    if cc is None: sys.exit("int4_kernel: no C compiler (cc or $CC) on PATH: install gcc or clang")
    key = hashlib.sha1(SRC.read_bytes() + cc.encode() + platform.machine().encode()).hexdigest()[:12]
    so = out / f'int4_kernel-{key}.so'
    if not so.exists():
        out.mkdir(parents=True, exist_ok=True)
        tmp = so.with_suffix('.tmp')
        r = subprocess.run([cc, '-O3', '-march=native', '-fopenmp', '-shared', '-fPIC', str(SRC), '-o', str(tmp)],
                           capture_output=True, text=True)
        if r.returncode: sys.exit(f"int4_kernel: {cc} could not build {SRC.name}: {r.stderr.strip().splitlines()[-1]}")
        tmp.replace(so)
    lib = ctypes.CDLL(str(so))
    lib.q4_prep.argtypes = [P, ctypes.c_int, P, P, P]
    lib.q4_experts.argtypes = [P, P, P, P, ctypes.c_int, ctypes.c_int, ctypes.c_int, P, P, P, ctypes.c_int, P]
    return lib


class Layer:
    "`EXPERTS` random experts of one projection (N out, K in), in MLX's layout and torch's packing of the same values"
    def __init__(self, rng, N:int, K:int):
        q = rng.integers(0, 16, (EXPERTS, N, K), dtype=np.uint8)
        s = torch.from_numpy(rng.uniform(0.002, 0.02, (EXPERTS, N, K // GROUP)).astype(np.float32)).to(torch.bfloat16)
        b = torch.from_numpy(rng.normal(0, 0.02, (EXPERTS, N, K // GROUP)).astype(np.float32)).to(torch.bfloat16)
        self.N, self.K, self.s, self.b = N, K, s, b
        words = q.reshape(EXPERTS, N, K // 8, 8).astype(np.uint32) << (4 * np.arange(8, dtype=np.uint32))
        self.w = np.ascontiguousarray(np.bitwise_or.reduce(words, -1))
        self.s16, self.b16 = s.view(torch.int16).numpy(), b.view(torch.int16).numpy()
        # torch: w = (q - 8) * scale + zero, so zero = bias + 8 * scale
        sz = torch.stack([s, (b.float() + 8 * s.float()).to(torch.bfloat16)], -1).transpose(1, 2).contiguous()
        self.torch = [(torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.from_numpy(q[e].astype(np.int32)), 1),
                       sz[e]) for e in range(EXPERTS)]
        self.q = q[:2]  # kept for the error check

    def dense(self, e:int) -> np.ndarray:
        "Expert `e` (of the first two) dequantized, float64"
        s, b = self.s[e].double().numpy(), self.b[e].double().numpy()
        return (self.q[e].reshape(self.N, -1, GROUP) * s[..., None] + b[..., None]).reshape(self.N, self.K)


def prep(lib, x:np.ndarray) -> tuple:
    "Rows `x` (R, K) float32 quantized for the kernel"
    R, K = x.shape
    xq, dx, xs = np.empty((R, K), np.int8), np.empty((R, K // GROUP), np.float32), np.empty((R, K // GROUP), np.float32)
    for r in range(R): lib.q4_prep(x[r].ctypes.data, K, xq[r].ctypes.data, dx[r].ctypes.data, xs[r].ctypes.data)
    return xq, dx, xs


def kernel(lib, L:Layer, ids:np.ndarray, x:np.ndarray) -> np.ndarray:
    "(len(ids), N): the kernel's products of experts `ids` of `L`, on x (1, K) or one row an expert"
    xq, dx, xs = prep(lib, x)
    y = np.empty((len(ids), L.N), np.float32)
    lib.q4_experts(L.w.ctypes.data, L.s16.ctypes.data, L.b16.ctypes.data, ids.ctypes.data, len(ids), L.N, L.K,
                   xq.ctypes.data, dx.ctypes.data, xs.ctypes.data, int(len(x) > 1), y.ctypes.data)
    return y


def by_torch(L:Layer, ids:np.ndarray, x:torch.Tensor) -> torch.Tensor:
    "The torch step's way: one kernel call an expert"
    xb = x.to(torch.bfloat16)
    return torch.cat([_INT4(xb[i if len(xb) > 1 else 0][None], L.torch[e][0], GROUP, L.torch[e][1])
                      for i, e in enumerate(ids.tolist())])


def errors(lib, gu:Layer, rng) -> dict:
    "Largest relative deviation of each way from the float64 product, over a few inputs and the first two experts"
    out = {'torch': 0.0, 'kernel': 0.0}
    for _ in range(4):
        x = rng.normal(0, 1, (1, gu.K)).astype(np.float32)
        for e in (0, 1):
            ref = gu.dense(e) @ x[0].astype(np.float64)
            t = by_torch(gu, np.array([e], np.int32), torch.from_numpy(x)).float().numpy()[0]
            k = kernel(lib, gu, np.array([e], np.int32), x)[0]
            scale = np.abs(ref).max()
            out['torch'] = max(out['torch'], float(np.abs(t - ref).max() / scale))
            out['kernel'] = max(out['kernel'], float(np.abs(k - ref).max() / scale))
    return out


def nbytes(L:Layer) -> int:
    "What one expert's product of `L` reads: packed values, bfloat16 scales and biases"
    return L.N * L.K // 2 + 2 * 2 * L.N * L.K // GROUP


def measure(lib, hidden:int, ffn:int, rounds:int, tokens:int, seed:int=0) -> dict:
    "Both arms on one shape, alternating within each round"
    rng = np.random.default_rng(seed)
    gus, dns = [Layer(rng, 2 * ffn, hidden) for _ in range(LAYERS)], [Layer(rng, hidden, ffn) for _ in range(LAYERS)]
    err = errors(lib, gus[0], rng)
    x = rng.normal(0, 1, (1, hidden)).astype(np.float32)
    act = rng.normal(0, 1, (K_ROUTED, ffn)).astype(np.float32)
    xt, actt = torch.from_numpy(x), torch.from_numpy(act)
    def torch_arm(plan):
        for ids in plan:
            for gu, dn, e in zip(gus, dns, ids): by_torch(gu, e, xt); by_torch(dn, e, actt)
    def kernel_arm(plan):
        for ids in plan:
            for gu, dn, e in zip(gus, dns, ids): kernel(lib, gu, e, x); kernel(lib, dn, e, act)
    arms, times = {'torch int4 (one call a product)': torch_arm, 'kernel (one call a layer)': kernel_arm}, {}
    for r in range(rounds + 1):  # round 0 warms up, uncounted
        plan = [[rng.choice(EXPERTS, K_ROUTED, replace=False).astype(np.int32) for _ in range(LAYERS)]
                for _ in range(tokens)]
        for name, arm in arms.items():
            t0 = time.perf_counter(); arm(plan); dt = time.perf_counter() - t0
            if r: times.setdefault(name, []).append(dt / (tokens * LAYERS * K_ROUTED) * 1e6)
    per = nbytes(gus[0]) + nbytes(dns[0])  # gate-and-up and down
    one = np.zeros(1, np.int32)
    cached = {'torch int4 (one call a product)': lambda: by_torch(gus[0], one, xt),
              'kernel (one call a layer)': lambda: kernel(lib, gus[0], one, x)}
    return {'hidden': hidden, 'ffn': ffn, 'expert_bytes': per, 'gate_up_bytes': nbytes(gus[0]), 'error': err, 'cached_us': {n: best_us(f) for n, f in cached.items()},
            'us': {n: statistics.median(v) for n, v in times.items()}, 'rounds': times,
            'gbps': {n: per / statistics.median(v) / 1e3 for n, v in times.items()}}


def best_us(f, n:int=200, rounds:int=5) -> float:
    "Microseconds a call of `f`, best of `rounds` runs of `n` (its weights stay in cache)"
    f()
    best = float('inf')
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n): f()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def stream_gbps() -> float:
    "GB/s torch's threads read here: the sum of a 512 MiB float32 array, best of 3"
    a = torch.ones(2**27)
    a.sum()
    best = float('inf')
    for _ in range(3):
        t0 = time.perf_counter(); a.sum(); best = min(best, time.perf_counter() - t0)
    return a.numel() * 4 / best / 1e9


def cpu() -> str:
    "This CPU's model name and the instruction sets the kernel can use"
    info = Path('/proc/cpuinfo').read_text() if Path('/proc/cpuinfo').exists() else ''
    name = next((l.split(':', 1)[1].strip() for l in info.splitlines() if l.startswith('model name')), platform.processor())
    flags = set(next((l.split(':', 1)[1].split() for l in info.splitlines() if l.startswith('flags')), []))
    return f"{name}; avx2 {'avx2' in flags}, avx512_vnni {'avx512_vnni' in flags}; {os.cpu_count()} cores"


def report(res:dict) -> list:
    lines = [f"int4 expert products, one input row: torch's kernel against bench/int4_kernel.c, {res['date']}",
             f"  CPU: {res['cpu']}; torch {res['torch']}, {res['threads']} threads; medians of {res['rounds_n']} "
             f"alternating rounds of {res['tokens']} tokens x {LAYERS} layers x {K_ROUTED} experts; torch's threads "
             f"stream {res['stream_gbps']:.1f} GB/s (a sum)", '']
    for name, r in res['shapes'].items():
        gu = r['gate_up_bytes']
        lines.append(f"  {name}: {r['expert_bytes'] / 2**20:.2f} MiB an expert (gate-and-up and down); a gate-and-up "
                     f"product of {gu / 2**20:.2f} MiB with its weights in cache: torch "
                     f"{r['cached_us']['torch int4 (one call a product)']:.1f} us, kernel "
                     f"{r['cached_us']['kernel (one call a layer)']:.1f} us; reading it at the stream rate: "
                     f"{gu / res['stream_gbps'] / 1e3:.1f} us")
        for arm, us in r['us'].items():
            lines.append(f"    {arm:32} {us:7.1f} us an expert  {r['gbps'][arm]:5.1f} GB/s")
        t, k = r['us'].values()
        lines.append(f"    kernel / torch: {k / t:.2f}x the time; largest relative error: torch "
                     f"{r['error']['torch']:.4f} (bfloat16 input), kernel {r['error']['kernel']:.4f} (int8 input)")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--tokens', type=int, default=20, help='decode tokens a round (each: every layer, 8 experts)')
    ap.add_argument('--out', type=Path, default=ROOT / 'bench' / 'results' / 'int4_kernel')
    a = ap.parse_args()
    if a.rounds < 1 or a.tokens < 1: ap.error('--rounds and --tokens must be at least 1')
    lib = build(ROOT / 'build' / 'int4_kernel')
    res = {'date': time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), 'cpu': cpu(), 'torch': torch.__version__,
           'threads': torch.get_num_threads(), 'rounds_n': a.rounds, 'tokens': a.tokens, 'shapes': {}}
    res['stream_gbps'] = stream_gbps()
    print(f"CPU: {res['cpu']}", flush=True)
    for name, (hidden, ffn) in SHAPES.items():
        print(f"measuring {name} ...", flush=True)
        res['shapes'][name] = measure(lib, hidden, ffn, a.rounds, a.tokens)
    text = '\n'.join(report(res))
    print(text)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix('.json').write_text(json.dumps(res, indent=1))
    a.out.with_suffix('.txt').write_text(text + '\n')


if __name__ == '__main__': main()
