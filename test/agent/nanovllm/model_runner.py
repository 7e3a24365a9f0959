"""The tensor-parallel model runner, shaped like nano-vllm's ModelRunner:
rank 0 lives in the engine's process, ranks 1..N-1 are processes started
with multiprocessing's spawn context. Rank 0 writes each call (a method name
and its arguments, pickled) into a SharedMemory segment and sets one event
per worker; every rank runs its shard of the call and leaves its result in
its own slot of the segment. The "forward pass" tokenizes: rank r handles
the pieces whose index is r modulo the world size."""
import hashlib
import os
import pickle
import struct
from multiprocessing.shared_memory import SharedMemory

from nanovllm import tokenizer

SHM_SIZE = 1 << 21
REQ_MAX = 1 << 20
SLOT = 1 << 17


def weights_digest(model):
    h = hashlib.sha256()
    with open(os.path.join(model, "model.safetensors"), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def shard(rank, world, texts, vocab_size):
    """This rank's part of the forward pass over TEXTS."""
    out = []
    for text in texts:
        ps = tokenizer.pieces(text)
        out.append([(i, tokenizer.piece_id(p, vocab_size)) for i, p in enumerate(ps) if i % world == rank])
    return out


class ModelRunner:
    def __init__(self, config, rank, events, done, shm_name, cache_dir):
        self.config = config
        self.rank = rank
        self.world = config["tensor_parallel_size"]
        self.events = events
        self.done = done
        self.digest = weights_digest(config["model"])
        self.write_kernel_cache(cache_dir)
        if self.world == 1:
            self.shm = None
            return
        if rank == 0:
            self.shm = SharedMemory(name=shm_name, create=True, size=SHM_SIZE)
        else:
            self.shm = SharedMemory(name=shm_name)
            self.loop()

    def write_kernel_cache(self, cache_dir):
        """Each rank rewrites its kernels at every start (as torch.compile's
        cache would), in place."""
        path = os.path.join(cache_dir, "kernels", f"rank{self.rank}.bin")
        with open(path, "wb") as f:
            f.write(f"rank {self.rank} of {self.world} pid {os.getpid()} weights {self.digest}\n".encode())
            f.write(hashlib.sha256(f"{self.digest}{self.rank}{os.getpid()}".encode()).digest() * 64)

    # --- the shared memory protocol ---------------------------------------------

    def write_shm(self, method, *args):
        data = pickle.dumps((method, args))
        if len(data) > REQ_MAX:
            raise RuntimeError(f"nanovllm: request of {len(data)} bytes exceeds the shared buffer")
        self.shm.buf[0:4] = struct.pack("<I", len(data))
        self.shm.buf[4:4 + len(data)] = data
        for e in self.events:
            e.set()

    def read_shm(self):
        self.events[self.rank - 1].wait()
        (n,) = struct.unpack("<I", bytes(self.shm.buf[0:4]))
        method, args = pickle.loads(bytes(self.shm.buf[4:4 + n]))
        self.events[self.rank - 1].clear()
        return method, args

    def put_result(self, result):
        data = pickle.dumps(result)
        off = REQ_MAX + (self.rank - 1) * SLOT
        if len(data) + 4 > SLOT:
            raise RuntimeError("nanovllm: result too large for its slot")
        self.shm.buf[off:off + 4] = struct.pack("<I", len(data))
        self.shm.buf[off + 4:off + 4 + len(data)] = data

    def get_result(self, rank):
        off = REQ_MAX + (rank - 1) * SLOT
        (n,) = struct.unpack("<I", bytes(self.shm.buf[off:off + 4]))
        return pickle.loads(bytes(self.shm.buf[off + 4:off + 4 + n]))

    def loop(self):
        while True:
            method, args = self.read_shm()
            result = getattr(self, method)(*args)
            self.put_result(result)
            self.done[self.rank - 1].set()
            if method == "exit":
                self.shm.close()
                break

    def call(self, method, *args):
        """Run METHOD on every rank (rank 0 here); the list of results by rank."""
        if self.world > 1 and self.rank == 0:
            for d in self.done:
                d.clear()
            self.write_shm(method, *args)
        results = [getattr(self, method)(*args)]
        if self.world > 1 and self.rank == 0:
            for d in self.done:
                if not d.wait(60):
                    raise RuntimeError("nanovllm: a tensor-parallel worker did not answer")
            results += [self.get_result(r) for r in range(1, self.world)]
        return results

    # --- the methods every rank runs ------------------------------------------------

    def run(self, prompts, replies):
        vocab = self.config["hf_config"]["vocab_size"]
        return {"weights": self.digest,
                "prompt_tokens": [len(p) for p in shard(self.rank, self.world, prompts, vocab)],
                "tokens": shard(self.rank, self.world, replies, vocab)}

    def exit(self):
        return {"rank": self.rank, "pid": os.getpid()}
