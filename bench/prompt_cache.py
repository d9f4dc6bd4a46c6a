"""First-token time of a long system prompt, cold against restored from the prompt caches on disk (issue 49).

    python bench/prompt_cache.py MODEL [--tokens 1000] [--rounds 3] [--mode routing --k 4]

A server that restarts (`edge0 serve`, which opens one `Session` with `prompt_cache` set) gets a request whose
system prompt, about `--tokens` tokens of the bundled held-out text, it answered before it restarted. Cold: a session
without caches on disk prefills the whole prompt. Restored: a fresh session (the restarted server) on an `$EDGE0_HOME`
holding the file the first server wrote reads it and feeds the prompt's last token. Each figure is the time from the
request to its first token (the model already loaded, one short request served first in each session, as a running
server has), the median of `--rounds`; before each restored request the file is dropped from the page cache, as after
a reboot. The ratio's target is 5x or more on a model whose prefill is what a restart costs; on a bundled tiny model
the script only shows that it runs.
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
    with Session(a.model, **kw) as s:
        request = [dict(role='system', content=system_prompt(s, a.tokens)),
                   dict(role='user', content='What is this text about?')]
        s.generate(warm, 1)
        cold = []
        for _ in range(a.rounds):
            s.reset()  # nothing of the request in memory
            cold.append(first_token(s, request))
        n = len(s.prompt_ids(request))
    with Session(a.model, prompt_cache=4096 * MiB, **kw) as s: s.generate(request, 1)  # the first server
    files = sorted(Path(os.environ['EDGE0_HOME']).rglob('*.safetensors'))
    restored, reused = [], set()
    for _ in range(a.rounds):
        with Session(a.model, prompt_cache=4096 * MiB, **kw) as s:  # restarted
            s.generate(warm, 1, keep=False)
            for f in files: drop_cache(f)
            restored.append(first_token(s, request))
            reused.add(s.last['reused_tokens'])
    c, r = statistics.median(cold), statistics.median(restored)
    print(f"model {a.model}: a system prompt of {n} tokens; cache file {sum(f.stat().st_size for f in files) / MiB:.1f} "
          f"MiB; {sorted(reused)} tokens read from disk")
    print(f"first token, cold (prefilled):        {c * 1000:9.1f} ms (median of {a.rounds})")
    print(f"first token, restored after restart:  {r * 1000:9.1f} ms (median of {a.rounds})")
    print(f"ratio: {c / r:.1f}x (target >= 5x)")
    shutil.rmtree(os.environ['EDGE0_HOME'])

if __name__ == '__main__': sys.exit(main())
