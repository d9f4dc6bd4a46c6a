"""The bundled teachers' heads retrained through the layer-wise streamed path, against the committed ones.

    python bench/phase1_teachers.py                      # edge0-tiny K=8, K=4; edge0-tiny-ds K=4, K=2 (about 25 min)
    python bench/phase1_teachers.py --only edge0-tiny-ds:2 --corpus ../shared/data/corpus

Each run copies the committed int4 base (without its heads and adapters) to build/phase1-teachers, trains its heads by
the teacher's own recipe (`edge0.phase1.train_prerouter`: 120,000 corpus tokens, 1,500 steps) through `train_heads`,
and compares the held-out recall of every head with the committed file's provenance. Target: within 0.02 per head.
The committed heads were trained by the first recipe (resident capture, all heads in one loop with one optimizer and one
generator); the captures are bit-identical (04c_phase1), the optimizer and batches are per head now.
Writes bench/results/phase1_teachers.txt and .json.
"""
import argparse, json, shutil, sys, time
from pathlib import Path
from edge0.files import teacher_path
from edge0.phase1 import train_prerouter
from edge0.prerouter import prerouter_file
from edge0.store import model_spec, read_header

ROOT = Path(__file__).resolve().parent.parent
RUNS = ('edge0-tiny:8', 'edge0-tiny:4', 'edge0-tiny-ds:4', 'edge0-tiny-ds:2')

def recall_of(path) -> dict:
    return {int(n): r for n, r in json.loads(read_header(path)[1]['heldout_recall']).items()}

def compare(name:str, k:int, corpus, work:Path) -> dict:
    committed = teacher_path(name) / prerouter_file(model_spec(teacher_path(name)), k)
    base = work / f"{name}-k{k}-int4"
    shutil.rmtree(base, ignore_errors=True)
    shutil.copytree(teacher_path(name), base, ignore=shutil.ignore_patterns('prerouter*', 'lora*'))
    t0 = time.time()
    out = train_prerouter(name, corpus, work, k, base)
    new, old = recall_of(out), recall_of(committed)
    meta = read_header(out)[1]
    return dict(teacher=name, k=k, seconds=round(time.time() - t0), time=json.loads(meta['time']),
                heads={n: dict(committed=old[n]['head'], retrained=new[n]['head'], reuse=new[n]['reuse'],
                               heaviest=new[n]['heaviest'], diff=new[n]['head'] - old[n]['head']) for n in old})

def report(results:list) -> str:
    lines = ["Held-out top-K recall of each head: committed (first recipe) vs retrained through train_heads",
             f"{'teacher':>14}{'K':>3}{'head':>7}{'committed':>11}{'retrained':>11}{'diff':>8}{'reuse':>8}"
             f"{'heaviest':>10}  within 0.02"]
    for r in results:
        for n, h in r['heads'].items():
            lines.append(f"{r['teacher']:>14}{r['k']:>3}{f'{n}->{n + 1}':>7}{h['committed']:>11.4f}{h['retrained']:>11.4f}"
                         f"{h['diff']:>+8.4f}{h['reuse']:>8.4f}{h['heaviest']:>10.4f}  {abs(h['diff']) <= 0.02}")
        t = r['time']
        lines.append(f"{'':>14}   time: capture {t['capture_s']:.0f} s, reads {t['read_s']:.1f} s, "
                     f"training {t['train_s']:.0f} s")
    worst = max(abs(h['diff']) for r in results for h in r['heads'].values())
    lines.append(f"largest difference {worst:.4f}: {'every head within 0.02' if worst <= 0.02 else 'OVER 0.02'}")
    return '\n'.join(lines)

if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--only', nargs='+', default=RUNS, help='teacher:K runs')
    ap.add_argument('--corpus', default=str(ROOT.parent / 'shared' / 'data' / 'corpus'))
    ap.add_argument('--work', default=str(ROOT / 'build' / 'phase1-teachers'))
    ap.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'phase1_teachers'))
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    results = [compare(run.split(':')[0], int(run.split(':')[1]), a.corpus, work) for run in a.only]
    text = report(results)
    print(text)
    Path(a.out + '.txt').write_text(text + '\n')
    Path(a.out + '.json').write_text(json.dumps(results, indent=1))
    sys.exit(0 if all(abs(h['diff']) <= 0.02 for r in results for h in r['heads'].values()) else 1)
