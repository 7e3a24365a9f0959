"""demo_agent.py - the agent of `make demo`: a scripted agent loop written
the ordinary way (tools run through subprocess, files written in-process),
with no knowledge of ftsbx. Each step prints what the agent saw."""
import os
import subprocess

STEPS = [
    ("shell", "sed -i 's/return a + b/return a + b  # checked/' src/calc.py"),
    ("write", ("NOTES.md", "todo: add subtraction\n")),
    ("shell", "rm -rf src"),                                   # a destructive mistake
    ("shell", "git push --force origin main"),                 # refused: rewrites remote history
    ("shell", "rm -rf \"$FTSBX_JOURNAL\""),                    # refused: erase its own history
    ("shell", "echo 'def sub(a, b): return a - b' >> tests/test_calc.py; exit 1"),  # fails
    ("shell", "cat tests/test_calc.py | tail -1"),
]


def shell(cmd):
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


for n, (tool, arg) in enumerate(STEPS, 1):
    if tool == "shell":
        code, out = shell(arg)
        print(f"[tool call {n}] $ {arg}\n    exit {code}" + (f"; output: {out}" if out else ""), flush=True)
    else:
        name, text = arg
        with open(name, "w") as f:
            f.write(text)
        print(f"[tool call {n}] write {name}", flush=True)
print("[agent] src/ exists after the session:", os.path.isdir("src"))
