import type { EvaluationResult } from '../contract';
import type { StepRow } from '../store/runs';

/** A sign that a stage is not learning, with what it means and what to try. */
export interface HealthFlag {
  stage: string;
  step: number | null;
  flag: string;
  meaning: string;
  advice: string;
}

interface Check {
  flag: string;
  /** Applies to supervised (warm-start) steps too; GRPO-only checks read group rewards. */
  supervised: boolean;
  fires: (m: Record<string, number>) => boolean;
  meaning: (m: Record<string, number>) => string;
  advice: string;
}

const pct = (x: number) => `${Math.round(100 * x)}%`;
const isWarmStart = (stage: string) => stage.endsWith('WarmStart');

const STEP_CHECKS: Check[] = [
  {
    flag: 'zero-variance groups',
    supervised: false,
    fires: (m) => (m['groups/zero_variance'] ?? 0) >= 0.5,
    meaning: (m) =>
      `${pct(m['groups/zero_variance'])} of groups gave every sample the same reward: their advantages are 0`,
    advice: 'more samples per group, a higher temperature, a warm start, or dynamic sampling',
  },
  {
    flag: 'failed samples',
    supervised: false,
    fires: (m) => (m['samples/failed'] ?? 0) >= 0.25,
    meaning: (m) => `${pct(m['samples/failed'])} of episodes or judgements failed (no verdict, model errors)`,
    advice:
      "raise the judge's turn or token budget (judge.maxTurns, judge.maxTokensPerTurn), or warm-start the judge",
  },
  {
    flag: 'adapter did not move',
    supervised: true,
    fires: (m) => m['optim/update_norm'] !== undefined && m['optim/update_norm'] < 1e-9,
    meaning: (m) =>
      m['optim/no_signal']
        ? 'no sample carried an advantage, so the step left the LoRA weights and optimizer unchanged'
        : 'the step left the LoRA weights unchanged',
    advice: 'samples whose rewards differ (see zero-variance groups), or a learning rate above 0',
  },
  {
    flag: 'clipping',
    supervised: false,
    fires: (m) => (m['optim/clip_fraction'] ?? 0) > 0.3,
    meaning: (m) =>
      `${pct(m['optim/clip_fraction'])} of tokens clipped: the policy moved far from the sampler`,
    advice: 'a lower learning rate, or a smaller clip range',
  },
  {
    flag: 'KL',
    supervised: false,
    fires: (m) => (m['optim/kl_ref'] ?? 0) > 1,
    meaning: (m) => `KL to the base ${(m['optim/kl_ref'] ?? 0).toFixed(2)}`,
    advice: 'a lower learning rate, or a KL coefficient (kl_coef)',
  },
  {
    flag: 'off-policy',
    supervised: false,
    // Measured before the update: how far the sampler's logprobs are from the trainer's for the same tokens.
    fires: (m) => (m['optim/mismatch_kl'] ?? m['optim/approx_kl_old'] ?? 0) > 0.5,
    meaning: (m) =>
      `KL from the sampler to the trainer ${(m['optim/mismatch_kl'] ?? m['optim/approx_kl_old'] ?? 0).toFixed(2)}: they sample different policies`,
    advice: 'check the samplers (`evalrl preflight`), or cap the importance weights (tis_imp_ratio_cap)',
  },
];

/**
 * The learning signal's health, per stage at its latest step and per reward-model evaluation: what a user
 * should not have to spot in a table of flat curves.
 */
export function healthFlags(steps: StepRow[], evaluations: EvaluationResult[]): HealthFlag[] {
  const flags: HealthFlag[] = [];
  const latest = new Map<string, StepRow>();
  for (const row of steps) if ((latest.get(row.stage)?.step ?? 0) <= row.step) latest.set(row.stage, row);
  for (const row of latest.values())
    for (const c of STEP_CHECKS)
      if ((c.supervised || !isWarmStart(row.stage)) && c.fires(row.metrics))
        flags.push({
          stage: row.stage,
          step: row.step,
          flag: c.flag,
          meaning: c.meaning(row.metrics),
          advice: c.advice,
        });
  for (const e of evaluations.filter((x) => x.kind === 'rewardModel')) {
    const share = e.metrics.positiveShare;
    if (share === 0 || share === 1)
      flags.push({
        stage: e.label,
        step: null,
        flag: 'one label class',
        meaning: `every held-out episode is labelled ${share === 1 ? 'correct' : 'incorrect'}: agreement says nothing`,
        advice:
          'balanced reward-model data (rewardModelData.balance), corrupted copies, or a policy warm start',
      });
    if (e.metrics.judgements > 0 && e.metrics.failures / e.metrics.judgements >= 0.25)
      flags.push({
        stage: e.label,
        step: null,
        flag: 'failed judgements',
        meaning: `${e.metrics.failures} of ${e.metrics.judgements} judgements reached no verdict`,
        advice: "raise the judge's turn or token budget, or warm-start the judge",
      });
  }
  return flags;
}

export const describeFlag = (f: HealthFlag) =>
  `${f.stage}${f.step === null ? '' : ` step ${f.step}`}: ${f.flag} — ${f.meaning}; try ${f.advice}`;
