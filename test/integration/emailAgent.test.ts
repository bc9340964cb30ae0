import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import type { Config } from '../../src/config';
import { createPool } from '../../src/db/pool';
import { runEpisode, type AgentSettings, type EpisodeQuestion } from '../../src/env/emailAgent';
import { runEmailTool } from '../../src/env/emailTools';
import { loadTrajectory, storeTrajectory } from '../../src/env/trajectoryStore';
import type { EpisodeFacts } from '../../src/env/trajectory';
import { deterministicReward, rewardWeightsSchema } from '../../src/reward/deterministic';
import { judge } from '../../src/reward/judge';
import { storeJudgement } from '../../src/reward/judgementStore';
import { teacherLabel } from '../../src/reward/teacher';
import { loadSkills } from '../../src/reward/skills';
import { runVerifier, VERIFIERS } from '../../src/reward/verifiers';
import { stopModelServer } from '../../src/stack/modelServer';
import { episodeFacts } from '../episodeFacts';
import { loadTestQuestion } from './runFixtures';
import { cli, stackConfig, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';

jest.setTimeout(300_000);

const pool = createPool(stackConfig());
const dir = tempDataDir('evalrl-agent-');
let server: Config;
let llm: OpenAI;
let question: EpisodeQuestion & { id: string; answer: string; messageIds: string[] };
const settings = (over: Partial<AgentSettings> = {}): AgentSettings => ({
  model: 'base',
  maxTurns: 4,
  contextTokens: 2048,
  maxTokensPerTurn: 48,
  temperature: 1,
  topP: 1,
  seed: 11,
  timeoutMs: 120_000,
  demonstration: true,
  ...over,
});

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  question = await loadTestQuestion(pool);
  server = await startTinyModelServer(dir, 18002);
  llm = new OpenAI({ baseURL: `${server.modelServer.url}/v1`, apiKey: 'unused' });
});
afterAll(async () => {
  await stopModelServer(server);
  await pool.end();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('email tools inside an episode scope', () => {
  const scope = () => ({ inbox: 'allen-p', queryDate: new Date('2002-01-01') });
  it('search and read the inbox, and only it', async () => {
    const search = await runEmailTool(
      pool,
      scope(),
      'search_emails',
      JSON.stringify({ keywords: ['lease', 'tenant'] }),
    );
    expect(search.kind).toBe('result');
    const ids = search.kind === 'result' ? search.searchedIds! : [];
    expect(ids.length).toBeGreaterThan(0);
    const read = await runEmailTool(pool, scope(), 'read_email', JSON.stringify({ message_id: ids[0] }));
    expect(read).toMatchObject({ kind: 'result', readId: ids[0] });
    const other = await runEmailTool(
      pool,
      { inbox: 'carson-m', queryDate: new Date('2002-01-01') },
      'read_email',
      JSON.stringify({ message_id: ids[0] }),
    );
    expect(other).toMatchObject({ kind: 'result', content: expect.stringMatching(/no email with id/) });
    expect(other.kind === 'result' && other.readId).toBeFalsy();
  });
  it('classify unknown tools, bad JSON and bad arguments as errors for the model', async () => {
    expect(await runEmailTool(pool, scope(), 'delete_everything', '{}')).toMatchObject({
      kind: 'unknown_tool',
    });
    expect(await runEmailTool(pool, scope(), 'search_emails', '{not json')).toMatchObject({
      kind: 'bad_arguments',
    });
    expect(
      await runEmailTool(pool, scope(), 'search_emails', JSON.stringify({ keywords: 'lease' })),
    ).toMatchObject({
      kind: 'bad_arguments',
      content: expect.stringMatching(/keywords/),
    });
    expect(
      await runEmailTool(
        pool,
        scope(),
        'return_final_answer',
        JSON.stringify({ answer: 'x', sources: ['<1>'] }),
      ),
    ).toEqual({
      kind: 'final',
      answer: 'x',
      sources: ['<1>'],
    });
  });
});

describe('episodes against the real model server', () => {
  it('run to an ending, record sampled tokens, and store once under their key', async () => {
    const t = await runEpisode(llm, pool, question, settings());
    expect(['answered', 'max_turns', 'malformed', 'context_budget']).toContain(t.facts.ending);
    expect(t.facts.turns).toBeGreaterThan(0);
    expect(t.facts.turns).toBeLessThanOrEqual(4);
    expect(t.turns).toHaveLength(t.facts.turns);
    for (const turn of t.turns) {
      expect(turn.tokenIds!.length).toBe(turn.logprobs!.length);
      expect(turn.promptTokenIds!.length).toBeGreaterThan(0);
    }
    // a random tiny model writes no valid calls: each is counted and answered with an error message
    expect(t.facts.malformedCalls + t.facts.unknownTools + t.facts.badArguments).toBeGreaterThan(0);
    expect(t.messages[0].content).toContain(question.inboxAddress!);
    expect(t.messages[0].content).toContain(question.queryDate.toISOString().slice(0, 10));

    const key = { runId: `test-${Date.now()}`, stage: 'policy', step: 1, taskId: question.id, sample: 0 };
    const first = await storeTrajectory(pool, key, question.id, t);
    const again = await storeTrajectory(
      pool,
      key,
      question.id,
      await runEpisode(llm, pool, question, settings()),
    );
    expect(again).toEqual({ id: first.id, inserted: false });
    const stored = await loadTrajectory(pool, first.id);
    expect(stored.facts).toEqual(t.facts);
    const weights = rewardWeightsSchema.parse({});
    const gold = { answer: question.answer, messageIds: question.messageIds };
    expect(deterministicReward(stored.facts, gold, 4, weights)).toEqual(
      deterministicReward(t.facts, gold, 4, weights),
    );
  });

  it('replays the same episode from the same seed (deterministic server)', async () => {
    const a = await runEpisode(llm, pool, question, settings({ maxTurns: 2 }));
    const b = await runEpisode(llm, pool, question, settings({ maxTurns: 2 }));
    expect(b.turns.map((t) => t.tokenIds)).toEqual(a.turns.map((t) => t.tokenIds));
  });

  it('stops at the context budget instead of sending an oversized request', async () => {
    const t = await runEpisode(llm, pool, question, settings({ contextTokens: 200 }));
    expect(t.facts.ending).toBe('context_budget');
    expect(t.facts.turns).toBe(0);
  });
});

describe('Skill-RM', () => {
  const skills = loadSkills(path.resolve(__dirname, '../../skills'), Object.keys(VERIFIERS));
  const scope = () => ({ inbox: 'allen-p', queryDate: new Date('2002-01-01') });
  const leaseId = '<9400496.1075855729384.JavaMail.evans@thyme>';
  const facts = (over: Partial<EpisodeFacts>) =>
    episodeFacts({
      answer: 'phillip.allen@enron.com',
      sources: [leaseId],
      searchedIds: [leaseId],
      readIds: [leaseId],
      turns: 3,
      ...over,
    });
  const ctx = (f: EpisodeFacts, reference = 'phillip.allen@enron.com') => ({
    pool,
    scope: scope(),
    reference,
    facts: f,
  });

  it('verifiers judge hand-checked cases from the real mail', async () => {
    // allen-p/_sent_mail/601.: Phillip Allen to stagecoachmama@hotmail.com on 2000-12-14 about the lease data.
    expect((await runVerifier('answer_matches_reference', ctx(facts({})))).passed).toBe(true);
    expect(
      await runVerifier('answer_matches_reference', ctx(facts({ answer: 'On 2000-12-15' }), '2000-12-14')),
    ).toMatchObject({ passed: false, critical: true });
    expect((await runVerifier('sources_are_real', ctx(facts({})))).passed).toBe(true);
    const invented = await runVerifier('sources_are_real', ctx(facts({ sources: ['<made.up@thyme>'] })));
    expect(invented).toMatchObject({ passed: false, critical: true });
    const otherInbox = await runVerifier('sources_are_real', {
      ...ctx(facts({})),
      scope: { inbox: 'carson-m' },
    });
    expect(otherInbox.passed).toBe(false); // real id, but not this inbox's mail
    const supported = await runVerifier(
      'answer_supported_by_read_emails',
      ctx(facts({ answer: 'stagecoachmama@hotmail.com, about the lease' })),
    );
    expect(supported.passed).toBe(true);
    const unsupported = await runVerifier(
      'answer_supported_by_read_emails',
      ctx(facts({ answer: 'quarterly pipeline tariff dispute' })),
    );
    expect(unsupported.passed).toBe(false);
    expect((await runVerifier('format_valid', ctx(facts({ malformedCalls: 1 })))).passed).toBe(false);
  });

  it.each(['skill', 'baseline'] as const)(
    'a judge that never gives a valid verdict is a flagged failure (%s mode)',
    async (mode) => {
      const trajectory = { messages: [], turns: [], facts: facts({}), wallMs: 1 };
      const j = await judge(
        llm,
        pool,
        skills,
        { question: question.question, reference: question.answer, scope: scope(), trajectory },
        {
          model: 'base',
          mode,
          maxTurns: 3,
          maxTokensPerTurn: 32,
          temperature: 1,
          seed: 5,
          retries: 1,
          timeoutMs: 120_000,
        },
      );
      expect(j).toMatchObject({ failed: true, score: 0, verdict: null });
      expect(j.failure).toMatch(/verdict/);
      expect(j.turns.length).toBeGreaterThan(0);
      expect(j.turns[0].tokenIds!.length).toBe(j.turns[0].logprobs!.length); // the RM stage can train on it
      const key = {
        runId: `judge-${mode}-${Date.now()}`,
        stage: 'policy',
        step: 1,
        taskId: question.id,
        sample: 0,
      };
      const { id } = await storeTrajectory(pool, key, question.id, trajectory);
      const first = await storeJudgement(pool, id, `base/${mode}/0`, 'base', j);
      expect(await storeJudgement(pool, id, `base/${mode}/0`, 'base', j)).toBe(first);
    },
  );
});

describe('teacher labels', () => {
  it('come from the deterministic layer without a teacher, and are cached per trajectory', async () => {
    const weights = rewardWeightsSchema.parse({});
    const trajectory = {
      messages: [],
      turns: [],
      facts: episodeFacts({
        answer: question.answer,
        sources: question.messageIds,
        searchedIds: question.messageIds,
        turns: 2,
      }),
      wallMs: 1,
    };
    const key = {
      runId: `label-${Date.now()}`,
      stage: 'reward-model',
      step: 1,
      taskId: question.id,
      sample: 0,
    };
    const { id } = await storeTrajectory(pool, key, question.id, trajectory);
    const gold = { answer: question.answer, messageIds: question.messageIds };
    const label = await teacherLabel(pool, id, question.question, gold, trajectory, weights, 4);
    expect(label).toMatchObject({ correct: true, source: 'deterministic' });
    const cached = await teacherLabel(
      pool,
      id,
      question.question,
      { ...gold, answer: 'something else' },
      trajectory,
      weights,
      4,
    );
    expect(cached).toEqual(label);
  });

  it('from a teacher endpoint that cannot produce a label: a clear error, nothing cached', async () => {
    const weights = rewardWeightsSchema.parse({});
    const trajectory = {
      messages: [],
      turns: [],
      facts: episodeFacts({ answer: 'x' }),
      wallMs: 1,
    };
    const key = {
      runId: `label-teacher-${Date.now()}`,
      stage: 'reward-model',
      step: 1,
      taskId: question.id,
      sample: 0,
    };
    const { id } = await storeTrajectory(pool, key, question.id, trajectory);
    const teacher = { url: `${server.modelServer.url}/v1`, model: 'base' }; // a random tiny model: no parseable label
    await expect(
      teacherLabel(
        pool,
        id,
        question.question,
        { answer: 'y', messageIds: [] },
        trajectory,
        weights,
        4,
        teacher,
      ),
    ).rejects.toThrow(/no parseable label/);
    const { rows } = await pool.query('SELECT 1 FROM teacher_labels WHERE trajectory_id = $1', [id]);
    expect(rows).toHaveLength(0);
  });
});
