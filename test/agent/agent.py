"""A coding agent on nano-vllm, written the ordinary way: a chat prompt with
the conversation so far, llm.generate, tool calls parsed from the reply
(<tool>{"name": ..., "arguments": {...}}</tool>), tools run (several calls
of one reply in a thread pool), results fed back, until the model says it is
done or the turn limit is reached. Prints a transcript; --transcript FILE
also saves it as JSON.

    python3 agent.py --model MODEL_DIR --workspace DIR [--tp N]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from nanovllm import LLM, SamplingParams

SYSTEM = """You are a coding agent working in a Python repository.
Call tools with <tool>{"name": NAME, "arguments": {...}}</tool>; several calls in one reply run in parallel.
Tools: shell(command), write_file(path, content), apply_patch(diff), delete_path(path), run_tests().
Say <done/> when the task is finished."""
TASK = "Add a sub() function to mathlib with a test, clean up stale build output, and keep the tests passing."
MAX_OUTPUT = 2000
TOOL_RE = re.compile(r"<tool>(.*?)</tool>", re.DOTALL)


def shell(command):
    r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    return {"exit": r.returncode, "output": (r.stdout + r.stderr)[-MAX_OUTPUT:]}


def write_file(path, content):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(content)
    return {"exit": 0, "output": f"wrote {len(content)} bytes to {path}"}


def apply_patch(diff):
    r = subprocess.run(["patch", "-p1", "--forward", "--no-backup-if-mismatch"], input=diff,
                       capture_output=True, text=True, timeout=60)
    return {"exit": r.returncode, "output": (r.stdout + r.stderr)[-MAX_OUTPUT:]}


def delete_path(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)
    return {"exit": 0, "output": f"deleted {path}"}


def run_tests():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                       capture_output=True, text=True, timeout=300)
    return {"exit": r.returncode, "output": (r.stdout + r.stderr)[-MAX_OUTPUT:]}


TOOLS = {"shell": shell, "write_file": write_file, "apply_patch": apply_patch,
         "delete_path": delete_path, "run_tests": run_tests}


def run_tool(call):
    try:
        return TOOLS[call["name"]](**call.get("arguments", {}))
    except Exception as e:          # the model sees the error and carries on
        return {"exit": -1, "output": f"error: {type(e).__name__}: {e}"}


def parse_tool_calls(text):
    calls = []
    for raw in TOOL_RE.findall(text):
        try:
            calls.append(json.loads(raw))
        except json.JSONDecodeError as e:
            calls.append({"name": "invalid", "arguments": {}, "error": str(e)})
    return calls


def chat_prompt(messages):
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


def format_result(call, result):
    return f"<tool_result name=\"{call['name']}\" exit=\"{result['exit']}\">\n{result['output']}\n</tool_result>"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--workspace", default=".")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--max-turns", type=int, default=20)
    ap.add_argument("--transcript")
    args = ap.parse_args()

    llm = LLM(args.model, enforce_eager=True, tensor_parallel_size=args.tp)
    params = SamplingParams(temperature=0.6, max_tokens=1024)
    os.chdir(args.workspace)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    transcript = []
    pool = ThreadPoolExecutor(max_workers=4)
    for turn in range(1, args.max_turns + 1):
        out = llm.generate([chat_prompt(messages)], params)[0]
        text = out["text"]
        messages.append({"role": "assistant", "content": text})
        print(f"=== turn {turn} ({len(out['token_ids'])} tokens)\nassistant: {text.strip()}", flush=True)
        calls = parse_tool_calls(text)
        entry = {"turn": turn, "text": text, "token_ids": out["token_ids"], "calls": []}
        transcript.append(entry)
        if not calls:
            if "<done/>" in text:
                break
            messages.append({"role": "user", "content": "Use a tool or say <done/>."})
            continue
        results = list(pool.map(run_tool, calls)) if len(calls) > 1 else [run_tool(calls[0])]
        for call, result in zip(calls, results):
            print(f"[{call['name']}] exit {result['exit']}\n{result['output'].rstrip()}", flush=True)
            entry["calls"].append({"name": call["name"], "arguments": call.get("arguments", {}),
                                   "exit": result["exit"], "output": result["output"]})
        messages.append({"role": "user", "content": "\n".join(format_result(c, r) for c, r in zip(calls, results))})
    pool.shutdown()
    if args.transcript:
        with open(args.transcript, "w") as f:
            json.dump(transcript, f, indent=1)
    llm.exit()


if __name__ == "__main__":
    main()
