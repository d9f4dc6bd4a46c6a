"""Every command of README.md as a newcomer runs it (issue 49): the lines of its `sh` blocks and its `python` blocks,
read from README.md itself (a later README edit is tested without editing this file), run in order in a temporary
directory (`/tmp/...` paths rewritten into it) with `$EDGE0_HOME` there too. Each must exit 0 and keep what its comment
promises where that is checkable. The few lines that cannot run here as written are in `INSTEAD`, each with its reason
and what runs in its place; nothing is skipped silently. The slow ones run on the smallest model that shows them."""
import json, os, queue, re, shutil, signal, socket, subprocess, sys, threading, time, warnings
from pathlib import Path
from types import SimpleNamespace
import pytest
from edge0.files import teacher_path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / 'README.md'
BIN = Path(sys.executable).parent
HF_REPO = 'mlx-community/Qwen3-30B-A3B-4bit'
FEW = ' --tokens 4096 --steps 50'  # heads: 4,096 tokens and 50 steps a head (the recipe's 65,536 and 1,000: ~170 s)

def has(module): return __import__('importlib').util.find_spec(module) is not None

# README lines that cannot run here as written: (the line's start, why, what runs instead: a function of the line,
# its /tmp/ already rewritten to {tmp}, or None: not run). A function returns the line itself where its reason does
# not hold here.
INSTEAD = [
    ('make test', "runs every notebook and this whole suite (this test among them): ~30 min", None),
    ('make demo', "its setup creates .venv and installs from PyPI (no network here): the demo's own commands run "
     "in this environment, its setup taken as done",
     lambda c: f"make -C {ROOT} -o .venv/.edge0-installed demo BIN={BIN}"),
    ('python -m venv', "creates a venv and installs from PyPI (no network here): this environment is what it makes",
     None),
    ('pip install', "installs from PyPI (no network here): this environment is what it installs", None),
    ('edge0 serve', "port 8080 may be taken on a shared machine: a free port, given to the client block too",
     lambda c: f"{c} --port {{port}}"),
    (f'edge0 train {HF_REPO} --phase heads', "a Hugging Face repo id (no network) and a 30B model: the same command "
     "on the zoo model, with fewer tokens and steps", lambda c: c.replace(HF_REPO, '{tmp}/tiny') + FEW),
    ('edge0 train {tmp}/tiny --phase heads --data', "placeholder data: a text folder and a JSONL of chats the test "
     "writes; fewer tokens and steps", lambda c: c + FEW),
    (f'edge0 train {HF_REPO} --phase distil', "a Hugging Face repo id (no network) and a 30B model: the same command "
     "on the zoo model (its heads just trained), 4 steps", lambda c: c.replace(HF_REPO, '{tmp}/tiny') + ' --steps 4'),
    ('edge0 convert BF16_MODEL', "a placeholder; edge0 zoo writes int4 only: the bf16 teacher edge0-tiny a clone has",
     lambda c: c.replace('BF16_MODEL', str(teacher_path('edge0-tiny', int4=False)))),
    ('edge0 bench', "slow (60-90 s on 2 cores): one round of 8 forced steps an arm (3 of 32 as written); --tier "
     "makes child cgroups, which needs root: without it where not root",
     lambda c: (c if os.geteuid() == 0 else re.sub(r' --tier \S+', '', c)) + ' --rounds 1 --tokens 8'),
    ('python -m edge0.lmeval', "TASKS is a placeholder and the harness's tasks download their data: one local "
     "two-question task", lambda c: c.replace('--tasks TASKS', '--tasks readme_mc --include_path {tmp}/tasks')),
    ('from openai import OpenAI', "the server's free port in place of 8080 (see edge0 serve)",
     lambda c: c.replace(':8080/', ':{port}/')),
]
# what a line needs that may be missing here: (the line's start, the check, why it does not run without it)
NEEDS = [('python -m edge0.lmeval', lambda: has('lm_eval'), "lm-evaluation-harness (the eval extra) is not installed"),
         ('from openai import OpenAI', lambda: has('openai'), "the openai client (the dev extra) is not installed"),
         ('make demo', lambda: shutil.which('make'), "make is not installed")]

def text(out:str) -> str:
    "What `edge0 generate` wrote, less its summary lines"
    return re.sub(r'(?m)^(adapter|streamed|resident): .*\n?', '', out)

def config(d) -> dict: return json.loads((Path(d) / 'config.json').read_text())

def serves(run, model:str, torch_step:bool=False):
    "`edge0 generate` serves `model` (and, with `torch_step`, each step in torch)"
    r = run(f'edge0 generate -m {model} -p "Once upon a time" --max-tokens 8')
    assert r.returncode == 0 and text(r.stdout).strip(), r.stderr[-2000:]
    assert not torch_step or 'each step runs in torch' in r.stderr, r.stderr[-2000:]
    return True

def int4_per_layer(r, t) -> bool:
    "BF16_MODEL quantized int4 g64, its experts one file per layer, and served"
    d = t.tmp / 'model-int4'
    q = config(d)['quantization']
    return ((q['bits'], q['group_size']) == (4, 64) and (d / 'model-experts-L000.safetensors').is_file()
            and serves(t.run, d))

# what a line promises in its comment, checked where that is checkable: (a part of the line, the check)
PROMISES = [
    ('edge0 --version', lambda r, t: r.stdout.strip() == f"edge0 {__import__('edge0').__version__}"),
    ('--mode routing --k 4 --stats', lambda r, t: all(w in r.stdout + r.stderr for w in
                                                      ('0 dropped', 'expert memory budget', '(auto)'))),
    ('--verbose False', lambda r, t: r.stdout.strip() and 'streamed:' not in r.stdout + r.stderr),
    ('--record-trace {tmp}/t.json', lambda r, t: (t.tmp / 't.json').is_file()),
    ('--trace {tmp}/t.json', lambda r, t: text(r.stdout) == text(t.out['--record-trace {tmp}/t.json'].stdout)),
    ('edge0 chat', lambda r, t: r.stdout.strip()),
    ('edge0 zoo qwen3_moe', lambda r, t: (lambda c: (c['model_type'], c['num_hidden_layers'], c['quantization']['bits'])
                                          == ('qwen3_moe', 4, 4))(config(t.tmp / 'tiny'))),
    ('edge0 spec', lambda r, t: re.search(r'model_type\s+qwen3_moe\n', r.stdout) and
                                re.search(r'layers\s+4 \(4 MoE\)', r.stdout)),
    ('--resident', lambda r, t: 'resident:' in r.stdout),
    ('--phase heads --k 4', lambda r, t: (t.tmp / 'tiny' / 'prerouter.safetensors').is_file()),
    ('--phase heads --data', lambda r, t: '4,096 training tokens' in r.stdout),
    ('--phase distil', lambda r, t: (t.tmp / 'tiny' / 'lora-k4.safetensors').is_file()),
    ('--layout torch-cpu', lambda r, t: serves(t.run, t.tmp / 'tiny-torch', has('torch'))),
    ('edge0 convert BF16_MODEL', int4_per_layer),
    ('edge0 bench', lambda r, t: 'routing/K4' in r.stdout and (os.geteuid() != 0 or
                                                               '== tier usb' in r.stdout)),
    ('edge0 plan edge0-tiny', lambda r, t: 'compute: measured' in r.stdout and re.search(r'(?m)^routing ', r.stdout)),
    ('--device edge-8gb-emmc', lambda r, t: 'eMMC' in r.stdout),
    ('python -m edge0.lmeval', lambda r, t: 'readme_mc' in r.stdout and 'acc' in r.stdout),
    ('make demo', lambda r, t: '0 dropped' in r.stdout),
    ('from openai import OpenAI', lambda r, t: 'CompletionUsage(' in r.stdout),
    ('from edge0.session import Session', lambda r, t: "'dropped': 0," in r.stdout),
]

def split_comment(line:str) -> tuple:
    "`(command, comment)` of an sh line: cut at its first `#` outside quotes at a word's start"
    quote = None
    for i, ch in enumerate(line):
        if quote: quote = None if ch == quote else quote
        elif ch in '\'"': quote = ch
        elif ch == '#' and (i == 0 or line[i - 1].isspace()): return line[:i].strip(), line[i + 1:].strip()
    return line.strip(), ''

def readme_steps(readme:str) -> list:
    """The README's commands in order: `['sh', line, comment]` for each line of an sh block (a comment line joins the
    command above it) and `['python', code, shown]` for each python block, `shown` the plain block right after it"""
    blocks = re.findall(r'(?ms)^```(\w*)\n(.*?)^```$', readme)
    steps = []
    for i, (lang, body) in enumerate(blocks):
        if lang == 'sh':
            for line in body.splitlines():
                cmd, comment = split_comment(line)
                if cmd: steps.append(['sh', cmd.replace('/tmp/', '{tmp}/'), comment])
                elif comment and steps: steps[-1][2] += ' ' + comment
        elif lang == 'python':
            after = blocks[i + 1] if i + 1 < len(blocks) else ('-', '')
            steps.append(['python', body, after[1] if after[0] == '' else None])
    return steps

def test_readme_steps_are_read_from_the_blocks():
    readme = ("x\n```sh\nedge0 a -p 'b # c'   # says\n#   (more)\nedge0 d /tmp/e\n```\n```python\nprint(1)\n```\n"
              "```\n1\n```\n```python\nx = 2\n```\n")
    assert readme_steps(readme) == [['sh', "edge0 a -p 'b # c'", 'says (more)'], ['sh', 'edge0 d {tmp}/e', ''],
                                    ['python', 'print(1)\n', '1\n'], ['python', 'x = 2\n', None]]
    assert split_comment('printf \'def add(a, b):\\n\' | edge0 x  # code') == ("printf 'def add(a, b):\\n' | edge0 x",
                                                                               'code')

def test_each_entry_of_the_tables_names_one_readme_line():
    "A README edit that leaves an entry naming no line fails here at once; each substitution changes its line"
    lines = [s[1] for s in readme_steps(README.read_text())]
    stale = ([e[0] for e in INSTEAD + NEEDS if not any(l.startswith(e[0]) for l in lines)] +
             [e[0] for e in PROMISES if not any(e[0] in l for l in lines)])
    assert not stale, f"entries of this test that name no README line (was the README edited?): {stale}"
    for key, why, instead in INSTEAD:
        line = next(l for l in lines if l.startswith(key))
        assert first(INSTEAD, line)[0] == key  # one entry a line
        assert why and (instead is None or instead(line) != line), key

def first(table:list, line:str):
    "The entry of `table` whose key starts `line` (`INSTEAD`, `NEEDS`) or is in it (`PROMISES`), or None"
    hits = [e for e in table if (line.startswith(e[0]) if table is not PROMISES else e[0] in line)]
    assert len(hits) <= 1, (line, hits)
    return hits[0] if hits else None

def write_inputs(tmp:Path):
    "What the README's placeholders stand for: a folder of notes, a JSONL of chats, a local lm-eval task"
    (tmp / 'notes').mkdir()
    (tmp / 'notes' / 'river.txt').write_text("The river runs past the old mill and under the city wall.\n" * 200)
    (tmp / 'notes' / 'garden.md').write_text("# Garden\nHerbs grow beside the house; the bees come in June.\n" * 200)
    chats = [dict(messages=[dict(role='user', content=f"What is {i} plus {i}?"),
                            dict(role='assistant', content=f"{i} plus {i} is {2 * i}.")]) for i in range(100)]
    (tmp / 'chats.jsonl').write_text(''.join(json.dumps(c) + '\n' for c in chats))
    (tmp / 'tasks').mkdir()
    docs = [dict(question="The history of the", choices=["city", "banana"], answer=0),
            dict(question="The capital of France is", choices=["Paris", "the"], answer=0)]
    (tmp / 'tasks' / 'readme_mc.jsonl').write_text(''.join(json.dumps(d) + '\n' for d in docs))
    files = dict(data_files=dict(test=str(tmp / 'tasks' / 'readme_mc.jsonl')), cache_dir=str(tmp / 'tasks' / 'hf'))
    task = dict(task='readme_mc', dataset_path='json', test_split='test', dataset_kwargs=files,
                output_type='multiple_choice', doc_to_text='{{question}}', doc_to_choice='{{choices}}',
                doc_to_target='{{answer}}', metric_list=[dict(metric='acc')])
    (tmp / 'tasks' / 'readme_mc.yaml').write_text(json.dumps(task))  # JSON is YAML

def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]

class Serving:
    "`edge0 serve` started in the background, its 'serving ... at URL' line awaited; stopped by SIGTERM"
    def __init__(self, cmd, **kw):
        self.p = subprocess.Popen(['bash', '-c', 'exec ' + cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, **kw)
        self.lines, self.err = queue.Queue(), []
        threading.Thread(target=lambda: [self.lines.put(l) for l in self.p.stderr], daemon=True).start()
    def wait_ready(self, timeout=120) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.p.poll() is None:
            try: self.err.append(self.lines.get(timeout=0.5))
            except queue.Empty: continue
            if ' at http://' in self.err[-1]: return self.err[-1]
        raise AssertionError(f"edge0 serve did not start: {''.join(self.err)[-2000:]}")
    def stop(self) -> int:
        self.p.send_signal(signal.SIGTERM)  # as a service manager stops it
        return self.p.wait(timeout=30)

# the python blocks but the client's run in one interpreter, in order, as a reader runs them one after another
RUNNER = """import sys, time
ns = dict(__name__='__main__')
for path in sys.argv[1:]:
    print(f'\\0{time.monotonic()}', flush=True)
    exec(compile(open(path).read(), path, 'exec'), ns)
print(f'\\0{time.monotonic()}', flush=True)
"""

def test_every_readme_command_runs_as_written(tmp_path):
    "Each README command in order, as written or as `INSTEAD` says; every failure is reported, with each one's seconds"
    steps = readme_steps(README.read_text())
    tmp, port = tmp_path, free_port()
    write_inputs(tmp)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", EDGE0_HOME=str(tmp / 'home'),
               HF_HOME=str(tmp / 'hf'), HF_HUB_OFFLINE='1', HF_DATASETS_OFFLINE='1')
    env.pop('EDGE0_CACHE', None)  # measurements go to $EDGE0_HOME, as on a fresh machine
    fill = lambda c: c.replace('{tmp}', str(tmp)).replace('{port}', str(port))
    def run(cmd, stdin=None):
        return subprocess.run(['bash', '-o', 'pipefail', '-c', fill(cmd)], cwd=tmp, env=env, input=stdin,
                              capture_output=True, text=True, timeout=300)
    def plan(line):
        "`(what runs or None, how)`"
        sub, need = first(INSTEAD, line), first(NEEDS, line)
        if need and not need[1](): return None, f"not run: {need[2]}"
        if sub and sub[2] is None: return None, f"not run: {sub[1]}"
        cmd = sub[2](line) if sub else line
        return cmd, 'as written' if cmd == line else f"instead: {sub[1]}"
    t = SimpleNamespace(tmp=tmp, run=run, out={})  # what a promise sees: `out`, the results by PROMISES key
    def check(line, r, note):
        assert r.returncode == 0, f"exit {r.returncode}: {(r.stderr or r.stdout)[-2000:]}"
        promise = first(PROMISES, line)
        if promise: t.out[promise[0]] = r
        assert not promise or promise[1](r, t), f"not what its comment promises ({note}): {r.stdout[-1500:]}"
    clients = [s[1] for s in steps if s[0] == 'python' and 'base_url=' in s[1]]
    report, failures, library = [], [], []
    for kind, line, note in steps:
        cmd, how = plan(line)
        if cmd is None or (kind == 'python' and line in clients):
            report.append((line, None, how if cmd is None else 'ran against edge0 serve above'))
            if cmd is None and first(NEEDS, line): warnings.warn(f"README command not run: {line} ({how})")
            continue
        if kind == 'python':
            library.append((line, note, how))
            continue
        start = time.monotonic()
        try:
            if line.startswith('edge0 serve'):
                server = Serving(fill(cmd), cwd=tmp, env=env)
                try:
                    assert f"http://127.0.0.1:{port}/v1" in server.wait_ready()
                    for c in clients:  # the README's own client block, as a reader saves and runs it
                        code, how_c = plan(c)
                        if code is None: continue
                        (tmp / 'client.py').write_text(fill(code))
                        check(c, run('python client.py'), 'the reply and its usage')
                finally: rc = server.stop()
                r = subprocess.CompletedProcess(cmd, rc, '', ''.join(server.err))
            else: r = run(cmd, 'Hello\n/quit\n' if line.startswith('edge0 chat') else None)
            check(line, r, note)
        except (AssertionError, subprocess.TimeoutExpired) as e: failures.append(f"{line}\n    {e}")
        report.append((line, time.monotonic() - start, how))
    failures += run_library(library, tmp, env, fill, report)
    print('\n'.join(f"{'' if s is None else f'{s:6.1f} s'}\t{l.splitlines()[0][:100]}\t{h}" for l, s, h in report))
    assert not failures, '\n'.join(failures)

def run_library(library:list, tmp:Path, env:dict, fill, report:list) -> list:
    """The python blocks in one interpreter, in order; a block the README shows output for must print exactly that,
    a block in `PROMISES` what its comments promise"""
    paths = []
    for i, (code, _, _) in enumerate(library):
        paths.append(tmp / f'block{i}.py')
        paths[-1].write_text(fill(code))
    (tmp / 'runner.py').write_text(RUNNER)
    r = subprocess.run([sys.executable, 'runner.py', *map(str, paths)], cwd=tmp, env=env, capture_output=True,
                       text=True, timeout=300)
    parts = r.stdout.split('\0')[1:]
    failures = []
    for i, (code, shown, how) in enumerate(library):
        head = code.splitlines()[0]
        if i + 1 >= len(parts):
            failures.append(f"{head}\n    exit {r.returncode}: {r.stderr[-2000:]}")
            report.append((code, None, 'failed' if i + 1 == len(parts) else 'not reached'))
            continue
        (t0, out), t1 = parts[i].split('\n', 1), parts[i + 1].split('\n', 1)[0]
        promise = first(PROMISES, code)
        if shown is not None and out != shown:
            failures.append(f"{head}\n    printed {out!r}, the README shows {shown!r}")
        elif promise and not promise[1](subprocess.CompletedProcess(code, 0, out, ''), None):
            failures.append(f"{head}\n    not what its comments promise: {out[-1500:]}")
        report.append((code, float(t1) - float(t0), how))
    return failures
