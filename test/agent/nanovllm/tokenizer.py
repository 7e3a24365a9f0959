"""A deterministic toy tokenizer: words, runs of blanks and single
punctuation characters, each mapped to an id by crc32 (no vocabulary file)."""
import re
import zlib

PIECE = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)


def pieces(text):
    return PIECE.findall(text)


def piece_id(piece, vocab_size):
    return zlib.crc32(piece.encode("utf-8", "surrogatepass")) % vocab_size


def count(text):
    return len(pieces(text))
