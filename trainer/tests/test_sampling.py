import threading

from evalrl_trainer.adapters import Adapters
from evalrl_trainer.chat import render_prompt
from evalrl_trainer.lora import LoraSettings
from evalrl_trainer.sampler import SampleRequest, Sampler


def request(tokenizer, text: str, seed: int | None, max_tokens: int = 12, adapter=None) -> SampleRequest:
    ids = render_prompt(tokenizer, [{"role": "user", "content": text}], None)
    return SampleRequest(ids, adapter, max_tokens, temperature=1.0, top_p=0.95, seed=seed)


def test_deterministic_mode_gives_the_same_sample_alone_or_beside_others(tiny_base, tmp_path):
    adapters = Adapters(tiny_base, tmp_path)
    adapters.create("policy", LoraSettings(rank=4, alpha=8))
    sampler = Sampler(adapters, mode="deterministic")
    tok = tiny_base.tokenizer
    alone = sampler.submit(request(tok, "Who sent the lease email?", 42, adapter="policy")).result()
    sampler = Sampler(adapters, mode="deterministic")  # a new engine: this one would answer from its recent samples
    others = [request(tok, f"A different and longer question number {i} about gas", 100 + i) for i in range(4)]
    futures = []
    threads = [threading.Thread(target=lambda r=r: futures.append(sampler.submit(r))) for r in others]
    for t in threads:
        t.start()
    mine = sampler.submit(request(tok, "Who sent the lease email?", 42, adapter="policy"))
    for t in threads:
        t.join()
    beside = mine.result()
    assert beside.token_ids == alone.token_ids
    assert beside.logprobs == alone.logprobs
    assert len(alone.token_ids) == len(alone.logprobs) > 0


def test_throughput_mode_batches_concurrent_requests_across_adapters(tiny_base, tmp_path):
    adapters = Adapters(tiny_base, tmp_path)
    adapters.create("policy", LoraSettings(rank=4, alpha=8))
    sampler = Sampler(adapters, mode="throughput", max_batch=8, gather_ms=50)
    tok = tiny_base.tokenizer
    reqs = [request(tok, f"question {i}", i, adapter="policy" if i % 2 else None) for i in range(8)]
    futures = [sampler.submit(r) for r in reqs]
    samples = [f.result() for f in futures]
    assert sampler.batches < len(reqs)
    for r, s in zip(reqs, samples):
        assert 0 < len(s.token_ids) <= r.max_tokens
        assert all(lp <= 0 for lp in s.logprobs)
        assert s.finish_reason in ("stop", "length")


def test_seeded_samples_repeat_and_differ_by_seed(tiny_base, tmp_path):
    sampler = Sampler(Adapters(tiny_base, tmp_path), mode="deterministic")
    tok = tiny_base.tokenizer
    a = sampler.submit(request(tok, "hello", 1, max_tokens=16)).result()
    b = sampler.submit(request(tok, "hello", 1, max_tokens=17)).result()  # not the same request: computed again
    c = sampler.submit(request(tok, "hello", 2, max_tokens=16)).result()
    assert sampler.usage["shared_samples"] == 0
    assert b.token_ids[: len(a.token_ids)] == a.token_ids
    assert a.token_ids != c.token_ids


def test_a_cached_prefix_gives_the_same_next_token_distribution_and_is_reused(tiny_base, tmp_path):
    """Turn t + 1 resends turn t's prompt and reply: its prefill starts where the cache ends."""
    import torch

    from evalrl_trainer.adapters import Adapters
    from evalrl_trainer.sampler import SampleRequest, Sampler

    sampler = Sampler(Adapters(tiny_base, tmp_path), mode="throughput", prefix_cache_mb=64)
    first = SampleRequest(list(range(10, 60)), None, max_tokens=5, temperature=0, seed=1)
    sample = sampler.decode([first])[0]
    assert sampler.cache.misses == 50 and sampler.cache.hits == 0
    follow = first.prompt_ids + sample.token_ids + list(range(200, 230))
    cached_logits, _ = sampler._prefill(SampleRequest(follow, None, max_tokens=1), tiny_base.device)
    assert sampler.cache.hits == 50 + len(sample.token_ids) - 1  # the prompt and the sampled tokens fed back
    plain = Sampler(Adapters(tiny_base, tmp_path / "plain"), mode="deterministic")
    plain_logits, _ = plain._prefill(SampleRequest(follow, None, max_tokens=1), tiny_base.device)
    assert plain.cache.hits == 0
    assert torch.allclose(cached_logits, plain_logits, atol=1e-4)


def test_requests_waiting_together_compute_their_shared_prefix_once(tiny_base, tmp_path):
    """A GRPO group's samples, or a new adapter's episodes, arrive together: the first prefill is cached at once."""
    sampler = Sampler(Adapters(tiny_base, tmp_path), mode="throughput", prefix_cache_mb=64)
    shared = list(range(10, 50))
    group = [SampleRequest(shared + [100 + i] * 5, None, max_tokens=2, temperature=1.0, seed=i) for i in range(3)]
    group.append(SampleRequest(shared + [100] * 5, None, max_tokens=2, temperature=1.0, seed=9))  # the first's prompt again
    sampler.decode(group)
    assert sampler.cache.misses == 45 + 5 + 5 + 1  # the 40 shared tokens once; a repeated prompt computes its last
    assert sampler.cache.hits == 40 + 40 + 44


def test_a_trained_adapter_never_reuses_keys_from_before_its_step(tiny_base, tmp_path):
    import torch

    from evalrl_trainer.adapters import Adapters
    from evalrl_trainer.lora import LoraSettings
    from evalrl_trainer.sampler import SampleRequest, Sampler

    adapters = Adapters(tiny_base, tmp_path)
    adapters.create("policy", LoraSettings(rank=4, alpha=8))
    sampler = Sampler(adapters, mode="throughput", prefix_cache_mb=64)
    request = SampleRequest(list(range(10, 40)), "policy", max_tokens=2, temperature=0)
    sampler.decode([request])
    with torch.no_grad():  # what a train step does
        adapters.trainable_parameters("policy")[0].add_(0.01)
    adapters.changed("policy")
    hits = sampler.cache.hits
    sampler.decode([request])
    assert sampler.cache.hits == hits


def test_rows_that_finish_leave_the_batch_and_keep_their_keys_for_the_next_turn(tiny_base, tmp_path):
    """A batch whose rows stop at different lengths: each gets its own tokens, and its prompt and fed-back
    tokens are cached as they were when it stopped (the next turn's prefill starts there)."""
    import torch

    sampler = Sampler(Adapters(tiny_base, tmp_path), mode="throughput", prefix_cache_mb=64)
    reqs = [SampleRequest(list(range(10 + 7 * i, 40 + 9 * i)), None, max_tokens=n, temperature=1.0, seed=i, ignore_eos=True)
            for i, n in enumerate([2, 9, 5])]  # fmt: skip
    rows = []  # the batch size of each decoding step's forward pass
    hook = tiny_base.model.register_forward_pre_hook(
        lambda _, args, kwargs: rows.append(kwargs["input_ids"].shape[0]) if kwargs["input_ids"].shape[1] == 1 else None,
        with_kwargs=True)  # fmt: skip
    try:
        samples = sampler.decode(reqs)
    finally:
        hook.remove()
    assert [len(s.token_ids) for s in samples] == [2, 9, 5]
    assert rows == [3, 2, 2, 2, 1, 1, 1, 1]
    assert sampler.usage["decoded_tokens"] == 16 and sampler.usage["prefill_s"] > 0 and sampler.usage["decode_s"] > 0
    alone = [Sampler(Adapters(tiny_base, tmp_path / f"alone-{i}"), mode="deterministic").decode([r])[0]
             for i, r in enumerate(reqs)]  # fmt: skip
    for batched, single in zip(samples, alone):  # the same seeded draws, batch or not (up to float noise)
        assert torch.allclose(torch.tensor(batched.logprobs), torch.tensor(single.logprobs), atol=1e-3)
    for r, s in zip(reqs, samples):
        follow = r.prompt_ids + s.token_ids + [300]
        hits = sampler.cache.hits
        sampler._prefill(SampleRequest(follow, None, max_tokens=1), tiny_base.device)
        assert sampler.cache.hits - hits == len(r.prompt_ids) + len(s.token_ids) - 1


def test_prefill_computes_logits_for_the_last_position_only(tiny_base, tmp_path):
    """A 2,000-token prompt's full-vocabulary logits would be 2,000 × 49k floats (0.4 GB in fp32): sampling
    needs the last position's alone."""
    sampler = Sampler(Adapters(tiny_base, tmp_path), mode="deterministic")
    positions = []  # (input positions, logit positions) of each forward pass
    hook = tiny_base.model.register_forward_hook(
        lambda _, args, kwargs, out: positions.append((kwargs["input_ids"].shape[1], out.logits.shape[1])),
        with_kwargs=True)  # fmt: skip
    try:
        sampler.decode([SampleRequest(list(range(10, 310)), None, max_tokens=3, temperature=1.0, seed=0, ignore_eos=True)])
    finally:
        hook.remove()
    assert positions[0] == (300, 1)
    assert all(logits == 1 for _, logits in positions)


def decode_steps(model, on_step):
    """Calls on_step(batch rows) at every decoding step's forward pass (one new token per row)."""
    return model.register_forward_pre_hook(
        lambda _, args, kwargs: on_step(kwargs["input_ids"].shape[0]) if kwargs["input_ids"].shape[1] == 1 else None,
        with_kwargs=True)  # fmt: skip


def test_a_request_joins_the_running_batch_and_answers_before_the_longer_one(tiny_base, tmp_path):
    """Continuous batching: requests that arrive while a batch decodes join it — a shorter and a longer prompt
    than the batch's rows — draw the same tokens as they would alone, answer as soon as they finish, and leave
    keys the next turn reuses."""
    import torch

    sampler = Sampler(Adapters(tiny_base, tmp_path), mode="throughput", prefix_cache_mb=64)
    long = SampleRequest(list(range(10, 50)), None, max_tokens=30, temperature=1.0, seed=1, ignore_eos=True)
    late = [SampleRequest(list(range(100, 110)), None, max_tokens=4, temperature=1.0, seed=2, ignore_eos=True),
            SampleRequest(list(range(200, 290)), None, max_tokens=6, temperature=1.0, seed=3, ignore_eos=True)]  # fmt: skip
    rows, futures, answered = [], [], []

    def on_step(batch_rows: int):
        rows.append(batch_rows)
        if len(rows) == 3:  # mid-batch: both arrive
            futures.extend(sampler.submit(r) for r in late)
            for name, f in zip(["short", "wide"], futures):
                f.add_done_callback(lambda _, name=name: answered.append(name))

    hook = decode_steps(tiny_base.model, on_step)
    try:
        first = sampler.submit(long)
        first.add_done_callback(lambda _: answered.append("long"))
        samples = [first.result()] + [f.result() for f in futures]
    finally:
        hook.remove()
    assert max(rows) == 3  # both joined the long request's batch
    assert answered == ["short", "wide", "long"]
    assert [len(s.token_ids) for s in samples] == [30, 4, 6]
    reqs = [long, *late]
    alone = [Sampler(Adapters(tiny_base, tmp_path / f"alone-{i}"), mode="deterministic").decode([r])[0]
             for i, r in enumerate(reqs)]  # fmt: skip
    for joined, single in zip(samples, alone):
        assert joined.token_ids == single.token_ids
        assert torch.allclose(torch.tensor(joined.logprobs), torch.tensor(single.logprobs), atol=1e-3)
    for r, s in zip(reqs, samples):
        hits = sampler.cache.hits
        sampler._prefill(SampleRequest(r.prompt_ids + s.token_ids + [300], None, max_tokens=1), tiny_base.device)
        assert sampler.cache.hits - hits == len(r.prompt_ids) + len(s.token_ids) - 1


def test_nothing_joins_a_batch_while_a_train_step_waits_for_the_weights(tiny_base, tmp_path):
    """A train step (or an adapter load) waits for the running batch's rows, not for a stream of new ones."""
    import time

    adapters = Adapters(tiny_base, tmp_path)
    sampler = Sampler(adapters, mode="throughput")
    rows, late = [], []
    trainer = threading.Thread(target=lambda: adapters.lock.__enter__() and adapters.lock.__exit__())

    def on_step(batch_rows: int):
        rows.append(batch_rows)
        if len(rows) == 3:
            trainer.start()
            while not adapters.lock.waiting:
                time.sleep(0.001)
            late.append(sampler.submit(SampleRequest(list(range(100, 110)), None, max_tokens=4, seed=2, ignore_eos=True)))

    hook = decode_steps(tiny_base.model, on_step)
    try:
        sampler.submit(SampleRequest(list(range(10, 50)), None, max_tokens=12, seed=1, ignore_eos=True)).result()
        late[0].result()
        trainer.join()
    finally:
        hook.remove()
    assert max(rows) == 1  # the late request decoded alone, after the batch it found running


def test_adapters_with_equal_weights_share_samples_cache_and_batches_until_one_trains(tiny_base, tmp_path):
    """Two runs started from one checkpoint with one seed ask for the same samples under two adapter names."""
    import torch

    adapters = Adapters(tiny_base, tmp_path)
    for name in ("run_a", "run_b"):
        adapters.create(name, LoraSettings(rank=4, alpha=8, init_seed="7:policy"))
    sampler = Sampler(adapters, mode="throughput", prefix_cache_mb=64)
    prompt = list(range(10, 50))
    asks = [SampleRequest(prompt, name, max_tokens=6, temperature=1.0, seed=3, ignore_eos=True) for name in ("run_a", "run_b")]
    a, b = sampler.decode(asks)
    assert a.token_ids == b.token_ids and len(a.token_ids) == 6
    assert sampler.usage["shared_samples"] == 1 and sampler.cache.misses == 40
    late = sampler.submit(SampleRequest(prompt, "run_b", max_tokens=6, temperature=1.0, seed=3, ignore_eos=True)).result()
    assert late.token_ids == a.token_ids and sampler.usage["shared_samples"] == 2  # a recent sample, not recomputed
    with adapters.lock, sampler._adapters_for(["run_a", "run_b"]) as (_, extra):
        assert extra == {}  # one adapter's batch, not PEFT's split by adapter

    with torch.no_grad():  # run_b trains
        for p in adapters.trainable_parameters("run_b"):
            p.add_(0.05)
    adapters.changed("run_b")
    moved = sampler.submit(SampleRequest(prompt, "run_b", max_tokens=6, temperature=1.0, seed=3, ignore_eos=True)).result()
    assert sampler.usage["shared_samples"] == 2 and sampler.cache.misses == 80  # computed anew, prompt included
    assert moved.logprobs != a.logprobs
    with adapters.lock, sampler._adapters_for(["run_a", "run_b"]) as (_, extra):
        assert extra == {"adapter_names": ["run_a", "run_b"]}


def test_a_request_whose_adapter_was_unloaded_while_it_waited_fails_alone(tiny_base, tmp_path):
    """A sampling host that follows a trainer evicts old step adapters while requests for them may wait."""
    from evalrl_trainer import checkpoints

    adapters = Adapters(tiny_base, tmp_path)
    adapters.create("policy", LoraSettings(rank=4, alpha=8))
    adapters.load_external("policy@step-0", checkpoints.adapter_weights_path(tmp_path, "policy", 0))
    sampler = Sampler(adapters, mode="throughput", gather_ms=200)
    with adapters.lock:  # both wait in the queue while the step adapter goes
        gone = sampler.submit(SampleRequest(list(range(10, 30)), "policy@step-0", max_tokens=3, seed=1))
        kept = sampler.submit(SampleRequest(list(range(10, 30)), "policy", max_tokens=3, seed=1))
        adapters.unload("policy@step-0")
    assert len(kept.result(timeout=60).token_ids) > 0
    assert gone.exception(timeout=60) is not None


def test_top_k_and_min_p_truncate_the_tempered_distribution_as_vllm_does():
    torch = __import__("torch")
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])
    g = torch.Generator().manual_seed(0)
    draw = lambda **kw: {Sampler._sample(logits, SampleRequest([1], None, 1, temperature=5.0, **kw), g) for _ in range(400)}  # noqa: E731
    assert draw() == {0, 1, 2, 3, 4}  # hot enough that every token is drawn
    assert draw(top_k=2) == {0, 1}
    assert draw(top_k=-1) == draw(top_k=0) == {0, 1, 2, 3, 4}  # both mean "keep all", as in vLLM
    # min_p keeps tokens whose tempered probability is at least min_p × the largest: exp(-0.2k) ≥ 0.7 → k ≤ 1
    assert draw(min_p=0.7) == {0, 1}
