import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import type { Config } from '../../src/config';
import { createPool } from '../../src/db/pool';
import { runEpisode, type AgentSettings, type EpisodeQuestion } from '../../src/env/emailAgent';
import { MessageHandles, runEmailTool } from '../../src/env/emailTools';
import { labelOnce, type EnvDeps } from '../../src/env/episodes';
import type { EpisodeFacts, Trajectory } from '../../src/env/trajectory';
import { ModelServerClient } from '../../src/modelServer/client';
import { deterministicReward, rewardWeightsSchema } from '../../src/reward/deterministic';
import { judge, type JudgeSettings } from '../../src/reward/judge';
import { loadSkills } from '../../src/reward/skills';
import { availableVerifiers, runVerifier } from '../../src/reward/verifiers';
import { stopModelServer } from '../../src/stack/modelServer';
import { createStore } from '../../src/store';
import { episodeFacts } from '../episodeFacts';
import { loadTestQuestion } from './runFixtures';
import { cli, stackConfig, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';

jest.setTimeout(300_000);

const pool = createPool(stackConfig());
const store = createStore(pool);
const mailbox = store.mailbox;
const dir = tempDataDir('evalrl-agent-');
const W = rewardWeightsSchema.parse({});
const LIMITS = { searchHits: 10, bodyChars: 4000 };
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
  ...LIMITS,
  ...over,
});
const judgeSettings = (over: Partial<JudgeSettings> = {}): JudgeSettings => ({
  model: 'base',
  mode: 'skill',
  reference: 'visible',
  maxTurns: 3,
  contextTokens: 2048,
  maxTokensPerTurn: 32,
  temperature: 1,
  topP: 1,
  seed: 5,
  retries: 1,
  timeoutMs: 120_000,
  ...over,
});
const key = (tag: string) => ({
  runId: `${tag}-${Date.now()}`,
  stage: 'policy',
  step: 1,
  taskId: question.id,
  sample: 0,
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
  /** A tool call in a new episode of allen-p's inbox. */
  const tool = (name: string, args: Record<string, unknown>) =>
    runEmailTool(mailbox, scope(), name, args, LIMITS, new MessageHandles());
  it('search and read the inbox, and only it', async () => {
    const search = await tool('search_emails', { keywords: ['lease', 'tenant'] });
    expect(search.kind).toBe('result');
    const ids = search.kind === 'result' ? search.searchedIds! : [];
    expect(ids.length).toBeGreaterThan(0);
    const read = await tool('read_email', { message_id: ids[0] });
    expect(read).toMatchObject({ kind: 'result', readId: ids[0] });
    const other = await runEmailTool(
      mailbox,
      { inbox: 'carson-m', queryDate: new Date('2002-01-01') },
      'read_email',
      { message_id: ids[0] },
      LIMITS,
      new MessageHandles(),
    );
    expect(other).toMatchObject({ kind: 'result', content: expect.stringMatching(/no email with id/) });
    expect(other.kind === 'result' && other.readId).toBeFalsy();
    const few = await runEmailTool(
      mailbox,
      scope(),
      'search_emails',
      { keywords: ['lease'] },
      { ...LIMITS, searchHits: 2 },
      new MessageHandles(),
    );
    expect(few.kind === 'result' && few.searchedIds!.length).toBe(2);
  });
  it('show messages under short episode handles, and resolve them back to real ids', async () => {
    const handles = new MessageHandles();
    const search = await runEmailTool(
      mailbox,
      scope(),
      'search_emails',
      { keywords: ['lease'] },
      LIMITS,
      handles,
    );
    const shown = search.kind === 'result' ? search.content : '';
    expect(shown).toMatch(/^m1 \| \d{4}-\d{2}-\d{2} \| \S+@\S+ \| /);
    expect(shown).not.toMatch(/JavaMail/); // the real ids stay out of what the model reads
    const read = await runEmailTool(mailbox, scope(), 'read_email', { message_id: 'm1' }, LIMITS, handles);
    expect(read).toMatchObject({
      kind: 'result',
      readId: search.kind === 'result' && search.searchedIds![0],
    });
    expect(read.kind === 'result' && read.content).toMatch(/^id: m1\nfrom: \S+@\S+\nto: /);
    const final = await runEmailTool(
      mailbox,
      scope(),
      'return_final_answer',
      { answer: 'x', sources: ['m1', '<made@up>'] },
      LIMITS,
      handles,
    );
    expect(final).toMatchObject({
      kind: 'final',
      sources: [search.kind === 'result' && search.searchedIds![0], '<made@up>'],
    });
  });
  it('classify unknown tools and bad arguments as errors for the model', async () => {
    expect(await tool('delete_everything', {})).toMatchObject({
      kind: 'unknown_tool',
    });
    expect(await tool('search_emails', { keywords: 'lease' })).toMatchObject({
      kind: 'bad_arguments',
      content: expect.stringMatching(/keywords/),
    });
    expect(await tool('return_final_answer', { answer: 'x', sources: ['<1>'] })).toEqual({
      kind: 'final',
      answer: 'x',
      sources: ['<1>'],
    });
  });
  it('hostile calls are tool errors: prototype names, NUL characters, over-long fields', async () => {
    for (const name of ['constructor', 'toString', '__proto__', 'hasOwnProperty'])
      expect(await tool(name, {})).toMatchObject({
        kind: 'unknown_tool',
      });
    expect(await tool('search_emails', { keywords: ['lea\u0000se'], from: 'a\u0000b' })).toMatchObject({
      kind: 'result',
    });
    expect(await tool('read_email', { message_id: '<1\u0000@x>' })).toMatchObject({
      kind: 'result',
      content: expect.stringMatching(/no email/),
    });
    expect(await tool('return_final_answer', { answer: 'x'.repeat(3000) })).toMatchObject({
      kind: 'bad_arguments',
    });
  });
});

describe('episodes against the real model server', () => {
  it('run to an ending, record sampled tokens, and store once under their key', async () => {
    const t = await runEpisode(llm, mailbox, question, settings());
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

    const gold = { answer: question.answer, messageIds: question.messageIds };
    const k = key('store');
    const first = await store.episodes.storeEpisode(
      k,
      question.id,
      t,
      deterministicReward(t.facts, gold, 4, W),
    );
    // A second attempt that finished the same key later: the first one's episode AND reward are kept.
    const other = await runEpisode(llm, mailbox, question, settings({ seed: 12 }));
    const otherReward = { ...deterministicReward(other.facts, gold, 4, W), total: 123 };
    const again = await store.episodes.storeEpisode(k, question.id, other, otherReward);
    expect(again.id).toBe(first.id);
    expect(again.reward).toEqual(first.reward);
    expect(again.trajectory.facts).toEqual(t.facts);
    expect((await store.episodes.findEpisode(k))!.reward.total).not.toBe(123);
  });

  it('replays the same episode from the same seed (deterministic server)', async () => {
    const a = await runEpisode(llm, mailbox, question, settings({ maxTurns: 2 }));
    const b = await runEpisode(llm, mailbox, question, settings({ maxTurns: 2 }));
    expect(b.turns.map((t) => t.tokenIds)).toEqual(a.turns.map((t) => t.tokenIds));
  });

  it('stops at the context budget instead of sending an oversized request', async () => {
    const t = await runEpisode(llm, mailbox, question, settings({ contextTokens: 200 }));
    expect(t.facts.ending).toBe('context_budget');
    expect(t.facts.turns).toBe(0);
  });

  it('stores what a model wrote even with NUL characters and broken surrogates in it', async () => {
    const facts = episodeFacts({ answer: 'a\u0000b \ud800', sources: ['<x\u0000>'], turns: 1 });
    const t: Trajectory = {
      messages: [{ role: 'assistant', content: 'bad \u0000 text \udc00', tool_calls: [
        { id: 'c', type: 'function', function: { name: 'return_final_answer', arguments: '{"answer": "a\\u0000b"}' } }] }],
      turns: [],
      facts,
      wallMs: 1,
    }; // prettier-ignore
    const stored = await store.episodes.storeEpisode(
      key('nul'),
      question.id,
      t,
      deterministicReward(facts, { answer: 'x', messageIds: ['<g>'] }, 4, W),
    );
    const back = await store.episodes.loadEpisode(stored.id);
    expect(back!.trajectory.facts.answer).toBe('a\uFFFDb \uFFFD');
  });
});

describe('Skill-RM', () => {
  const skills = loadSkills(
    path.resolve(__dirname, '../../skills'),
    availableVerifiers(true),
    availableVerifiers(false),
  );
  const scope = () => ({ inbox: 'allen-p', queryDate: new Date('2002-01-01') });
  // allen-p/_sent_mail/601.: Phillip Allen to stagecoachmama@hotmail.com on 2000-12-14 about the lease data.
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
  const ctx = (
    f: EpisodeFacts,
    reference: string | null = 'phillip.allen@enron.com',
    q = 'Who sent the lease data?',
  ) => ({
    mailbox,
    scope: scope(),
    question: q,
    reference,
    facts: f,
  });

  it('verifiers judge hand-checked cases from the real mail', async () => {
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
    expect((await runVerifier('format_valid', ctx(facts({ malformedCalls: 1 })))).passed).toBe(false);
  });

  it('reference-free verifiers say where in the cited email an answer is, and whether it is the asked-for email', async () => {
    const sender = await runVerifier('answer_in_cited_email', ctx(facts({}), null));
    expect(sender).toMatchObject({ passed: true, detail: expect.stringMatching(/from/) });
    const recipient = await runVerifier(
      'answer_in_cited_email',
      ctx(facts({ answer: 'stagecoachmama@hotmail.com' }), null),
    );
    expect(recipient).toMatchObject({
      passed: false,
      critical: true, // a recipient does not answer "who sent"
      detail: expect.stringMatching(/cited email's to, not in its from/),
    });
    const date = await runVerifier(
      'answer_in_cited_email',
      ctx(facts({ answer: '2000-12-14' }), null, 'On what date was the lease data sent?'),
    );
    expect(date).toMatchObject({ passed: true, detail: expect.stringMatching(/date/) });
    const invented = await runVerifier(
      'answer_in_cited_email',
      ctx(facts({ answer: 'quarterly pipeline tariff' }), null),
    );
    expect(invented).toMatchObject({ passed: false, critical: true }); // made up: as bad as an invented source
    const unread = await runVerifier('answer_in_cited_email', ctx(facts({ readIds: [] }), null));
    expect(unread).toMatchObject({ passed: false, detail: 'no cited email was read' });
    const email = (await mailbox.read(scope(), leaseId))!;
    const right = await runVerifier(
      'cited_email_matches_question',
      ctx(facts({}), null, `Who sent me the email with the subject "${email.subject}"?`),
    );
    expect(right.passed).toBe(true);
    const wrong = await runVerifier(
      'cited_email_matches_question',
      ctx(facts({}), null, 'Who sent me the email with the subject "Gas tariff filing"?'),
    );
    expect(wrong.passed).toBe(false);
    // Named without a quote: by a phrase of its body (it has no subject, so no topic can name it).
    const matches = (q: string) => runVerifier('cited_email_matches_question', ctx(facts({}), null, q));
    expect(await matches('Who sent me the email that mentions tenant data?')).toMatchObject({
      passed: true,
      detail: expect.stringMatching(/mention/),
    });
    expect(await matches('Who sent me the email that mentions the gas tariff?')).toMatchObject({
      passed: false,
      critical: true,
    });
    expect((await matches('Who sent me the email about lease data?')).passed).toBe(false);
    expect(
      (await matches('Who sent me the email phillip.allen@enron.com sent me on 2000-12-14?')).passed,
    ).toBe(true);
    await expect(runVerifier('answer_matches_reference', ctx(facts({}), null))).rejects.toThrow(
      /needs the reference/,
    );
  });

  it.each(['skill', 'baseline'] as const)(
    'a judge that never gives a valid verdict is a flagged failure (%s mode)',
    async (mode) => {
      const trajectory = { messages: [], turns: [], facts: facts({}), wallMs: 1 };
      const j = await judge(
        llm,
        mailbox,
        skills,
        { question: question.question, reference: question.answer, scope: scope(), trajectory },
        judgeSettings({ mode }),
      );
      expect(j).toMatchObject({ failed: true, score: 0, verdict: null });
      expect(j.failure).toMatch(/verdict/);
      expect(j.turns.length).toBeGreaterThan(0);
      expect(j.turns[0].tokenIds!.length).toBe(j.turns[0].logprobs!.length); // the RM stage can train on it
      const reward = deterministicReward(
        trajectory.facts,
        { answer: question.answer, messageIds: question.messageIds },
        4,
        W,
      );
      const { id } = await store.episodes.storeEpisode(key(`judge-${mode}`), question.id, trajectory, reward);
      const first = await store.judgements.storeJudgement(id, `base/${mode}/0`, 'base', j);
      expect(
        await store.judgements.storeJudgement(id, `base/${mode}/0`, 'base', { ...j, score: 0.9 }),
      ).toEqual(first);
    },
  );

  it("compares two runs' judges on the policy episodes both runs sampled alike, matched by their tokens", async () => {
    const [a, b] = ['ladder-a', 'ladder-b'].map((r) => `${r}-${Date.now()}`);
    const turn = (tokenIds: number[]) => ({ tokenIds, finishReason: 'stop', modelMs: 1, toolMs: 0 });
    const reward = deterministicReward(facts({}), { answer: question.answer, messageIds: [] }, 4, W);
    const base = await judge(
      llm,
      mailbox,
      skills,
      {
        question: question.question,
        reference: question.answer,
        scope: scope(),
        trajectory: { messages: [], turns: [], facts: facts({}), wallMs: 1 },
      },
      judgeSettings(),
    );
    const judgement = (score: number) => ({ ...base, score });
    /** Stores one policy episode of `runId` (sample, sampled tokens, a tool-call id of its own) and its judgement. */
    const judged = async (runId: string, sample: number, tokens: number[], score: number) => {
      const messages = [{ role: 'tool' as const, tool_call_id: `call_${runId}`, content: 'hit' }];
      const trajectory = { messages, turns: [turn(tokens)], facts: facts({}), wallMs: 1 };
      const k = { runId, stage: 'policy', step: 1, taskId: question.id, sample };
      const { id } = await store.episodes.storeEpisode(k, question.id, trajectory, reward);
      await store.judgements.storeJudgement(
        id,
        `${runId}:policy:judge-${runId}`,
        `judge-${runId}`,
        judgement(score),
      );
    };
    await judged(a, 0, [1, 2, 3], 0.2);
    await judged(b, 0, [1, 2, 3], 0.2); // the same episode, scored alike
    await judged(a, 1, [4, 5], 1);
    await judged(b, 1, [4, 6], 0.2); // the policies sampled differently: not compared
    expect(await store.judgements.compareJudges(a, b)).toEqual({ episodes: 1, differing: 0 });
    await judged(a, 2, [7], 1);
    await judged(b, 2, [7], 0.6); // the same episode, scored differently
    expect(await store.judgements.compareJudges(a, b)).toEqual({ episodes: 2, differing: 1 });
  });

  it('a reference-free judge never sees the reference answer nor the skills that need it', async () => {
    const trajectory = { messages: [], turns: [], facts: facts({}), wallMs: 1 };
    const input = { question: question.question, reference: 'SECRET-REFERENCE', scope: scope(), trajectory };
    const j = await judge(llm, mailbox, skills, input, judgeSettings({ reference: 'hidden' }));
    const prompt = j.messages
      .slice(0, 2)
      .map((m) => m.content)
      .join('\n');
    expect(prompt).not.toMatch(/SECRET-REFERENCE|answer-correctness|answer_matches_reference/);
    expect(prompt).toMatch(
      /grounding \(verifiers: sources_are_real, answer_in_cited_email, cited_email_matches_question\)/,
    );
  });
});

describe('teacher labels', () => {
  const deps = (teacher?: EnvDeps['teacher']): EnvDeps => ({
    store,
    llm,
    modelServer: new ModelServerClient({ url: server.modelServer.url }),
    skills: new Map(),
    teacher,
  });
  const stored = async (tag: string, f: EpisodeFacts) => {
    const trajectory = { messages: [], turns: [], facts: f, wallMs: 1 };
    const gold = { answer: question.answer, messageIds: question.messageIds };
    const { id } = await store.episodes.storeEpisode(
      key(tag),
      question.id,
      trajectory,
      deterministicReward(f, gold, 4, W),
    );
    const episode = await store.episodes.loadEpisode(id);
    return { ...episode!, question: (await store.questions.questionContext(question.id))! };
  };

  it('come from the deterministic layer without a teacher, and are cached per trajectory', async () => {
    const episode = await stored(
      'label',
      episodeFacts({
        answer: question.answer,
        sources: question.messageIds,
        searchedIds: question.messageIds,
        turns: 2,
      }),
    );
    const label = await labelOnce(deps(), episode, W, 4);
    expect(label).toMatchObject({ correct: true, source: 'deterministic' });
    const cached = await labelOnce(
      deps(),
      { ...episode, question: { ...episode.question, gold: { answer: 'else', messageIds: [] } } },
      W,
      4,
    );
    expect(cached).toEqual(label);
  });

  it('from a teacher endpoint that cannot produce a label: a clear error, nothing cached', async () => {
    const episode = await stored('label-teacher', episodeFacts({ answer: 'x' }));
    const teacher = { url: `${server.modelServer.url}/v1`, model: 'base' }; // a random tiny model: no parseable label
    await expect(labelOnce(deps(teacher), episode, W, 4)).rejects.toThrow(/no parseable label/);
    expect(await store.judgements.findLabel(episode.id)).toBeNull();
  });
});
