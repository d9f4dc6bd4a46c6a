"""Q4_0 GGUFs of int4 mlx-lm Qwen3.5-MoE and DeepSeek-V3 checkpoints for llama.cpp, by llama.cpp's
own converter, and a check that llama.cpp computes the same model as edge0.

    python bench/gguf_families.py MLX_DIR OUT.gguf   # a qwen3_5_moe or deepseek_v3 one to Q4_0
    python bench/gguf_families.py --check            # small synthetics: round trip, agreement

The route is ../shared/tools/llama_anchor.sh's: int4 mlx -> a Hugging Face bf16 directory -> the
vendored convert_hf_to_gguf.py -> llama-quantize Q4_0. edge0.gguf.write_q4_0 writes Qwen3-MoE
tensors itself; these two families carry what only llama.cpp's converter knows how to lay out
(Qwen3.5's gated-delta tensors reordered for ggml's broadcast, its multimodal rope sections;
DeepSeek's MLA split into k_b/v_b and its group-routing metadata), so the GGUF is left to it and
this file writes only the Hugging Face layout, which is the inverse of mlx-lm's `sanitize`:

- Qwen3.5 (mlx_lm/models/qwen3_5_moe.py, qwen3_5.py): `language_model.model.` back to
  `model.language_model.`, the stacked gate and up experts joined as `experts.gate_up_proj` (E, 2F,
  D) and `experts.down_proj`, the RMSNorms that add 1 (input/post-attention, final, q/k norms)
  stored less 1, conv1d weights (C, K, 1) back to (C, 1, K).
- DeepSeek-V3 (deepseek_v3.py): experts unstacked to `experts.{e}.{proj}`, and `kv_b_proj` rebuilt
  from `embed_q` (H, kv_lora_rank, qk_nope, the key half transposed) and `unembed_out` (H, v_head,
  kv_lora_rank).

`--check` proves the inverse by running mlx-lm's own `sanitize` on what it wrote and comparing with
the checkpoint, then gives llama.cpp (llama-completion, greedy) and edge0's torch step the same
prompts (the ids llama.cpp tokenized) and counts how often their first greedy token agrees (teacher-
forced top-1 over the prompts) and how many tokens they share before diverging. Q4_0 is not mlx's
int4 g64 and random weights have small logit margins, so they are not all equal; a wrong norm shift
or rope layout drops agreement to chance (1 in the vocabulary, 1/512: Qwen3.5's norms written
without their shift gave 0%). A control sizes what rounding alone does: mlx-lm's model in float32
with its matrices rounded as ggml rounds Q4_0, against the torch step and against llama.cpp.
"""
import argparse, json, re, shutil, subprocess, sys, tempfile
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LLAMA = ROOT / 'build' / 'llama'
SRC = 'llama_cpp_python-0.3.36/vendor/llama.cpp'
ARCHS = dict(qwen3_5_moe='Qwen3_5MoeForConditionalGeneration', deepseek_v3='DeepseekV3ForCausalLM')
# Qwen3.5's RMSNorms that multiply by 1 + w; mlx-lm stores w + 1
SHIFTED = ('.input_layernorm.weight', '.post_attention_layernorm.weight', 'model.norm.weight',
           '.q_norm.weight', '.k_norm.weight')


def dequantized(src:Path, config:dict) -> dict:
    "Every tensor of the mlx checkpoint `src` in float32 (lazy mx arrays), dequantized"
    import mlx.core as mx
    q = config.get('quantization') or {}
    out = {}
    for f in sorted(src.glob('model*.safetensors')):
        w = mx.load(str(f))
        for k, v in w.items():
            if k.endswith(('.scales', '.biases')) and k.rsplit('.', 1)[0] + '.weight' in w: continue
            base = k.rsplit('.', 1)[0]
            if k.endswith('.weight') and base + '.scales' in w:
                qq = q.get(base) if isinstance(q.get(base), dict) else q
                v = mx.dequantize(v, w[base + '.scales'], w[base + '.biases'],
                                  group_size=qq['group_size'], bits=qq['bits'])
            out[k] = v.astype(mx.float32)
    return out


def qwen35_hf(w:dict, config:dict) -> dict:
    "Qwen3.5-MoE's mlx-lm weights `w` in its Hugging Face layout"
    import mlx.core as mx
    out = {}
    for key, v in w.items():
        k = key.replace('language_model.model.', 'model.language_model.')
        k = k.replace('language_model.lm_head', 'lm_head')
        if '.switch_mlp.' in k:
            pre, proj = k.split('.switch_mlp.')[0], k.split('.switch_mlp.')[1].split('.')[0]
            if proj == 'down_proj': out[f'{pre}.experts.down_proj'] = v
            if proj == 'gate_proj':  # (E, F, D) twice -> (E, 2F, D), gate first
                up = w[key.replace('gate_proj', 'up_proj')]
                out[f'{pre}.experts.gate_up_proj'] = mx.concatenate([v, up], 1)
            continue
        if 'conv1d.weight' in k: v = v.moveaxis(2, 1)  # (C, K, 1) -> (C, 1, K)
        if v.ndim == 1 and k.endswith(SHIFTED): v = v - 1.0
        out[k] = v
    return out


def deepseek_hf(w:dict, config:dict) -> dict:
    "DeepSeek-V3's mlx-lm weights `w` in its Hugging Face layout"
    import mlx.core as mx
    out = {}
    for k, v in w.items():
        if '.switch_mlp.' in k:
            pre, proj = k.split('.switch_mlp.')[0], k.split('.switch_mlp.')[1].split('.')[0]
            for e in range(v.shape[0]): out[f'{pre}.experts.{e}.{proj}.weight'] = v[e]
        elif k.endswith('.embed_q.weight'):
            wv = w[k.replace('embed_q', 'unembed_out')]
            # (H, qk_nope + v_head, kv_lora_rank)
            kv = mx.concatenate([v.swapaxes(-1, -2), wv], axis=1)
            out[k.replace('embed_q', 'kv_b_proj')] = kv.reshape(-1, kv.shape[-1])
        elif not k.endswith('.unembed_out.weight'): out[k] = v
    return out


def write_hf(src:Path, dst:Path):
    "The int4 mlx-lm checkpoint `src` as a Hugging Face bf16 directory `dst`"
    import mlx.core as mx
    config = json.loads((src / 'config.json').read_text())
    mt = config['model_type']
    if mt not in ARCHS: sys.exit(f"{src}: model_type {mt!r}, expected one of {', '.join(ARCHS)}")
    hf = (qwen35_hf if mt == 'qwen3_5_moe' else deepseek_hf)(dequantized(src, config), config)
    dst.mkdir(parents=True, exist_ok=True)
    drop = ('quantization', 'quantization_config', 'edge0_provenance')
    cfg = {k: v for k, v in config.items() if k not in drop}
    cfg['architectures'] = [ARCHS[mt]]
    (dst / 'config.json').write_text(json.dumps(cfg, indent=1))
    for f in ('tokenizer.json', 'tokenizer_config.json'): shutil.copy(src / f, dst / f)
    names, shard = sorted(hf), {}
    for i in range(0, len(names), 64):  # 64 tensors a shard; mx.load is lazy: a few GB in memory
        part = {n: hf.pop(n).astype(mx.bfloat16) for n in names[i:i + 64]}
        name = f'model-{i // 64:05d}.safetensors'
        mx.save_safetensors(str(dst / name), part, metadata=dict(format='pt'))
        shard.update(dict.fromkeys(part, name))
        del part
    index = dict(metadata={}, weight_map=shard)
    (dst / 'model.safetensors.index.json').write_text(json.dumps(index))


CONVERT = r'''
import sys, runpy
sys.path[:0] = ["gguf-py", "."]
import conversion.base as b
# edge0's BPE pre-tokenizer is unknown to the converter: gpt-2's, as llama_anchor.sh maps it
for name in dir(b):
    cls = getattr(b, name)
    if isinstance(cls, type) and "get_vocab_base_pre" in cls.__dict__:
        orig = cls.__dict__["get_vocab_base_pre"]
        def patched(self, tokenizer, orig=orig):
            try: return orig(self, tokenizer)
            except NotImplementedError: return "gpt-2"
        cls.get_vocab_base_pre = patched; break
hf, out = sys.argv[1], sys.argv[2]
sys.argv = ["convert_hf_to_gguf.py", hf, "--outtype", "bf16", "--outfile", out, *sys.argv[3:]]
runpy.run_path("convert_hf_to_gguf.py", run_name="__main__")
'''


def q4_0_gguf(src:Path, out:Path, llama:Path=LLAMA, quiet:bool=True) -> Path:
    "`src` (int4 mlx-lm, qwen3_5_moe or deepseek_v3) as the Q4_0 GGUF `out`, intermediates removed"
    if not (llama / SRC / 'convert_hf_to_gguf.py').exists():
        sys.exit(f"{llama / SRC} is missing: build llama.cpp with "
                 f"../shared/tools/llama_anchor.sh {llama}")
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=out.stem + '-') as tmp:
        hf, bf16 = Path(tmp) / 'hf', Path(tmp) / 'bf16.gguf'
        write_hf(src, hf)
        mt = json.loads((src / 'config.json').read_text())['model_type']
        # Qwen3.5's converter expects MTP layers unless told
        no_mtp = ['--no-mtp'] if mt == 'qwen3_5_moe' else []
        r = subprocess.run([sys.executable, '-', str(hf), str(bf16), *no_mtp], input=CONVERT,
                           text=True, cwd=llama / SRC, capture_output=quiet)
        if r.returncode:
            sys.exit(f"convert_hf_to_gguf.py failed on {hf}: {(r.stderr or '')[-2000:]}")
        quantize = llama / 'bin' / 'llama-quantize'
        r = subprocess.run([str(quantize), str(bf16), str(out) + '.part', 'Q4_0'],
                           capture_output=True, text=True)
        if r.returncode: sys.exit(f"llama-quantize failed on {bf16}: {r.stderr[-2000:]}")
        Path(str(out) + '.part').rename(out)
    return out


def round_trip(src:Path) -> float:
    "Largest difference between `src`'s weights and mlx-lm's `sanitize` of their HF layout"
    import mlx.core as mx
    from mlx_lm.utils import load_model
    config = json.loads((src / 'config.json').read_text())
    w = dequantized(src, config)
    hf = (qwen35_hf if config['model_type'] == 'qwen3_5_moe' else deepseek_hf)(w, config)
    model, _ = load_model(src, lazy=True)
    back = model.sanitize({k: v.astype(mx.bfloat16) for k, v in hf.items()})
    if set(back) != set(w): sys.exit(f"round trip: keys differ: {sorted(set(back) ^ set(w))[:6]}")
    return max(float(mx.abs(back[k].astype(mx.float32) - w[k]).max()) for k in w)


def llama_greedy(bench_bin:Path, gguf:Path, prompt:str, n:int) -> tuple:
    "`(prompt ids as llama.cpp tokenized them, its greedy continuation as bytes)`"
    cmd = [str(bench_bin.parent / 'llama-completion'), '-m', str(gguf), '-p', prompt, '-n', str(n),
           '--temp', '0', '-t', '2', '-c', '512', '-no-cnv', '--no-repack', '--ignore-eos',
           '--simple-io', '--no-warmup', '--verbose-prompt', '-sp', '--no-display-prompt']
    for _ in range(5):  # this build sometimes stops mid-generation, exit 0, before its timings
        r = subprocess.run(cmd, capture_output=True, timeout=600)
        if r.returncode or b'total time' in r.stderr: break
    if r.returncode or b'total time' not in r.stderr:
        sys.exit(f"llama-completion failed: {r.stderr.decode(errors='replace')[-1500:]}")
    ids = [int(m) for m in re.findall(rb' I +(\d+) -> ', r.stderr)]
    return ids, r.stdout


def token_bytes(tokenizer_json:Path, vocab:int) -> dict:
    "`{id: bytes}` of a byte-level BPE tokenizer; ids past it as llama.cpp's converter names them"
    # GPT-2's byte-to-character table: printable bytes stand for themselves, the rest from U+0100 on
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    back = {chr(b): b for b in keep}
    back.update({chr(256 + i): b for i, b in enumerate(b for b in range(256) if b not in keep)})
    t = json.loads(tokenizer_json.read_text())
    out = {i: f'[PAD{i}]'.encode() for i in range(vocab)}
    out.update({i: bytes(back[c] for c in s) for s, i in t['model']['vocab'].items()})
    out.update({a['id']: a['content'].encode() for a in t.get('added_tokens', [])})
    return out


def q4_0_rounded(w:np.ndarray) -> np.ndarray:
    "`w` (float32, last axis a multiple of 32) rounded as ggml's Q4_0: blocks of 32, fp16 scales"
    b = w.reshape(*w.shape[:-1], -1, 32)
    # the signed value of largest magnitude
    top = np.take_along_axis(b, np.abs(b).argmax(-1)[..., None], -1)
    d = top / -8  # ggml scales by 1/d, then stores d in fp16
    q = np.minimum(np.floor(b * np.divide(1, d, out=np.zeros_like(d), where=d != 0) + 8.5), 15)
    return ((q - 8) * d.astype(np.float16).astype(np.float32)).reshape(w.shape)


def q4_0_model(src:Path):
    """mlx-lm's model of `src` in float32 with its matrices rounded as Q4_0 (the output head, which
    llama-quantize keeps at 6 bits, left as it is): llama.cpp's weights, in mlx-lm's arithmetic"""
    import mlx.core as mx, mlx_lm
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.utils import dequantize_model
    model = dequantize_model(mlx_lm.load(str(src))[0])
    rounded = lambda n, v: v.ndim >= 2 and v.shape[-1] % 32 == 0 and 'lm_head' not in n
    new = [(n, mx.array(q4_0_rounded(np.array(v.astype(mx.float32)))) if rounded(n, v)
            else v.astype(mx.float32)) for n, v in tree_flatten(model.parameters())]
    model.update(tree_unflatten(new))
    return model


def agreement(src:Path, gguf:Path, bench_bin:Path, prompts:int=24, n:int=8) -> dict:
    "llama.cpp's greedy tokens against edge0's torch step's (and a Q4_0 control's) on `prompts`"
    from edge0 import decode, torchstep
    from edge0.convert import convert
    from edge0.streaming import StreamOptions
    packed = src.with_name(src.name + '-torch-cpu')  # converted again: `src` may have been rebuilt
    convert(src, packed, layout='torch-cpu', overwrite=(packed / 'config.json').exists())
    h = decode.load(packed, 'off', options=StreamOptions(kernels='torch'), hold=True)
    config = json.loads((src / 'config.json').read_text())
    vocab = (config.get('text_config') or config)['vocab_size']
    st, tb = torchstep.TorchStep(h), token_bytes(src / 'tokenizer.json', vocab)
    words = ("the expert weights stay on the disk and only the experts a token uses are read a "
             "small head predicts the next layer routing one token ahead").split()
    import mlx.core as mx
    q4 = q4_0_model(src)
    rng = np.random.default_rng(0)
    first, shared, control, llama_control, firsts = [], [], [], [], []
    for _ in range(prompts):
        ids, text = llama_greedy(bench_bin, gguf, ' '.join(rng.choice(words, 6)), n)
        ours = [t for t, _ in decode.generate_ids(st, ids, n)]
        same = 0
        while same < n and text.startswith(b''.join(tb[t] for t in ours[:same + 1])): same += 1
        first.append(same > 0)
        firsts.append(ours[0])
        shared.append(same)
        q = int(mx.argmax(q4(mx.array(ids)[None])[0, -1]).item())
        control.append(q == ours[0])
        llama_control.append(text.startswith(tb[q]))
    return dict(first=float(np.mean(first)), shared=float(np.mean(shared)), prompts=prompts,
                tokens=n, control=float(np.mean(control)), distinct=len(set(firsts)),
                llama_control=float(np.mean(llama_control)))


def check(work:Path, llama:Path, families:list):
    from edge0.zoo import build_synthetic
    for mt in families:
        src = build_synthetic(work / mt, num_layers=4, num_experts=32, k=4, hidden=256,
                              expert_size=128, routing='calibrated', model_type=mt,
                              overwrite=True)
        print(f"{mt}: mlx-lm's sanitize of the Hugging Face layout is the checkpoint to within "
              f"{round_trip(src):.2g} (bf16)", flush=True)
        gguf = q4_0_gguf(src, work / f'{mt}-Q4_0.gguf', llama)
        a = agreement(src, gguf, llama / 'bin' / 'llama-bench')
        print(f"{mt}: llama.cpp (Q4_0) and edge0's torch step (int4 g64) pick the same first "
              f"greedy token after {a['first']:.0%} of {a['prompts']} prompts ({a['distinct']} "
              f"distinct tokens among edge0's; chance 1/512) and "
              f"share {a['shared']:.1f} of {a['tokens']} greedy tokens before diverging",
              flush=True)
        print(f"{mt}: the control, mlx-lm's model in float32 with its matrices rounded as Q4_0: "
              f"its first token is the torch step's after {a['control']:.0%} of the prompts "
              f"(Q4_0's rounding alone) and llama.cpp's after {a['llama_control']:.0%} (the same "
              f"rounded weights: the rest is llama.cpp's arithmetic, its activations rounded to 8 "
              f"bits for Q4_0 products among it, or a model that differs)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('src', nargs='?')
    ap.add_argument('out', nargs='?')
    ap.add_argument('--llama', default=str(LLAMA),
                    help='where llama.cpp is built (llama_anchor.sh WORK)')
    ap.add_argument('--check', action='store_true',
                    help='small synthetics of both families: round trip, agreement')
    ap.add_argument('--families', default=','.join(ARCHS), help='for --check')
    ap.add_argument('--work', default=str(ROOT / 'build' / 'bench' / 'gguf-check'))
    a = ap.parse_args()
    if a.check:
        Path(a.work).mkdir(parents=True, exist_ok=True)
        return check(Path(a.work), Path(a.llama), a.families.split(','))
    if not (a.src and a.out): ap.error('give MLX_DIR and OUT.gguf, or --check')
    print(q4_0_gguf(Path(a.src), Path(a.out), Path(a.llama), quiet=False))


if __name__ == '__main__': main()
