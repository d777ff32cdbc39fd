"""The README's "Try it" commands work as written, in a fresh folder (issue 12: its
`golden logits --fixed` example runs on the README's own random checkpoint), and what they
print agrees: `mcf run` generates the fixed-point golden model's token ids."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def try_it_commands() -> list[list[str]]:
    text = README.read_text()
    section = text.split("## Try it", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.startswith("mcf ")]


def test_readme_try_it_commands_run_and_agree(tmp_path):
    cmds = try_it_commands()
    assert [c[:3] for c in cmds[:2]] == [["mcf", "golden", "random-checkpoint"], ["mcf", "golden", "logits"]]
    assert "--fixed" in cmds[1]
    env = {k: v for k, v in os.environ.items() if k != "MCF_DEBUG"}
    outs = {}
    for argv in cmds:
        r = subprocess.run([sys.executable, "-m", "mcf", *argv[1:]], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, (argv, r.stderr[-2000:])
        outs[" ".join(argv[1:3])] = r.stdout
    rows = outs["golden logits"].strip().splitlines()
    assert len(rows) == 3 and all(len(row.split()) == 256 for row in rows)       # tiny: vocabulary 256
    golden = outs["golden generate"].strip()
    assert len(golden.split(",")) == 5
    assert f"tokens: {golden}\n" in outs["run --nodes"]
    assert "ring " in outs["plan --model"] and "mars " in outs["plan --model"]
