import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import type { Config } from '../../src/config';
import { createPool } from '../../src/db/pool';
import { runEpisode, type AgentSettings, type EpisodeQuestion } from '../../src/env/emailAgent';
import type { Turn } from '../../src/env/trajectory';
import { readEmail } from '../../src/mail/search';
import { ModelServerClient } from '../../src/modelServer/client';
import type { TrainSequence } from '../../src/modelServer/schemas';
import { deterministicReward, rewardWeightsSchema } from '../../src/reward/deterministic';
import { judge, type JudgeSettings } from '../../src/reward/judge';
import { loadSkills } from '../../src/reward/skills';
import { VERIFIERS } from '../../src/reward/verifiers';
import { stopModelServer } from '../../src/stack/modelServer';
import { loadTestQuestion } from './runFixtures';
import { cli, stackConfig, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';

/**
 * Complete episodes with every tool, from a real model. A LoRA adapter of the tiny model is taught the
 * tool protocol by a supervised warm start (objective "sft" of /train/step) on demonstrations whose prompts
 * come from real episodes of the harness: run the episode, find the first turn that strays from the script,
 * add that turn's rendered prompt with the scripted reply, train, run again (DAgger-style).
 */
jest.setTimeout(600_000);

const pool = createPool(stackConfig());
const dir = tempDataDir('evalrl-tool-protocol-');
let server: Config;
let llm: OpenAI;
let modelServer: ModelServerClient;
let question: EpisodeQuestion & { answer: string; goldId: string };

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  const q = await loadTestQuestion(pool);
  question = { ...q, goldId: q.messageIds[0] };
  server = await startTinyModelServer(dir, 18006, { initRange: 0.2 });
  llm = new OpenAI({ baseURL: `${server.modelServer.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  modelServer = new ModelServerClient({ url: server.modelServer.url });
});
afterAll(async () => {
  await stopModelServer(server);
  await pool.end();
  fs.rmSync(dir, { recursive: true, force: true });
});

const call = (name: string, args: object) =>
  `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

/** Teaches `adapter` to reply with `script[i]` at turn i of the episodes `run` produces; returns the rounds it took. */
async function teach(adapter: string, script: string[], run: (model: string) => Promise<Turn[]>) {
  const [endOfTurn] = await modelServer.tokenize({ prompt: '<|im_end|>' });
  const targets = await Promise.all(
    script.map(async (text) => [...(await modelServer.tokenize({ prompt: text })), endOfTurn]),
  );
  const demonstrations = new Map<string, TrainSequence>(); // one per distinct prompt and reply
  let step = 0;
  for (let round = 1; round <= 30; round++) {
    const turns = await run(step === 0 ? 'base' : adapter);
    const strays = targets.findIndex(
      (target, i) => !turns[i] || JSON.stringify(turns[i].tokenIds) !== JSON.stringify(target),
    );
    if (strays === -1) return round;
    const prompt = turns[strays]?.promptTokenIds;
    if (!prompt) throw new Error(`round ${round}: the episode ended before turn ${strays}`);
    const target = targets[strays];
    demonstrations.set(JSON.stringify([prompt, target]), {
      token_ids: [...prompt, ...target],
      mask: [...prompt.map(() => 0 as const), ...target.map(() => 1 as const)],
      logprobs: [...prompt, ...target].map(() => 0),
      advantage: 1,
    });
    for (let k = 0; k < 15; k++)
      await modelServer.trainStep({
        adapter,
        step: ++step,
        sequences: [...demonstrations.values()],
        hyperparameters: { objective: 'sft', learning_rate: 1e-2, micro_batch: 8 },
        lora: { rank: 32, alpha: 32 },
      });
  }
  throw new Error(`${adapter} did not learn the script in 30 rounds`);
}

const agent = (model: string): AgentSettings => ({
  model,
  maxTurns: 4,
  contextTokens: 4096,
  maxTokensPerTurn: 96,
  temperature: 0,
  topP: 1,
  timeoutMs: 120_000,
  demonstration: false,
});

it('an episode uses every tool: search, read, answer — with the right email and answer', async () => {
  const gold = await readEmail(
    pool,
    { inbox: question.inbox, queryDate: question.queryDate },
    question.goldId,
  );
  const keywords = (gold!.subject.toLowerCase().match(/[a-z]{4,}/g) ?? ['price']).slice(0, 2);
  const script = [
    call('search_emails', { keywords }),
    call('read_email', { message_id: question.goldId }),
    call('return_final_answer', { answer: question.answer, sources: [question.goldId] }),
  ];
  const rounds = await teach(
    'tool-protocol',
    script,
    async (model) => (await runEpisode(llm, pool, question, agent(model))).turns,
  );
  expect(rounds).toBeGreaterThan(1); // the untrained model did not already follow it

  const t = await runEpisode(llm, pool, question, agent('tool-protocol'));
  expect(t.messages.flatMap((m) => m.tool_calls ?? []).map((c) => c.function.name)).toEqual([
    'search_emails',
    'read_email',
    'return_final_answer',
  ]);
  expect(t.facts).toMatchObject({
    ending: 'answered',
    answer: question.answer,
    sources: [question.goldId],
    readIds: [question.goldId],
    malformedCalls: 0,
    unknownTools: 0,
    badArguments: 0,
    turns: 3,
  });
  expect(t.facts.searchedIds.length).toBeGreaterThan(0);
  const tool = t.messages.filter((m) => m.role === 'tool');
  expect(JSON.parse(tool[1].content!)).toMatchObject({ message_id: question.goldId, subject: gold!.subject });
  const reward = deterministicReward(
    t.facts,
    { answer: question.answer, messageIds: [question.goldId] },
    4,
    rewardWeightsSchema.parse({}),
  );
  expect(reward).toMatchObject({ correct: true, formatValid: true, readGold: true, sourcesRecall: 1 });
});

it('the Skill-RM judge loads a skill, runs its verifier and closes with a verdict the aggregation scores', async () => {
  const skills = loadSkills(path.resolve(__dirname, '../../skills'), Object.keys(VERIFIERS));
  const episode = await runEpisode(llm, pool, question, agent('tool-protocol')); // the taught agent's answer
  const verdict = {
    score: 0.9,
    satisfied_count: 2,
    total_count: 2,
    confidence: 0.8,
    used_resources: [],
    reason: 'matches',
  };
  const script = [
    call('load_skill', { name: 'answer-correctness' }),
    call('run_verifier', { name: 'answer_matches_reference' }),
    call('final_answer', verdict),
  ];
  const settings = (model: string): JudgeSettings => ({
    model,
    mode: 'skill',
    maxTurns: 4,
    maxTokensPerTurn: 96,
    temperature: 0,
    retries: 0,
    timeoutMs: 120_000,
  });
  const input = {
    question: question.question,
    reference: question.answer,
    scope: { inbox: question.inbox, queryDate: question.queryDate },
    trajectory: episode,
  };
  await teach(
    'judge-protocol',
    script,
    async (model) => (await judge(llm, pool, skills, input, settings(model))).turns,
  );

  const j = await judge(llm, pool, skills, input, settings('judge-protocol'));
  expect(j).toMatchObject({ failed: false, failure: null, skillsUsed: ['answer-correctness'], verdict });
  expect(j.evidence).toEqual([
    expect.objectContaining({ verifier: 'answer_matches_reference', passed: true }),
  ]);
  expect(j.score).toBe(1); // base 2/2; the verifier found the answer right, so no cap applies
  expect(j.turns.every((t) => t.tokenIds && t.tokenIds.length > 0 && t.logprobs)).toBe(true);
});
