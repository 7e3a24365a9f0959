"""SamplingParams, as nano-vllm's: the scripted model honours max_tokens."""
from dataclasses import dataclass


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False
