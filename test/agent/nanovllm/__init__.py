"""A stand-in for nano-vllm (https://github.com/GeeeekExplorer/nano-vllm)
with the same public API, for machines without a GPU or weights: the
"model" replays a scripted trajectory from its model directory, while the
engine touches the filesystem and processes as the real one does (model
directory read, compile cache under $HOME/.cache/nanovllm, spawned tensor
parallel workers talking through a SharedMemory segment in /dev/shm)."""
from nanovllm.llm import LLM
from nanovllm.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams"]
