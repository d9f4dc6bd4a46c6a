"""First-token time of a long system prompt, cold against restored from the prompt caches on disk (issue 49).

    python bench/prompt_cache.py MODEL [--tokens 1000] [--rounds 3] [--mode routing --k 4]

A server (`edge0 serve`, which opens one `Session` with `prompt_cache` set) answers two questions after one system
prompt, about `--tokens` tokens of the bundled held-out text, and restarts. Then it gets the first request again
(`repeated`) and a third question after the same system prompt (`new question`). Cold: a session without caches on
disk prefills the whole prompt. Restored: a fresh session (the restarted server) on the `$EDGE0_HOME` the first server
wrote reads the longest stored prefix and feeds the rest (the repeated request: its last token; a new question: what
follows the system prompt). Each figure is the time from the
request to its first token (the model already loaded, one short request served first in each session, as a running
server has), the median of `--rounds`; before each restored request the file is dropped from the page cache, as after
a reboot. The ratio's target is 5x or more on a model whose prefill is what a restart costs; on a bundled tiny model
the script only shows that it runs. The first server's two replies also give what a reply's end waits for after its last
piece (handing the snapshot to the folder's writer) and how long the writer's thread then takes to write the file, which
the reply used to wait for.
"""
import argparse, os, shutil, statistics, sys, tempfile, time
from pathlib import Path

def system_prompt(s, tokens:int) -> str:
    "About `tokens` tokens of the bundled held-out text, cut at a token"
    from edge0.files import heldout_excerpt
    text = '\n\n'.join(heldout_excerpt().values())[:tokens * 16]  # more than enough: a token is a few chars
    return s.tokenizer.decode(s.tokenizer.encode(text)[:tokens])

def first_token(s, messages:list) -> float:
    "Seconds from the request to its first token"
    t0 = time.perf_counter()
    s.generate(messages, 1)
    return time.perf_counter() - t0

def reply_tail(s, messages:list) -> tuple:
    "Seconds from a reply's last piece to its end, and then until its prompt's file is written"
    for piece in s.stream(s.prompt_ids(messages), 1):
        if piece.finish_reason: t0 = time.perf_counter()
    t1 = time.perf_counter()
    s.disk.flush()
    return t1 - t0, time.perf_counter() - t1

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('model', help='model directory, bundled model (edge0-tiny) or Hugging Face repo id')
    p.add_argument('--tokens', type=int, default=1000, help='system prompt tokens (default 1000)')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--mode', help='decode mode (default: the model\'s own routing)')
    p.add_argument('--k', type=int, help='experts per token')
    a = p.parse_args(argv)
    os.environ['EDGE0_HOME'] = tempfile.mkdtemp(prefix='edge0-prompt-cache-')  # nothing stored yet
    from edge0.memory import MiB
    from edge0.session import Session
    from edge0.store import drop_cache
    kw = {k: v for k, v in dict(mode=a.mode, k=a.k).items() if v is not None}
    warm = [dict(role='user', content='Hello.')]
    questions = ('What is this text about?', 'Who is named in it?', 'Where does it take place?')
    with Session(a.model, **kw) as s:
        system = dict(role='system', content=system_prompt(s, a.tokens))
        asks = {name: [system, dict(role='user', content=q)]
                for name, q in zip(('repeated', 'second', 'new question'), questions)}
        s.generate(warm, 1)
        cold = []
        for _ in range(a.rounds):
            s.reset()  # nothing of the request in memory
            cold.append(first_token(s, asks['repeated']))
        n = len(s.prompt_ids(asks['repeated']))
    with Session(a.model, prompt_cache=4096 * MiB, **kw) as s:  # the first server
        tails = [reply_tail(s, asks[name]) for name in ('repeated', 'second')]
    first = Path(os.environ['EDGE0_HOME'])
    files = sorted(first.rglob('*.safetensors'))
    c = statistics.median(cold)
    print(f"model {a.model}: a prompt of {n} tokens; {len(files)} cache files, "
          f"{sum(f.stat().st_size for f in files) / MiB:.1f} MiB")
    for name, (tail, write) in zip(('repeated', 'second'), tails):
        print(f"a reply's end after its last piece ({name}): {tail * 1000:.1f} ms; its file written on the "
              f"writer's thread in {write * 1000:.1f} ms more")
    print(f"first token, cold (prefilled):           {c * 1000:9.1f} ms (median of {a.rounds})")
    for name in ('repeated', 'new question'):
        restored, reused = [], set()
        for i in range(a.rounds):
            # each round restarts on what the first server left (a round stores its own prompt)
            home = first.with_name(f"{first.name}-{name.replace(' ', '-')}-{i}")
            shutil.copytree(first, home)
            os.environ['EDGE0_HOME'] = str(home)
            with Session(a.model, prompt_cache=4096 * MiB, **kw) as s:  # restarted
                s.generate(warm, 1, keep=False)
                for f in home.rglob('*.safetensors'): drop_cache(f)
                restored.append(first_token(s, asks[name]))
                reused.add(s.last['reused_tokens'])
        r = statistics.median(restored)
        print(f"first token, restored, {name + ':':13} {r * 1000:9.1f} ms (median of {a.rounds}; "
              f"{sorted(reused)} tokens from disk) | ratio {c / r:.1f}x (target >= 5x)")
    for d in first.parent.glob(f"{first.name}*"): shutil.rmtree(d)

if __name__ == '__main__': sys.exit(main())
