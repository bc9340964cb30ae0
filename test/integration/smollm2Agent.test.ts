import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { createPool } from '../../src/db/pool';
import { runEpisode } from '../../src/env/emailAgent';
import { startModelServer, stopModelServer } from '../../src/stack/modelServer';
import { mailboxOf } from '../../src/store/mailbox';
import { cli, stackConfig, tempDataDir, TEST_STACK_ENV } from './testStack';

jest.setTimeout(600_000);

// The one agent test on the real embedded model (SmolLM2-135M-Instruct, CPU, deterministic sampling).
const pool = createPool(stackConfig());
const dir = tempDataDir('evalrl-smollm2-');
const config = stackConfig({
  ...TEST_STACK_ENV,
  EVALRL_DATA_DIR: dir,
  EVALRL_MODEL_SERVER_URL: 'http://127.0.0.1:18003',
});

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  await startModelServer(config, {
    checkpoints: path.join(dir, 'checkpoints'),
    mode: 'deterministic',
    dtype: 'float32',
  });
});
afterAll(async () => {
  await stopModelServer(config);
  await pool.end();
  fs.rmSync(dir, { recursive: true, force: true });
});

it('SmolLM2 follows the harness into well-formed tool calls, and every episode ends cleanly', async () => {
  const { rows } = await pool.query(
    `SELECT q.question, q.inbox_id, q.query_date, i.address FROM questions q JOIN inboxes i ON i.id = q.inbox_id
     WHERE q.inbox_id = 'allen-p' AND q.source = 'template:who_sent' ORDER BY q.id LIMIT 1`,
  );
  const q = {
    question: rows[0].question,
    inbox: rows[0].inbox_id,
    inboxAddress: rows[0].address,
    queryDate: rows[0].query_date,
  };
  const llm = new OpenAI({ baseURL: `${config.modelServer.url}/v1`, apiKey: 'unused' });
  let wellFormed = 0;
  for (let seed = 0; seed < 8; seed++) {
    const t = await runEpisode(llm, mailboxOf(pool), q, {
      model: 'base',
      maxTurns: 3,
      contextTokens: 8192,
      maxTokensPerTurn: 64,
      temperature: 0.7,
      topP: 1,
      seed,
      timeoutMs: 300_000,
      demonstration: true,
      searchHits: 10,
      bodyChars: 4000,
    });
    expect(['answered', 'max_turns', 'malformed']).toContain(t.facts.ending);
    expect(t.turns.every((turn) => turn.tokenIds!.length === turn.logprobs!.length)).toBe(true);
    const calls = t.messages.slice(8).flatMap((m) => m.tool_calls ?? []); // after the worked example
    wellFormed += calls.filter((c) =>
      ['search_emails', 'read_email', 'return_final_answer'].includes(c.function.name),
    ).length;
  }
  expect(wellFormed).toBeGreaterThan(0);
});
