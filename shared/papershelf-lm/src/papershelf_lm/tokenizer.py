"""A byte-level tokenizer usable as a transformers tokenizer.

Token ids 0-255 are the bytes themselves; the special tokens follow (bos, eos, pad, then the task
markers). Text is encoded as its UTF-8 bytes, so ``decode(encode(text)) == text`` for every string;
:func:`encode_bytes` / :func:`decode_bytes` round-trip arbitrary bytes, valid UTF-8 or not.
"""

from __future__ import annotations

from functools import lru_cache

from papershelf.errors import InputError

SPECIAL_TOKENS = ("<bos>", "<eos>", "<pad>", "<key>", "<val>", "<query>", "<sep>")
BYTE_VOCAB = 256
VOCAB_SIZE = BYTE_VOCAB + len(SPECIAL_TOKENS)
SPECIAL_IDS = {tok: BYTE_VOCAB + i for i, tok in enumerate(SPECIAL_TOKENS)}
BOS, EOS, PAD = SPECIAL_IDS["<bos>"], SPECIAL_IDS["<eos>"], SPECIAL_IDS["<pad>"]
KEY, VAL, QUERY, SEP = (SPECIAL_IDS[t] for t in ("<key>", "<val>", "<query>", "<sep>"))


@lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    """The reversible byte -> printable-character map that byte-level BPE pre-tokenizers use."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars)))


def byte_tokenizer():
    """A ``PreTrainedTokenizerFast`` over bytes: ``save_pretrained`` / ``from_pretrained`` work offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: byte for byte, char in _byte_to_unicode().items()}
    vocab.update(SPECIAL_IDS)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))  # no merges: one token per byte
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        additional_special_tokens=list(SPECIAL_TOKENS[3:]),
        model_max_length=1_000_000,
    )


def encode_bytes(data: bytes) -> list[int]:
    """Token ids of raw bytes (one id per byte)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InputError(f"encode_bytes takes bytes, got {type(data).__name__}")
    return list(bytes(data))


def decode_bytes(ids) -> bytes:
    """Bytes of token ids; special tokens are dropped. Inverse of :func:`encode_bytes`."""
    out = bytearray()
    for i in ids:
        i = int(i)
        if not 0 <= i < VOCAB_SIZE:
            raise InputError(f"token id {i} is outside the vocabulary [0, {VOCAB_SIZE})")
        if i < BYTE_VOCAB:
            out.append(i)
    return bytes(out)


def encode_text(text: str) -> list[int]:
    """Token ids of a string's UTF-8 bytes (no special tokens added)."""
    return encode_bytes(text.encode("utf-8"))
