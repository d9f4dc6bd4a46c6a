"The `edge0` command as a user runs it: a subprocess, its output and its exit status."
import json, subprocess

def run(cmd, *args):
    return subprocess.run([cmd, *map(str, args)], capture_output=True, text=True, timeout=300)

def test_zoo_spec_generate(edge0_cmd, tmp_path):
    dst = tmp_path / 'mixtral'
    r = run(edge0_cmd, 'zoo', 'mixtral', dst, '--seed', 1)
    assert r.returncode == 0, r.stderr
    assert json.loads((dst / 'config.json').read_text())['quantization']['bits'] == 4
    r = run(edge0_cmd, 'spec', dst)
    assert r.returncode == 0 and 'model_type     mixtral' in r.stdout and 'K=4' in r.stdout
    r = run(edge0_cmd, 'generate', '--model', dst, '--prompt', 'The quick brown fox', '--max-tokens', 6)
    assert r.returncode == 0, r.stderr
    assert 'decode 6 tokens' in r.stdout and 'peak memory' in r.stdout

def test_generate_is_deterministic_when_greedy(edge0_cmd, tiny_qwen):
    outs = [run(edge0_cmd, 'generate', '--model', tiny_qwen, '--prompt', 'Once upon', '--max-tokens', 10).stdout.splitlines()[0]
            for _ in range(2)]
    assert outs[0] == outs[1]

def test_errors_name_the_fault(edge0_cmd, tmp_path, tiny_qwen):
    r = run(edge0_cmd, 'generate', '--model', tmp_path / 'missing', '--prompt', 'x')
    assert r.returncode == 2 and 'missing does not exist' in r.stderr
    (tmp_path / 'notamodel').mkdir()
    r = run(edge0_cmd, 'spec', tmp_path / 'notamodel')
    assert r.returncode == 2 and 'config.json is missing' in r.stderr
    bad = tmp_path / 'dense'; bad.mkdir(); (bad / 'config.json').write_text(json.dumps({'model_type': 'llama'}))
    r = run(edge0_cmd, 'spec', bad)
    assert r.returncode == 2 and "'llama' is not a supported MoE" in r.stderr and 'qwen3_moe' in r.stderr
    r = run(edge0_cmd, 'zoo', 'qwen3_moe', tiny_qwen)
    assert r.returncode == 2 and 'exists' in r.stderr
    assert (tiny_qwen / 'config.json').exists()  # the refused build left the model alone
    r = run(edge0_cmd, 'generate', '--model', tiny_qwen, '--prompt', 'x', '--max-tokens', 0)
    assert r.returncode == 2 and '--max-tokens' in r.stderr
