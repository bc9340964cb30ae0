import type { Env, Split, WarmStartEnvConfig } from '../grpo/env';
import { interleaveBy, sampleTasks } from '../grpo/sampleTasks';
import { deterministicReward } from '../reward/deterministic';
import { SKILL_TOOLS } from '../reward/judge';
import { demonstrationTurns, judgeDemonstration, policyDemonstration } from './demonstrations';
import { EMAIL_TOOLS } from './emailTools';
import { DataError, episodeWithQuestion, questionOf, type EnvDeps } from './episodes';
import { createPolicyEnv } from './policyEnv';
import { createRewardModelEnv } from './rewardModelEnv';
import { balancedTasks } from './rewardModelData';

/**
 * The warm start's environment: supervised, not RL. A task is a train question (policy; every kind of
 * question in turn) or a labelled train candidate (judge; balanced); its one sample is a scripted demonstration, built once and stored with its token ids
 * (every epoch trains on the same rows); every demonstration is trained on with advantage 1. Evaluation is
 * the target's own: the policy's success, or the judge's agreement.
 */
export function createWarmStartEnv(deps: EnvDeps): Env<WarmStartEnvConfig> {
  const policy = createPolicyEnv(deps);
  const rewardModel = createRewardModelEnv(deps);
  const DEMO = { step: 0, sample: 0 };
  // Keyword searches only: with a quarter of its demonstrations searching by sender and day (keywords []),
  // SmolLM2-135M searched every held-out question that way, copying the owner's address and today's date.
  const FILTER_SEARCHES = false;

  /** The first `count` train questions (seeded order) that have an honest demonstration. Cached per run. */
  const demonstrable = new Map<string, Promise<string[]>>();
  const policyTasks = (config: WarmStartEnvConfig, runId: string, split: Split) => {
    const key = `${runId}:${split}:${config.seed}:${config.count}`;
    if (!demonstrable.has(key))
      demonstrable.set(
        key,
        (async () => {
          // Every kind of question (template, generator) in turn: demonstrations of one kind teach one answer.
          const questions = await deps.store.questions.questionSources(split);
          const source = new Map(questions.map((q) => [q.id, q.source]));
          const seeded = sampleTasks([...source.keys()], config.seed, 'demonstrations:policy', 0, Infinity);
          const order = interleaveBy(seeded, (id) => source.get(id)!);
          const found: string[] = [];
          for (const id of order) {
            if (found.length >= config.count) break;
            if (
              await policyDemonstration(
                deps.store.mailbox,
                await questionOf(deps, id),
                { ...config.agent, model: 'base' },
                FILTER_SEARCHES,
              )
            )
              found.push(id);
          }
          return found;
        })().catch((err) => {
          demonstrable.delete(key); // a failure is not cached: the next call tries again
          throw err;
        }),
      );
    return demonstrable.get(key)!;
  };

  return {
    async taskIds(config, runId, split) {
      if (config.target === 'policy') return policyTasks(config, runId, split);
      const ids = balancedTasks(
        await deps.store.episodes.candidates(runId, split),
        config.seed,
        config.balance,
      );
      return sampleTasks(ids, config.seed, 'demonstrations:judge', 0, config.count);
    },

    async rollout(config, g) {
      const key = { runId: g.runId, stage: g.stage, taskId: g.taskId, ...DEMO };
      if (config.target === 'policy') {
        const stored = await deps.store.episodes.findEpisode(key);
        if (stored) return [{ kind: 'trajectory', id: stored.id }];
        const q = await questionOf(deps, g.taskId);
        const agent = { ...config.agent, model: g.model };
        const demo = await policyDemonstration(deps.store.mailbox, q, agent, FILTER_SEARCHES);
        if (!demo) return []; // no keywords find the gold email: no honest demonstration
        const trajectory = {
          ...demo.trajectory,
          turns: await demonstrationTurns(deps.modelServer, demo.messages, EMAIL_TOOLS, agent),
        };
        const reward = deterministicReward(trajectory.facts, q.gold, agent.maxTurns, config.weights);
        const { id } = await deps.store.episodes.storeEpisode(key, q.id, trajectory, reward);
        return [{ kind: 'trajectory', id }];
      }
      const candidate = await deps.store.episodes.candidateId(g.runId, 'train', g.taskId);
      if (candidate === null) throw new DataError(`run ${g.runId} has no reward-model candidate ${g.taskId}`);
      const judgeKey = `${g.runId}:${g.stage}:demonstration`;
      const stored = await deps.store.judgements.findJudgement(candidate, judgeKey);
      if (stored) return [{ kind: 'judgement', id: stored.id }];
      const settings = { ...config.judge, model: g.model };
      const j = await judgeDemonstration(
        deps.store.mailbox,
        deps.skills,
        await episodeWithQuestion(deps, candidate),
        settings,
      );
      j.turns = await demonstrationTurns(deps.modelServer, j.messages, SKILL_TOOLS, settings);
      const { id } = await deps.store.judgements.storeJudgement(candidate, judgeKey, 'demonstration', j);
      return [{ kind: 'judgement', id }];
    },

    async reward(_config, _g, samples) {
      const ones = samples.map(() => 1);
      return { rewards_G: ones, success_G: ones, failed_G: samples.map(() => 0) };
    },

    evaluate: (config, input, hooks) =>
      config.target === 'policy'
        ? policy.evaluate(
            {
              kind: 'policy',
              agent: config.agent,
              weights: config.weights,
              reward: 'gold',
              judge: { model: 'base', weight: 0, settings: config.judge },
            },
            input,
            hooks,
          )
        : rewardModel.evaluate(
            { kind: 'rewardModel', judge: config.judge, balance: config.balance, seed: config.seed },
            input,
            hooks,
          ),
  };
}
