"""LLM: the engine. Reads its model directory (config.json, the weights,
trajectory.json: the scripted replies), rewrites its compile cache under
$HOME/.cache/nanovllm at each start, starts tensor_parallel_size - 1 worker
processes with the spawn context and shuts them down at exit (the
SharedMemory segment is unlinked). generate() picks each prompt's reply by
its turn number: the number of assistant turns the chat template opened in
the prompt, the last one being the reply to write."""
import atexit
import hashlib
import json
import multiprocessing as mp
import os
import re
import time

from nanovllm import tokenizer
from nanovllm.model_runner import ModelRunner, weights_digest
from nanovllm.sampling_params import SamplingParams

ASSISTANT = "<|im_start|>assistant\n"


def turn_of(prompt):
    """The turn a prompt asks for: an explicit "turn N" marker if any, else
    the number of assistant turns in the chat template."""
    m = re.findall(r"<\|turn\|>(\d+)", prompt)
    return int(m[-1]) if m else prompt.count(ASSISTANT)


def write_compile_cache(config, digest):
    """Rewrite the cache at each start: a manifest (replaced atomically), the
    captured graphs (rewritten in place) and a lock taken meanwhile."""
    home = os.path.expanduser("~")
    tag = hashlib.sha256((config["model"] + digest).encode()).hexdigest()[:16]
    cache = os.path.join(home, ".cache", "nanovllm", tag)
    os.makedirs(os.path.join(cache, "kernels"), exist_ok=True)
    lock = os.path.join(cache, ".lock")
    fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    try:
        manifest = dict(model=config["model"], weights=digest, started=time.time_ns(),
                        tensor_parallel_size=config["tensor_parallel_size"],
                        enforce_eager=config["enforce_eager"])
        tmp = os.path.join(cache, "manifest.json.tmp")
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1)
        os.replace(tmp, os.path.join(cache, "manifest.json"))
        with open(os.path.join(cache, "graphs.json"), "w") as f:
            json.dump({"batch_sizes": [1, 2, 4, 8], "captured_at": time.time_ns(),
                       "eager": config["enforce_eager"]}, f)
    finally:
        os.unlink(lock)
    return cache


class LLM:
    def __init__(self, model, **kwargs):
        model = os.path.abspath(model)
        with open(os.path.join(model, "config.json")) as f:
            hf_config = json.load(f)
        with open(os.path.join(model, "trajectory.json")) as f:
            self.trajectory = json.load(f)["turns"]
        self.config = dict(model=model, hf_config=hf_config,
                           enforce_eager=kwargs.get("enforce_eager", False),
                           tensor_parallel_size=kwargs.get("tensor_parallel_size", 1),
                           max_model_len=min(kwargs.get("max_model_len", 4096 * 8),
                                             hf_config["max_position_embeddings"]))
        world = self.config["tensor_parallel_size"]
        assert 1 <= world <= 8
        cache = write_compile_cache(self.config, weights_digest(model))
        self.shm_name = f"nanovllm-{os.getpid()}"
        ctx = mp.get_context("spawn")
        self.events = [ctx.Event() for _ in range(1, world)]
        self.done = [ctx.Event() for _ in range(1, world)]
        self.ps = []
        self.model_runner = ModelRunner(self.config, 0, self.events, self.done, self.shm_name, cache)
        for rank in range(1, world):
            p = ctx.Process(target=ModelRunner,
                            args=(self.config, rank, self.events, self.done, self.shm_name, cache))
            p.start()
            self.ps.append(p)
        self.exited = False
        atexit.register(self.exit)

    def exit(self):
        if self.exited:
            return
        self.exited = True
        self.model_runner.call("exit")
        for p in self.ps:
            p.join()
        if self.model_runner.shm is not None:
            self.model_runner.shm.close()
            self.model_runner.shm.unlink()

    def generate(self, prompts, sampling_params, use_tqdm=False):
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        replies = []
        for prompt, sp in zip(prompts, sampling_params):
            turn = turn_of(prompt)
            if not 1 <= turn <= len(self.trajectory):
                raise ValueError(f"nanovllm: the trajectory has no turn {turn}")
            replies.append(self.trajectory[turn - 1])
        results = self.model_runner.call("run", list(prompts), replies)
        digests = {r["weights"] for r in results}
        if len(digests) != 1:
            raise RuntimeError("nanovllm: the ranks loaded different weights")
        outputs = []
        for i, (reply, sp) in enumerate(zip(replies, sampling_params)):
            n_prompt = sum(r["prompt_tokens"][i] for r in results)
            if n_prompt >= self.config["max_model_len"]:
                raise ValueError(f"nanovllm: prompt of {n_prompt} tokens exceeds max_model_len")
            ids = sorted(t for r in results for t in r["tokens"][i])
            if [k for k, _ in ids] != list(range(len(ids))):
                raise RuntimeError("nanovllm: the ranks' shards do not fit together")
            token_ids = [t for _, t in ids][:sp.max_tokens]
            text = "".join(tokenizer.pieces(reply)[:sp.max_tokens])
            outputs.append({"text": text, "token_ids": token_ids})
        return outputs
