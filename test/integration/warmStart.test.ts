import fs from 'node:fs';
import path from 'node:path';
import { Runtime } from '@temporalio/worker';
import OpenAI from 'openai';
import type { Config } from '../../src/config';
import { TASK_QUEUES } from '../../src/contract';
import { runEpisode } from '../../src/env/emailAgent';
import { agentTemplate, judgeTemplate, stageAdapter } from '../../src/grpo/stage';
import { judge } from '../../src/reward/judge';
import { loadSkills } from '../../src/reward/skills';
import { availableVerifiers } from '../../src/reward/verifiers';
import { parseRunSpec } from '../../src/runSpec';
import { stopModelServer } from '../../src/stack/modelServer';
import { createStore } from '../../src/store';
import { workerLogger } from '../../src/workers/logger';
import { trainingRun } from '../../src/workflows/trainingRun';
import { tinyRunSpec, withWorkers } from './runFixtures';
import { cli, startTinyModelServer, tempDataDir, TEST_STACK_ENV } from './testStack';

/**
 * The warm start through the pipeline: a run whose only stages are the two supervised warm starts, on the
 * tiny model (hidden 64, 2 layers). Afterwards the warm-started policy completes an episode with every tool
 * on its demonstration's question, and the warm-started judge closes a judgement with a verdict.
 */
jest.setTimeout(900_000);
Runtime.install({ logger: workerLogger('ERROR') });

const dir = tempDataDir('evalrl-warm-start-');
let server: Config;

beforeAll(async () => {
  await cli(['ingest', TEST_STACK_ENV.EVALRL_MAILDIR]);
  await cli(['questions', 'generate']);
  server = await startTinyModelServer(dir, 18006, { initRange: 0.5 });
});
afterAll(async () => {
  await stopModelServer(server);
  fs.rmSync(dir, { recursive: true, force: true });
});

it('warm starts teach the tiny model the tool protocol and the judging procedure', async () => {
  const base = tinyRunSpec('warm-start');
  const spec = parseRunSpec({
    ...base,
    lora: { rank: 32, alpha: 32 },
    sampling: {
      ...base.sampling,
      maxTurns: 4,
      maxTokensPerTurn: 96,
      contextTokens: 4096,
      searchHits: 3,
      bodyChars: 400,
    },
    // A judgement's first turn (load a skill, run three verifiers) is about 140 tokens.
    judge: { ...base.judge, maxTurns: 6, maxTokensPerTurn: 160, temperature: 0 },
    stages: {
      ...base.stages,
      policyWarmStart: {
        enabled: true,
        demonstrations: 1,
        epochs: 40,
        tasksPerStep: 1,
        hyperparameters: { learning_rate: 1e-2 },
      },
      judgeWarmStart: {
        enabled: true,
        demonstrations: 1,
        epochs: 40,
        tasksPerStep: 1,
        hyperparameters: { learning_rate: 1e-2 },
      },
      rewardModel: { ...base.stages.rewardModel, enabled: false },
      policy: { ...base.stages.policy, enabled: false },
    },
    rewardModelData: { trainQuestions: 1, testQuestions: 1, episodesPerQuestion: 1, balance: false },
    evaluation: { ...base.evaluation, baseline: false, questions: 1, rewardModelEpisodes: 1 },
  });
  await withWorkers(server, async (client, pool) => {
    const runId = `warm-start-${Date.now()}`;
    const result = await client.workflow.execute(trainingRun, {
      taskQueue: TASK_QUEUES.workflows,
      workflowId: runId,
      args: [{ runId, spec }],
    });
    expect(result).toMatchObject({ state: 'done', blocked: null });
    expect(result.stages.policyWarmStart).toMatchObject({ step: 40, phase: 'done' });
    expect(result.stages.judgeWarmStart).toMatchObject({ step: 40, phase: 'done' });

    const store = createStore(pool);
    const llm = new OpenAI({ baseURL: `${server.modelServer.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    // The policy's demonstration: its question, replayed by the warm-started adapter at temperature 0.
    const demo = await pool.query(
      `SELECT id, task_id FROM trajectories WHERE run_id = $1 AND stage = 'policyWarmStart'`,
      [runId],
    );
    expect(demo.rows).toHaveLength(1);
    const q = (await store.questions.questionContext(demo.rows[0].task_id))!;
    const agent = {
      ...agentTemplate(spec),
      model: stageAdapter(spec, 'policyWarmStart'),
      temperature: 0,
      seed: 1,
    };
    const episode = await runEpisode(llm, store.mailbox, q, agent);
    expect(episode.messages.flatMap((m) => m.tool_calls ?? []).map((c) => c.function.name)).toEqual([
      'search_emails',
      'read_email',
      'return_final_answer',
    ]);
    expect(episode.facts).toMatchObject({
      ending: 'answered',
      answer: q.gold.answer,
      sources: [q.gold.messageIds[0]],
      malformedCalls: 0,
    });

    // The judge's demonstration: its candidate, judged by the warm-started judge.
    const judged = await pool.query(
      `SELECT j.trajectory_id FROM judgements j JOIN trajectories t ON t.id = j.trajectory_id
       WHERE t.run_id = $1 AND j.judge_key = $2`,
      [runId, `${runId}:judgeWarmStart:demonstration`],
    );
    expect(judged.rows).toHaveLength(1);
    const candidate = (await store.episodes.loadEpisode(Number(judged.rows[0].trajectory_id)))!;
    const question = (await store.questions.questionContext(candidate.questionId!))!;
    const skills = loadSkills(
      path.resolve(__dirname, '../../skills'),
      availableVerifiers(true),
      availableVerifiers(false),
    );
    const j = await judge(
      llm,
      store.mailbox,
      skills,
      {
        question: question.question,
        reference: question.gold.answer,
        scope: question.scope,
        trajectory: candidate.trajectory,
      },
      { ...judgeTemplate(spec, 'scoring'), model: stageAdapter(spec, 'judgeWarmStart'), seed: 1 },
    );
    expect(j).toMatchObject({ failed: false, skillsUsed: ['grounding'] });
    expect(j.evidence.map((e) => e.verifier)).toEqual([
      'sources_are_real',
      'answer_in_cited_email',
      'cited_email_matches_question',
    ]);
    expect(j.verdict!.satisfied_count).toBe(j.evidence.filter((e) => e.passed).length); // consistent with its evidence
  });
});
