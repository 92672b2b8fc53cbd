"""The embedded tiny base model: a word-level tokenizer and a small GPT-2 pre-trained here.

A word-level vocabulary (every integer up to `number_max` is one token) lets a ~1M-parameter
model learn templated arithmetic within a CPU budget; a character vocabulary of the same size
learns ~5x slower (MEASURED.md). Everything is seeded, so the same inputs give bit-identical
weights on the same machine and the provisioning step can be cached by content hash.
"""

from __future__ import annotations

import os
import random
import re
import string
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from vtb.models.meta import count_params, write_model_info

SPECIALS = ["[PAD]", "[UNK]", "[BOS]", "[EOS]"]
PIECE = r"\d+|[A-Za-z]+|<<|>>|####|\n|[^\sA-Za-z\d]"
# "\n" is a token of its own (GSM8K answers are multi-line); the other whitespace separates.
SYMBOLS = ["\n", "<<", ">>", "####", *string.punctuation]
# Never a prefix of a vocabulary entry: makes the WordPiece decoder a plain "join with spaces".
_NO_PREFIX = "\x00\x00"
# "ids" mode (tool-use domains): a run of letters, digits and underscores is one piece, so ids like
# `mei_kim_3456`, `W8850172` or `find_user_id_by_email` are single tokens when the corpus has them.
PIECE_IDS = r"[A-Za-z0-9_]+|\n|[^\sA-Za-z0-9_]"
# "exact" mode (shell commands, code): like "ids", but a piece keeps one leading space (" grep",
# " /"), other whitespace is a token of its own and decoding is plain concatenation, so text comes
# back with its exact whitespace at about the length of "ids" (a space of its own doubled it).
PIECE_EXACT = r" ?[A-Za-z0-9_]+| ?[^\sA-Za-z0-9_]|\s"


def _word_forms(words: list[str]) -> list[str]:
    """Alphabetic pieces of the given words, with their lowercase and capitalised forms."""
    forms: set[str] = set()
    for word in words:
        for piece in re.findall(r"[A-Za-z]+", word):
            forms.update((piece, piece.lower(), piece.capitalize()))
    return sorted(forms)


def build_tokenizer(words: list[str], number_max: int, mode: str = "words") -> PreTrainedTokenizerFast:
    """Word-level tokenizer: specials, symbols, the integers 0..number_max and the given words.

    mode "words": letters and digit runs are separate pieces; the vocabulary has the alphabetic
    pieces of `words` (and their lower/capitalised forms).
    mode "ids": runs of letters, digits and `_` are pieces; the vocabulary has every such piece
    of `words` (pass whole texts: records, schemas, phrases).
    Both decode by joining tokens with single spaces and no space around newlines, so
    `decode(encode(x))` is a normalised form of x that re-encodes to the same ids.
    mode "exact": the "ids" vocabulary, each piece also with one leading space, plus lone space,
    tab and newline; decoding concatenates, so code and commands keep their exact whitespace.
    """
    if mode == "ids":
        pieces = {p for w in words for p in re.findall(PIECE_IDS, w) if not p.isspace()}
        extra, pattern = (
            sorted(pieces | {p.lower() for p in pieces} | {p.capitalize() for p in pieces}),
            PIECE_IDS,
        )
    elif mode == "exact":  # no case variants: code and commands are case-sensitive anyway
        pieces = {p for w in words for p in re.findall(PIECE_IDS, w) if not p.isspace()}
        extra, pattern = sorted(pieces), PIECE_EXACT
    elif mode == "words":
        extra, pattern = _word_forms(words), PIECE
    else:
        raise ValueError(f"tokenizer mode {mode!r} is not one of words, ids, exact")
    vocab: dict[str, int] = {}
    if mode == "exact":  # every piece also with a leading space, and lone whitespace
        extra = [
            *extra,
            *(" " + p for p in [*SYMBOLS, *(str(n) for n in range(number_max + 1)), *extra]),
            " ",
            "\t",
        ]
    for token in [*SPECIALS, *SYMBOLS, *(str(n) for n in range(number_max + 1)), *extra]:
        vocab.setdefault(token, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.add_special_tokens(SPECIALS)
    if mode == "exact":
        backend.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        backend.decoder = decoders.Fuse()
    else:
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(r"[^\S\n]+"), behavior="removed"),
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            ]
        )
        backend.decoder = decoders.Sequence(
            [
                decoders.WordPiece(prefix=_NO_PREFIX, cleanup=False),
                decoders.Fuse(),
                decoders.Replace(" \n", "\n"),
                decoders.Replace("\n ", "\n"),
            ]
        )
    bos = vocab["[BOS]"]
    backend.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", pair="[BOS] $A $B", special_tokens=[("[BOS]", bos)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="[BOS]",
        eos_token="[EOS]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        clean_up_tokenization_spaces=False,
    )


def _encode_texts(texts: list[str], tokenizer: PreTrainedTokenizerFast, n_positions: int) -> list[list[int]]:
    """[BOS] text [EOS], cut to the context window."""
    eos = tokenizer.eos_token_id
    return [(ids + [eos])[:n_positions] for ids in tokenizer(texts).input_ids]


def _lm_batch(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and labels (-100 on padding)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


def lm_loss(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Mean next-token cross-entropy over the positions whose label is not -100."""
    logits = model(input_ids=ids, attention_mask=mask).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
    )


def _epoch_batches(n: int, batch_size: int, rng: random.Random):
    """Endless seeded stream of index batches, reshuffled every epoch."""
    while True:
        order = list(range(n))
        rng.shuffle(order)
        for start in range(0, n, batch_size):
            yield order[start : start + batch_size]


def build_tiny_model(
    out_dir: Path,
    texts: list[str],
    tokenizer: PreTrainedTokenizerFast,
    *,
    n_layer: int = 4,
    n_embd: int = 128,
    n_head: int = 4,
    n_positions: int = 256,
    steps: int,
    batch_size: int = 32,
    lr: float = 2e-3,
    seed: int = 0,
    threads: int | None = None,
    progress: Callable[[str], None] = print,
) -> Path:
    """Pre-train a GPT-2 from scratch on `texts` (next-token loss) and save it to out_dir.

    threads: torch threads while training (default $VTB_THREADS, else 2); same inputs and
    thread count give bit-identical weights.
    """
    if not texts:
        raise ValueError("build_tiny_model needs at least one pre-training text")
    out_dir = Path(out_dir)
    previous_threads = torch.get_num_threads()
    # The reduction order, hence the exact weights, depends on the thread count: fix it.
    torch.set_num_threads(threads or int(os.environ.get("VTB_THREADS") or 2))
    try:
        torch.manual_seed(seed)
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_positions=n_positions,
            n_embd=n_embd,
            n_layer=n_layer,
            n_head=n_head,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            tie_word_embeddings=True,
            # GPT-2's tanh GELU as torch's one fused kernel, not transformers' `gelu_new` (five
            # elementwise ops): the same formula (1% of values differ by one unit in the last
            # place), 5x faster on a (100, 60, 512) tensor; a 5-vote play's decoding 11.4 -> 9.1 CPU-s
            activation_function="gelu_pytorch_tanh",
        )
        model = GPT2LMHeadModel(config)
        model.train()
        seqs = _encode_texts(texts, tokenizer, n_positions)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        warmup = min(10, steps)
        batches = _epoch_batches(len(seqs), batch_size, random.Random(seed))
        start, running, losses = time.time(), 0.0, []
        for step in range(1, steps + 1):
            for group in optimizer.param_groups:
                group["lr"] = lr * min(1.0, step / max(1, warmup))
            ids, mask, labels = _lm_batch([seqs[i] for i in next(batches)], tokenizer.pad_token_id)
            loss = lm_loss(model, ids, mask, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            running += losses[-1]
            if step % 25 == 0 or step == steps:
                count = step % 25 or 25
                progress(
                    f"pretrain step {step}/{steps} loss {running / count:.4f} elapsed {time.time() - start:.1f}s"
                )
                running = 0.0
        model.eval()
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        tail = losses[-min(len(losses), 25) :]
        write_model_info(
            out_dir,
            kind="tiny",
            n_params=count_params(model),
            vocab_size=len(tokenizer),
            n_layer=n_layer,
            n_embd=n_embd,
            n_head=n_head,
            n_positions=n_positions,
            pretrain_steps=steps,
            pretrain_texts=len(texts),
            seed=seed,
            threads=torch.get_num_threads(),  # what it was pre-trained with: it sets the last bits
            first_loss=losses[0] if losses else None,
            final_loss=sum(tail) / len(tail) if tail else None,
        )
    finally:
        torch.set_num_threads(previous_threads)
    return out_dir
