"""Phase 1 on a zoo checkpoint of every supported family, then `edge0 generate --mode routing` with its heads, then phase 3.

    python bench/phase1_families.py                    # every family of edge0.zoo (about 45 s each)
    python bench/phase1_families.py --families qwen3_next deepseek_v3
    python bench/phase1_families.py --families llama4 --merge   # these rows replaced, the others kept

Each family's checkpoint is `edge0.zoo.build_tiny` with 4 layers (the DeepSeek, GLM and Ling families' first layer is
dense, so they have 3 MoE layers and one head; the others 4 and two) and unit-RMS embedding rows (`embed_rms=1.0`: drawn
like every other matrix, three families route degenerately, each token nearly as the last); its routing statistics are
printed first; trained by `edge0 train DIR --phase heads` on the
bundled calibration set, then served by `edge0 generate --mode routing --stats`. Per family: the heads' held-out
recall against the temporal-locality baseline, and the decoder's host syncs per step and dropped experts.
Then phase 3 (`edge0.distil.distil`, the recovery LoRA for routing at native K) on a few short windows for 2 steps, and
the adapter served by a `Session` in routing mode: a smoke run of the whole recipe on each family, not a quality figure.
Targets: 0 dropped, 1.0 host syncs per step, every head's recall above its baseline, phase 3 trained and served (on
DeepSeek-V4.1 too, whose layers hand on hyper-connection streams beside the hidden state: phase 3 carries them as
phase 1 does).
Writes bench/results/phase1_families.txt and .json.
"""
import argparse, json, os, re, subprocess, sys, tempfile, time
from pathlib import Path
from edge0.routing_stats import checkpoint_routing, format_routing
from edge0.store import read_header
from edge0.zoo import FAMILIES, build_tiny

ROOT = Path(__file__).resolve().parent.parent
EDGE0 = [sys.executable, '-m', 'edge0']
PROMPTS = ('The expert weights stay on the disk', 'Once upon a time there was a little model',
           'The quick brown fox jumps over the lazy dog')

def family(name:str, root:Path, tokens:int, steps:int) -> dict:
    d = build_tiny(name, root / name, num_layers=4, overwrite=True, embed_rms=1.0)
    routing = format_routing(checkpoint_routing(d, 256), name)  # first: degenerate routing would make the test moot
    print(routing, flush=True)
    env = dict(os.environ, EDGE0_HOME=str(root / 'home'))
    train = subprocess.run([*EDGE0, 'train', str(d), '--phase', '1', '--tokens', str(tokens), '--steps', str(steps)],
                           capture_output=True, text=True, env=env)
    if train.returncode:
        last = train.stderr.strip().splitlines()[-1]
        # a model whose layers hand on more than one hidden state: refused in one line, by design
        if train.returncode == 2 and 'cannot carry that state' in last: return dict(family=name, routing=routing, refused=last)
        return dict(family=name, routing=routing, error=last)
    heads = d / 'prerouter.safetensors'
    recall = {int(n): r for n, r in json.loads(read_header(heads)[1]['heldout_recall']).items()}
    for prompt in PROMPTS:  # a random model may end its text at once: then the next prompt
        gen = subprocess.run([*EDGE0, 'generate', '-m', str(d), '-p', prompt, '--ignore-chat-template',
                              '--max-tokens', '24', '--mode', 'routing', '--stats'],
                             capture_output=True, text=True, env=env)
        if gen.returncode: return dict(family=name, error=gen.stderr.strip().splitlines()[-1])
        line = next((l for l in gen.stdout.splitlines() if l.startswith('mode routing')), None)
        if line is None: return dict(family=name, error="generate --stats printed no 'mode routing' line")
        if not re.search(r': 0 steps,', line): break
    syncs = float(re.search(r'([\d.]+) host syncs/step', line).group(1))
    dropped = int(re.search(r'(\d+) dropped', line).group(1))
    note = next((l for l in gen.stderr.splitlines() if 'prerouter heads:' in l), '')
    return dict(family=name, routing=routing, heads=recall, syncs_per_step=syncs, dropped=dropped, decoder=line, prompt=prompt,
                heads_note=note.strip(), phase3=phase3(d, root / f'{name}-work'))

def phase3(d:Path, work:Path) -> dict:
    "A short phase 3 on `d` (its heads trained): the adapter's steps, and a routing-mode generation serving it"
    from edge0.distil import distil
    from edge0.lora import read_adapter
    from edge0.serving import Serving
    from edge0.session import Session
    try:
        out = distil(d, Serving('routing'), work=work, show=False, windows=4, prompt=16, gen=8, steps=2, batch=2,
                     warmup=1, top=8)
        with Session(d, mode='routing') as s:
            text = s.generate('The expert weights', max_tokens=8, chat=False)
            served = s.adapter is not None
    except Exception as e:
        # a pass that keeps one hidden state refuses a model whose layers hand on more, in one line
        if 'keeps one hidden state' in str(e): return dict(refused=str(e))
        return dict(error=f"{type(e).__name__}: {e}")
    return dict(adapter=out.name, steps=int(read_adapter(out)[1]['steps']), served=served, text=text)

def _phase3(p) -> str:
    if not p: return 'not run'
    if 'error' in p: return f"FAILED: {p['error']}"
    if 'refused' in p: return f"refused: {p['refused']}"
    return f"{p['steps']} steps, {'served' if p['served'] else 'NOT served'}"

def report(rows:list) -> str:
    lines = [f"{'family':>19}{'heads':>6}{'recall':>8}{'reuse':>7}{'heaviest':>9}  {'all > reuse':<12}"
             f"{'syncs/step':>10}{'dropped':>8}  phase 3"]
    for r in rows:
        if 'refused' in r:
            lines.append(f"{r['family']:>19}  phase 1 refused: {r['refused']}")
            continue
        if 'error' in r:
            lines.append(f"{r['family']:>19}  FAILED: {r['error']}")
            continue
        h = r['heads'].values()
        mean = lambda key: sum(x[key] for x in h) / len(h)
        lines.append(f"{r['family']:>19}{len(h):>6}{mean('head'):>8.3f}{mean('reuse'):>7.3f}{mean('heaviest'):>9.3f}  "
                     f"{str(all(x['head'] > x['reuse'] for x in h)):<12}{r['syncs_per_step']:>10.2f}{r['dropped']:>8}  "
                     + _phase3(r.get('phase3')))
    ok = [r for r in rows if 'error' not in r and 'refused' not in r and r['dropped'] == 0 and r['syncs_per_step'] == 1.0
          and all(x['head'] > x['reuse'] for x in r['heads'].values())
          and (r.get('phase3', {}).get('served') or 'refused' in r.get('phase3', {}))]
    refused = [r['family'] for r in rows if 'refused' in r]
    refused3 = [r['family'] for r in rows if 'refused' in r.get('phase3', {})]
    lines.append(f"{len(ok)} of {len(rows)} families: 0 dropped, 1.0 host syncs/step, every head above its baseline, "
                 "phase 3 trained and served or refused in one line"
                 + (f"; phase 1 refused in one line for {', '.join(refused)}" if refused else '')
                 + (f"; phase 3 refused in one line for {', '.join(refused3)}" if refused3 else ''))
    if rows and 'heads_note' in rows[0]: lines.append(f"generate said, e.g.: {rows[0]['heads_note']}")
    return '\n'.join(lines)

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--families', nargs='+', default=FAMILIES, choices=FAMILIES)
    ap.add_argument('--tokens', type=int, default=8192)
    ap.add_argument('--steps', type=int, default=300)
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'phase1_families'))
    ap.add_argument('--merge', action='store_true',
                    help="replace these families' rows in the results at --out and keep the others' (each row names its run)")
    a = ap.parse_args()
    run = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for name in a.families:
            rows.append(dict(family(name, Path(tmp), a.tokens, a.steps), run=run))
            print(report(rows[-1:]).splitlines()[1], flush=True)
    if a.merge and Path(a.out + '.json').exists():
        kept = {r['family']: r for r in json.loads(Path(a.out + '.json').read_text())}
        rows = [{**kept, **{r['family']: r for r in rows}}[f] for f in FAMILIES
                if f in kept or f in a.families]
    runs = {}
    for r in rows: runs.setdefault(f"the run of {r['run']}" if 'run' in r else 'an earlier, undated run', []).append(r['family'])
    text = '\n'.join([f"phase 1 on every family (4-layer zoo checkpoints, {a.tokens:,} calibration tokens, {a.steps} steps)",
                      *(r['routing'] for r in rows), report(rows),
                      *(f"from {when}: {', '.join(fams)}" for when, fams in runs.items())])
    print(text)
    Path(a.out + '.txt').write_text(text + '\n')
    Path(a.out + '.json').write_text(json.dumps(rows, indent=1))
    sys.exit(0 if all('refused' in r or ('error' not in r and r['dropped'] == 0
                                         and (r['phase3'].get('served') or 'refused' in r['phase3']))
                      for r in rows) else 1)
