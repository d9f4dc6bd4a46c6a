"""The expert budget as users meet it: `--pool-mib auto` under a real memory cgroup (the limit is found and named, a run
that cannot hold a token's experts is refused at load in one line), `--stats` showing each number, and the thrash
watch speaking once through a session. The cgroup tests need root and a memory controller, as `edge0 bench --cap-mb`
does; elsewhere they skip."""
import logging, os, re, subprocess, sys
import pytest
from edge0.conditions import Cgroup, CgroupError, memory_cap

MiB = 2**20
NO_SWAP = ('memory.memsw.limit_in_bytes', 'memory.swap.max')

def capped(cap_mib, cmd, timeout=180):
    "Run `cmd` in a child memory cgroup of `cap_mib` MiB without swap"
    try: cg = Cgroup(memory_cap(int(cap_mib * MiB)), optional=NO_SWAP)
    except CgroupError as e: pytest.skip(str(e))
    try: return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=timeout,
                               preexec_fn=cg.preexec)
    finally: cg.close()

@pytest.fixture(scope='module')
def footprint(edge0_cmd) -> int:
    """MiB `edge0 generate` holds after loading edge0-tiny on this machine (about 300 on 2 cores: the interpreter, MLX,
    torch and transformers; more where their builds or the thread count differ): the caps below are set from it"""
    r = subprocess.run([edge0_cmd, 'generate', '-m', 'edge0-tiny', '-p', 'The city', '--ignore-chat-template',
                        '--max-tokens', '4', '--stats'], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return int(re.search(r'this process: ([\d,]+) MiB resident after loading', r.stdout).group(1).replace(',', ''))

def test_headroom_finds_and_names_the_cgroup_limit():
    code = ("from edge0.memory import headroom; h = headroom(); "
            "print(h.binds); print(h.bytes + h.rss.anon + h.rss.file)")
    r = capped(400, [sys.executable, '-c', code])
    assert r.returncode == 0, r.stderr
    binds, total = r.stdout.splitlines()
    assert binds.startswith('cgroup v') and 'limit 400 MiB' in binds, binds
    assert abs(int(total) - 400 * MiB) < 8 * MiB, total  # what it may still take and what it holds: the cap

def test_a_cap_too_small_for_a_tokens_experts_is_refused_at_load_in_one_line(edge0_cmd, footprint):
    # 30 MiB beside what the program holds after loading: less than the page-cache room
    r = capped(footprint + 30, [edge0_cmd, 'generate', '-m', 'edge0-tiny', '-p', 'The city', '--max-tokens', 4])
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and 'not enough memory to stream' in lines[0] and 'cgroup' in lines[0], r.stderr
    assert 'Traceback' not in r.stderr and not r.stdout.strip()

def test_stats_show_the_budget_and_where_it_came_from(edge0_cmd):
    r = subprocess.run([edge0_cmd, 'generate', '-m', 'edge0-tiny', '-p', 'The city', '--ignore-chat-template',
                        '--max-tokens', '4', '--stats'], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for want in ('expert memory budget:', '(auto)', 'free after loading:', 'resident after loading',
                 'less the KV cache of', "one step's transient experts", 'page cache'):
        assert want in out, out
    tokens = int(out.split('less the KV cache of ')[1].split(' tokens')[0].replace(',', ''))
    assert tokens == len('The city'.encode()) + 256 + 4, tokens  # a generation's prompt (a token a byte) and answer

def test_an_explicit_budget_beyond_the_memory_left_is_a_warning_naming_both(edge0_cmd, footprint):
    # 50 MiB beside what the program holds leave no room for 5 MiB of experts beside the page-cache room: kept, warned
    r = capped(footprint + 50, [edge0_cmd, 'generate', '-m', 'edge0-tiny', '-p', 'The city', '--ignore-chat-template',
                     '--max-tokens', 4, '--pool-mib', 5])
    assert r.returncode == 0, r.stderr[-800:]
    warn = [l for l in r.stderr.splitlines() if l.startswith('warning:')]
    assert len(warn) == 1 and 'an expert budget of 5 MiB (5 MiB asked) is more than the' in warn[0], r.stderr
    assert 'cgroup' in warn[0] and '--pool-mib auto' in warn[0], warn

def test_the_thrash_watch_speaks_once_through_a_session(monkeypatch, caplog):
    import edge0.memory as M
    from edge0.session import Session
    reads = iter(range(0, 10**15, 2**30))  # 1 GiB read from storage between two looks, 16 tokens apart: thrash
    monkeypatch.setattr(M, 'io_counters', lambda: (next(reads), 0))
    with Session('edge0-tiny') as s, caplog.at_level(logging.WARNING, logger='edge0'):
        s.generate('The city', 20, chat=False)  # the watch starts after the first token: one window of 16
        s.generate('The river', 20, chat=False)
    said = [r.getMessage() for r in caplog.records if 'memory is short' in r.getMessage()]
    assert len(said) == 1, said
    assert 'MB from storage beyond the experts' in said[0] and 'expert budget' in said[0], said[0]
