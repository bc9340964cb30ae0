/**
 * bench/rollout: email-agent episodes per second at concurrency 1, 8 and 32 against the model server
 * (SmolLM2-135M on the CPU, throughput mode), and the share of each episode's wall time spent outside model
 * calls (tools, database, parsing, storage). The reference is concurrency 1 in the same run. Writes
 * bench/results/rollout.json.
 *
 *   make bench-rollout
 */
import OpenAI from 'openai';
import { runEpisode, type AgentSettings, type EpisodeQuestion } from '../src/env/emailAgent';
import { deterministicReward, rewardWeightsSchema } from '../src/reward/deterministic';
import { createStore } from '../src/store';
import { startBenchStack } from './benchStack';
import { writeResult } from './util';

const LEVELS = [1, 8, 32];
const SETTINGS: AgentSettings = {
  model: 'base',
  maxTurns: 3,
  contextTokens: 8192,
  maxTokensPerTurn: 48,
  temperature: 1,
  topP: 1,
  timeoutMs: 600_000,
  demonstration: true,
  searchHits: 10,
  bodyChars: 4000,
};

async function main() {
  const stack = await startBenchStack(
    'rollout',
    { EVALRL_PG_PORT: '36433', EVALRL_MODEL_SERVER_URL: 'http://127.0.0.1:18124' },
    { temporal: false, modelServer: { mode: 'throughput', maxBatch: 32, threads: 2 } },
  );
  const { config, pool } = stack;
  const store = createStore(pool);
  const gold = { answer: '-', messageIds: ['-'] }; // rollout speed only: the reward is not read
  try {
    const llm = new OpenAI({ baseURL: `${config.modelServer.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const { rows } = await pool.query(
      `SELECT q.id, q.question, q.inbox_id, q.query_date, i.address FROM questions q JOIN inboxes i ON i.id = q.inbox_id
       WHERE q.split = 'train' ORDER BY q.id LIMIT 64`,
    );
    const questions = rows.map((r) => ({
      id: r.id as string,
      q: {
        question: r.question,
        inbox: r.inbox_id,
        inboxAddress: r.address,
        queryDate: r.query_date,
      } as EpisodeQuestion,
    }));
    console.log(
      `bench/rollout: SmolLM2-135M on CPU, ${SETTINGS.maxTurns} turns × ${SETTINGS.maxTokensPerTurn} tokens per episode`,
    );
    await runEpisode(llm, store.mailbox, questions[0].q, SETTINGS); // warm-up

    const perLevel: Record<
      string,
      { episodes_per_s: number; outside_model_share: number; episodes: number; seconds: number }
    > = {};
    for (const c of LEVELS) {
      const batch = questions.slice(0, c);
      const started = Date.now();
      const results = await Promise.all(
        batch.map(async ({ id, q }, i) => {
          const t = await runEpisode(llm, store.mailbox, q, { ...SETTINGS, seed: i });
          const key = { runId: 'bench-rollout', stage: 'policy', step: c, taskId: id, sample: i };
          const s = Date.now();
          await store.episodes.storeEpisode(
            key,
            id,
            t,
            deterministicReward(t.facts, gold, SETTINGS.maxTurns, rewardWeightsSchema.parse({})),
          );
          return {
            wall: t.wallMs + (Date.now() - s),
            model: t.turns.reduce((n, turn) => n + turn.modelMs, 0),
          };
        }),
      );
      const seconds = (Date.now() - started) / 1000;
      const wall = results.reduce((n, r) => n + r.wall, 0);
      const model = results.reduce((n, r) => n + r.model, 0);
      perLevel[`c${c}`] = {
        episodes_per_s: c / seconds,
        outside_model_share: (wall - model) / wall,
        episodes: c,
        seconds,
      };
      console.log(
        `c${c}: ${(c / seconds).toFixed(3)} episodes/s (${(c / seconds / (perLevel.c1?.episodes_per_s ?? c / seconds)).toFixed(2)}× c1), ` +
          `outside model calls ${((100 * (wall - model)) / wall).toFixed(2)}%`,
      );
    }
    console.log(
      `target: outside-model share at c8 < 5%: ${(100 * perLevel.c8.outside_model_share).toFixed(2)}%`,
    );
    writeResult('rollout', {
      episodes_per_s: Object.fromEntries(LEVELS.map((c) => [`c${c}`, perLevel[`c${c}`].episodes_per_s])),
      outside_model_share_c8: perLevel.c8.outside_model_share,
      speedup_vs_c1: Object.fromEntries(
        LEVELS.map((c) => [`c${c}`, perLevel[`c${c}`].episodes_per_s / perLevel.c1.episodes_per_s]),
      ),
      levels: perLevel,
      settings: SETTINGS,
      model: 'SmolLM2-135M-Instruct (CPU, throughput mode, max batch 32)',
    });
  } finally {
    await stack.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
