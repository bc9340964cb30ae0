import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ModelServerClient } from '../../src/modelServer/client';
import type { TrainSequence } from '../../src/modelServer/schemas';
import { chunkSequences } from '../../src/modelServer/trainChunks';

/** Sequence `i` of `n` tokens: its first id tells sequences apart. */
const sequence = (i: number, n: number): TrainSequence => ({
  token_ids: [i, ...Array.from({ length: n - 1 }, (_, t) => 1000 + t)],
  mask: Array.from({ length: n }, (_, t) => (t < n / 2 ? 0 : 1)),
  logprobs: Array.from({ length: n }, (_, t) => (t < n / 2 ? 0 : -0.123456)),
  advantage: i % 2 ? 1 : -0.5,
});
const step = (lengths: number[]) => lengths.map((n, i) => sequence(i, n));

test('chunks stay under the budget, keep the order and hold every sequence once', () => {
  const sequences = step([40, 300, 12, 80, 80, 5, 200, 33, 150, 64]);
  const budget = 5_000; // the longest sequence's JSON is 3,948 bytes
  const chunks = chunkSequences(sequences, budget);
  expect(chunks.length).toBeGreaterThan(2);
  for (const chunk of chunks) expect(JSON.stringify(chunk).length).toBeLessThanOrEqual(budget);
  expect(chunks.flat()).toEqual(sequences);
  expect(chunkSequences(sequences, 1e9)).toEqual([sequences]);
});

test('a sequence larger than the budget goes alone', () => {
  const sequences = step([10, 900, 10]);
  expect(chunkSequences(sequences, 1_000).map((c) => c.map((s) => s.token_ids[0]))).toEqual([[0], [1], [2]]);
});

const RESULT = {
  adapter: 'policy', step: 1, loss: 0.5, clip_fraction: 0, approx_kl_old: 0, kl_ref: 0, entropy: 1, grad_norm: 1,
  tokens: 10, seconds: 1, learning_rate: 1e-5, checkpoint: '/c', sha256: 'ab', cached: false,
}; // prettier-ignore

/** A model server that records what it is sent; its first staged step answers that the chunks went. */
async function trainServer() {
  const received: { path: string; body: Record<string, unknown> }[] = [];
  let refused = false;
  const srv = http.createServer((req, res) => {
    let text = '';
    req.on('data', (part) => (text += part));
    req.on('end', () => {
      const body = JSON.parse(text);
      received.push({ path: req.url!, body });
      if (req.url === '/train/step' && body.upload && !refused) {
        refused = true;
        res.statusCode = 409;
        res.end(JSON.stringify({ error: { message: 'upload: chunks [1] of 2 are not staged' } }));
        return;
      }
      res.end(JSON.stringify(req.url === '/train/step' ? RESULT : { staged: body.index }));
    });
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  return { url, received, close: () => new Promise((resolve) => srv.close(resolve)) };
}

test('a large step is staged in chunks, each sequence once, then trained as one step', async () => {
  const server = await trainServer();
  try {
    const chunkBytes = 5_000;
    const client = new ModelServerClient({ url: server.url, chunkBytes, attempts: 2 });
    const sequences = step([40, 300, 12, 80, 80, 5, 200, 33, 150, 64, 300, 7]);
    const n = chunkSequences(sequences, chunkBytes).length;
    expect(n).toBeGreaterThan(2);
    const request = { adapter: 'policy', step: 1, sequences, hyperparameters: { learning_rate: 1e-5 } };
    expect(await client.trainStep(request)).toMatchObject({ loss: 0.5, mismatch_kl: 0 });
    // Staged, refused once (the chunks went), staged again, trained: two rounds of n chunks and a step.
    expect(server.received).toHaveLength(2 * (n + 1));
    for (const round of [server.received.slice(0, n + 1), server.received.slice(n + 1)]) {
      const [commit, chunks] = [round[n], round.slice(0, n)];
      expect(chunks.map((c) => [c.path, c.body.index])).toEqual(
        chunks.map((_, i) => ['/train/step/chunk', i]),
      );
      for (const c of chunks) expect(JSON.stringify(c.body.sequences).length).toBeLessThanOrEqual(chunkBytes);
      expect(chunks.flatMap((c) => c.body.sequences as TrainSequence[])).toEqual(sequences);
      expect(commit.path).toBe('/train/step');
      expect(commit.body).toEqual({
        adapter: 'policy',
        step: 1,
        hyperparameters: { learning_rate: 1e-5 },
        upload: { id: expect.stringMatching(/^[0-9a-f]{64}$/), chunks: n },
      });
      for (const c of chunks) expect(c.body.upload).toEqual(commit.body.upload);
    }
    server.received.length = 0;
    await client.trainStep({ ...request, sequences: sequences.slice(0, 3) }); // small: sent whole
    expect(server.received.map((r) => [r.path, (r.body.sequences as unknown[]).length])).toEqual([
      ['/train/step', 3],
    ]);
  } finally {
    await server.close();
  }
});
