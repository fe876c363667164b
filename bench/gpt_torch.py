#!/usr/bin/env python3
"""The reference of kiln's second main job (examples/gpt.cpp) in PyTorch: the same character-level
GPT (token and position embeddings, pre-LN nn.TransformerEncoderLayer with a causal mask, GELU,
4x feed-forward, final LayerNorm, linear head without bias), the same data (every fortune file in
name order, a byte vocabulary, the first 90% for training), the same batches of random windows
(SplitMix64, as examples/gpt.h), AdamW with linear warm-up and cosine decay, gradient clipping and
the same step count. Prints tokens/s and the validation loss, last line `val_loss: X.XXXX`.

    /usr/bin/python3 bench/gpt_torch.py                 # 2000 steps, threads = CPU count (as kiln's)
    /usr/bin/python3 bench/gpt_torch.py --steps 300 --threads 2

Run with Debian's python3-torch (1.13)."""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn

MASK64 = (1 << 64) - 1
VAL_STREAM = 1000003


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def read_corpus(d):
    text = b""
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if os.path.isfile(p) and not os.path.islink(p) and "." not in name:
            with open(p, "rb") as f:
                text += f.read()
    return text


def windows(data, batch, context, seed, index):
    span = len(data) - context
    starts = [splitmix64((seed * 0x100000001B3 + index * batch + b) & MASK64) % span for b in range(batch)]
    x = torch.stack([data[s:s + context] for s in starts])
    y = torch.stack([data[s + 1:s + context + 1] for s in starts])
    return x, y


class GPT(nn.Module):
    def __init__(self, vocab, layers, heads, dim, context, dropout):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout, activation="gelu", batch_first=True,
                                       norm_first=True) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("causal", torch.triu(torch.full((context, context), float("-inf")), 1))

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(t)))
        for b in self.blocks:
            x = b(x, src_mask=self.causal[:t, :t])
        return self.head(self.ln_f(x))


def lr_at(step, base, min_lr, warmup, total):
    if step < warmup:
        return base * (step + 1) / warmup
    if step >= total:
        return min_lr
    return min_lr + (base - min_lr) * (1 + math.cos(math.pi * (step - warmup) / (total - warmup))) / 2


@torch.no_grad()
def evaluate(model, data, batch, batches, context):
    model.eval()
    total = 0.0
    for i in range(batches):
        x, y = windows(data, batch, context, VAL_STREAM, i)
        total += nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
    model.train()
    return total / batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=-1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--keep-denormals", action="store_true",
                    help="do not flush denormals to zero (flushing is PyTorch's faster setting on x86)")
    a = ap.parse_args()
    warmup = min(100, a.steps // 10) if a.warmup == -1 else a.warmup
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(not a.keep_denormals)
    torch.manual_seed(a.seed)

    text = read_corpus(a.data)
    chars = sorted(set(text))
    ids = torch.tensor([0] * 256, dtype=torch.int64)
    for i, c in enumerate(chars):
        ids[c] = i
    data = ids[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    split = int(len(data) * 0.9)
    train, val = data[:split], data[split:]

    model = GPT(len(chars), a.layers, a.heads, a.dim, a.context, a.dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.99), weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s, a.lr, a.min_lr, warmup, a.steps) / a.lr)
    print("parameters: %d, vocabulary %d, characters: %d train, %d validation; torch %s, %d threads" % (
        sum(p.numel() for p in model.parameters()), len(chars), len(train), len(val), torch.__version__,
        torch.get_num_threads()), flush=True)
    start = time.perf_counter()
    eval_secs = 0.0
    avg = 0.0
    for s in range(a.steps):
        x, y = windows(train, a.batch, a.context, a.seed, s)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        sched.step()
        avg = loss.item() if s == 0 else 0.95 * avg + 0.05 * loss.item()
        if (s + 1) % 50 == 0:
            print("\rstep %5d/%d  %8.0f tokens/s  loss %.4f" % (
                s + 1, a.steps, (s + 1) * a.batch * a.context / (time.perf_counter() - start - eval_secs), avg),
                end="", file=sys.stderr, flush=True)
        if (s + 1) % a.eval_every == 0 and s + 1 < a.steps:
            t0 = time.perf_counter()
            v = evaluate(model, val, a.batch, a.eval_batches, a.context)
            eval_secs += time.perf_counter() - t0
            print(file=sys.stderr)
            print("step %d: train_loss %.4f  val_loss %.4f  lr %.2e  (%.1f s)" % (
                s + 1, avg, v, opt.param_groups[0]["lr"], time.perf_counter() - start), flush=True)
    secs = time.perf_counter() - start - eval_secs
    print(file=sys.stderr)
    val_loss = evaluate(model, val, a.batch, a.eval_batches, a.context)
    print("trained %d steps in %.1f s (evaluations excluded): %.0f tokens/s" % (a.steps, secs, a.steps * a.batch * a.context / secs))
    print("val_loss: %.4f" % val_loss)


if __name__ == "__main__":
    sys.exit(main())
