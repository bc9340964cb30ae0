import http from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI, { APIError } from 'openai';
import { agentLoop, type LoopSettings } from '../../src/env/agentLoop';
import { ModelServerClient, ModelServerError } from '../../src/modelServer/client';

/** Issue 47: a busy (429) or restarting model server is waited for within a budget, not a failed run. */

function serve(
  port: number,
  answer: (path: string) => { status: number; body: unknown; headers?: Record<string, string> },
): Promise<http.Server> {
  const srv = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const { status, body, headers } = answer(req.url!);
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    });
  });
  return new Promise((resolve) => srv.listen(port, '127.0.0.1', () => resolve(srv)));
}

async function freePort(): Promise<number> {
  const srv = await serve(0, () => ({ status: 200, body: {} }));
  const { port } = srv.address() as AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

const PROGRESS = { adapter: 'policy', running: false, latest_step: 3 };

test('an idempotent call waits for a server that restarts for longer than its attempts take', async () => {
  const port = await freePort();
  const client = new ModelServerClient({ url: `http://127.0.0.1:${port}`, unreachableBudgetMs: 15_000 });
  let srv: http.Server | undefined;
  const back = setTimeout(async () => {
    srv = await serve(port, () => ({ status: 200, body: PROGRESS }));
  }, 5_000); // past the 4 attempts' 3.5 s of backoff
  try {
    const started = Date.now();
    expect(await client.trainProgress('policy')).toEqual(PROGRESS);
    expect(Date.now() - started).toBeGreaterThanOrEqual(5_000);
  } finally {
    clearTimeout(back);
    if (srv) await new Promise((resolve) => srv!.close(resolve));
  }
}, 30_000);

test('the wait for an unreachable server is bounded, and a chat (not idempotent) does not wait', async () => {
  const port = await freePort();
  const client = new ModelServerClient({
    url: `http://127.0.0.1:${port}`,
    attempts: 2,
    unreachableBudgetMs: 1_500,
  });
  const started = Date.now();
  await expect(client.trainProgress('policy')).rejects.toMatchObject({ unreachable: true, retryable: true });
  expect(Date.now() - started).toBeLessThan(5_000);
  const chat = { model: 'base', messages: [{ role: 'user' as const, content: 'x' }] };
  await expect(client.chat(chat)).rejects.toBeInstanceOf(ModelServerError);
});

test('a 429 is retried as the server asks (Retry-After), chat included, then answered', async () => {
  let calls = 0;
  const reply = {
    id: 'c',
    model: 'base',
    prompt_token_ids: [1],
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: 'hi' },
        finish_reason: 'stop',
        token_ids: [2],
        token_logprobs: [-0.1],
      },
    ],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
  const srv = await serve(0, () =>
    ++calls <= 2
      ? { status: 429, body: { error: { message: 'queue full' } }, headers: { 'retry-after': '1' } }
      : { status: 200, body: reply },
  );
  try {
    const client = new ModelServerClient({ url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}` });
    const started = Date.now();
    const answer = await client.chat({ model: 'base', messages: [{ role: 'user', content: 'x' }] });
    expect(answer.choices[0].message.content).toBe('hi');
    expect(calls).toBe(3);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_900); // waited the asked second twice
  } finally {
    await new Promise((resolve) => srv.close(resolve));
  }
}, 15_000);

test('a cancelled step (503) is a retryable failure, not a refusal', async () => {
  const srv = await serve(0, () => ({
    status: 503,
    body: { error: { message: "step 2 of 'policy' was cancelled; nothing was saved" } },
  }));
  try {
    const client = new ModelServerClient({
      url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
      attempts: 1,
    });
    const step = {
      adapter: 'policy',
      step: 2,
      sequences: [{ token_ids: [1, 2], mask: [0, 1], logprobs: [0, -1], advantage: 1 }],
    };
    await expect(client.trainStep(step as never)).rejects.toMatchObject({ status: 503, retryable: true });
  } finally {
    await new Promise((resolve) => srv.close(resolve));
  }
});

test("the agent loop waits out a busy sampler's 429 instead of failing the episode as a bad request", async () => {
  let turn = 0;
  const create = async () => {
    turn++;
    if (turn === 1) throw new APIError(429, { message: 'busy' }, 'busy', new Headers({ 'retry-after': '1' }));
    throw new APIError(
      400,
      { message: "prompt exceeds the model's context" },
      "prompt exceeds the model's context",
      new Headers(),
    );
  };
  const llm = { chat: { completions: { create } } } as unknown as OpenAI;
  const settings: LoopSettings = {
    model: 'policy',
    maxTurns: 3,
    contextTokens: 2048,
    maxTokensPerTurn: 64,
    temperature: 0,
    topP: 1,
    timeoutMs: 1000,
  };
  const ended = await agentLoop(llm, [], [], settings, { call: async () => ({ content: '' }) });
  expect(ended.ending).toBe('context_budget');
  expect(turn).toBe(2);
}, 15_000);
