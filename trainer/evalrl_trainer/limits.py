"""What one request, and one training step, may ask of the model server: its settings, checked before any work.

A production step (examples/production.yaml: 32 tasks × 8 samples, multi-turn episodes of up to 16,384 tokens,
one sequence per turn where a turn's prompt does not extend the last) is at most a few thousand sequences and
some tens of millions of tokens; its body may exceed one request, so the client sends it in chunks.
"""
import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    request_bytes: int = 256 << 20  # --max-request-mb: one body (a whole step, or one chunk of it)
    train_sequences: int = 16384  # --max-step-sequences
    train_tokens: int = 32 << 20  # --max-step-tokens: 256 episodes × 8 sequences of a full 16,384-token context
    concurrent_chats: int = 256  # --max-concurrent-chats: each holds a worker thread (sized to fit, server.py)
    queued_samples: int = 1024  # --max-queued-samples: samples waiting for the sampler

    def body_refusal(self, size: int) -> str | None:
        if size > self.request_bytes:
            return f"body: {size} bytes exceed this server's limit of {self.request_bytes} (--max-request-mb)"
        return None

    def step_refusal(self, lengths: list[int]) -> str | None:
        """Why a step of sequences of these lengths (or a chunk of one) is refused, naming the flag to raise."""
        if len(lengths) > self.train_sequences:
            return (f"sequences: {len(lengths)} sequences exceed this server's limit of {self.train_sequences} "
                    "per step (--max-step-sequences)")  # fmt: skip
        if sum(lengths) > self.train_tokens:
            return (f"sequences: {sum(lengths)} tokens exceed this server's limit of {self.train_tokens} per step "
                    "(--max-step-tokens)")  # fmt: skip
        return None


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


MAX_CONCURRENT_CHATS = 4096  # each waits on a worker thread of its own


def chats(text: str) -> int:
    value = positive(text)
    if value > MAX_CONCURRENT_CHATS:
        raise argparse.ArgumentTypeError(f"{text}: at most {MAX_CONCURRENT_CHATS}")
    return value


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-request-mb", type=positive, default=Limits.request_bytes >> 20,
                        help="largest request body accepted (larger steps come in chunks of at most this)")  # fmt: skip
    parser.add_argument("--max-step-sequences", type=positive, default=Limits.train_sequences,
                        help="most sequences one training step may have")  # fmt: skip
    parser.add_argument("--max-step-tokens", type=positive, default=Limits.train_tokens,
                        help="most tokens one training step may have (held in memory while it trains)")  # fmt: skip
    parser.add_argument("--max-concurrent-chats", type=chats, default=Limits.concurrent_chats,
                        help="chat requests answered at once (each waits on a worker thread; a few more stay free for the rest); more get 429")  # fmt: skip
    parser.add_argument("--max-queued-samples", type=positive, default=Limits.queued_samples,
                        help="samples waiting for the sampler; a chat request beyond it gets 429")  # fmt: skip


def limits_from_flags(args: argparse.Namespace) -> Limits:
    return Limits(args.max_request_mb << 20, args.max_step_sequences, args.max_step_tokens,
                  args.max_concurrent_chats, args.max_queued_samples)  # fmt: skip
