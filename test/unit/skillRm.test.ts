import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { aggregate } from '../../src/reward/aggregate';
import { policyMetrics, rmMetrics } from '../../src/reward/evaluation';
import { SKILL_TOOLS } from '../../src/reward/judge';
import { loadSkills, readResource } from '../../src/reward/skills';
import { availableVerifiers } from '../../src/reward/verifiers';
import type { RewardComponents } from '../../src/reward/deterministic';

const SKILLS = path.resolve(__dirname, '../../skills');
const verdict = (satisfied: number, total: number) => ({
  score: 0.9,
  satisfied_count: satisfied,
  total_count: total,
  confidence: 0.8,
  used_resources: [],
  reason: 'r',
});
const ev = (verifier: string, passed: boolean, critical = false) => ({
  verifier,
  passed,
  critical,
  detail: '',
});

describe('skill packages', () => {
  it('load with their verifiers and resources', () => {
    const skills = loadSkills(SKILLS, availableVerifiers(true), availableVerifiers(false));
    expect([...skills.keys()]).toEqual(['answer-correctness', 'general-rubric', 'grounding']);
    const grounding = skills.get('grounding')!;
    expect(grounding.verifiers).toEqual([
      'sources_are_real',
      'answer_in_cited_email',
      'cited_email_matches_question',
    ]);
    expect(grounding.needs_reference).toBe(false);
    expect(skills.get('answer-correctness')!.needs_reference).toBe(true);
    expect(readResource(grounding, 'rubric.md')).toMatch(/Sources are real/);
    expect(readResource(grounding, '../answer-correctness/checklist.md')).toBeNull();
  });
  it('refuse a malformed package, naming the file and field', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'skills-'));
    fs.mkdirSync(path.join(root, 'bad'));
    fs.writeFileSync(
      path.join(root, 'bad', 'SKILL.md'),
      '---\nname: Bad Name\ndescription: short\n---\nbody',
    );
    expect(() => loadSkills(root, [])).toThrow(/bad\/SKILL\.md: front matter field "name"/);
    fs.writeFileSync(
      path.join(root, 'bad', 'SKILL.md'),
      '---\nname: bad\ndescription: a long enough text\nverifiers: [nope]\n---\nbody',
    );
    expect(() => loadSkills(root, ['x'])).toThrow(/unknown verifier "nope"/);
    fs.writeFileSync(
      path.join(root, 'bad', 'SKILL.md'),
      '---\nname: bad\ndescription: a long enough text\nverifiers: [needs_gold]\n---\nbody',
    );
    expect(() => loadSkills(root, ['needs_gold'], [])).toThrow(
      /"needs_gold" needs the reference answer; set needs_reference/,
    );
  });
});

describe('judge tools', () => {
  it('take no argument called "name", which a small model confuses with the call\'s own name', () => {
    const args = Object.fromEntries(
      SKILL_TOOLS.map((t) => [
        t.function.name,
        Object.keys((t.function.parameters as { properties?: object }).properties ?? {}),
      ]),
    );
    expect(args.load_skill).toEqual(['skill']);
    expect(args.run_verifier).toEqual(['verifier']);
    expect(Object.values(args).flat()).not.toContain('name');
  });
});

describe('aggregation policy', () => {
  it('starts from satisfied/total, not the free score', () => {
    expect(aggregate(verdict(3, 4), []).score).toBe(0.75);
  });
  it('caps critical failures and lets the correctness verifier override opinion', () => {
    expect(aggregate(verdict(4, 4), [ev('sources_are_real', false, true)]).score).toBe(0.2);
    expect(aggregate(verdict(4, 4), [ev('answer_matches_reference', false)]).score).toBe(0.2);
    expect(aggregate(verdict(1, 4), [ev('answer_matches_reference', true)]).score).toBe(0.6);
    expect(
      aggregate(verdict(1, 4), [ev('answer_matches_reference', true), ev('format_valid', false, true)]).score,
    ).toBe(0.2);
  });
});

describe('evaluation', () => {
  const r = (correct: boolean, answered: boolean, idk: boolean, turns: number) =>
    ({ correct, answered, idk, turns }) as RewardComponents;
  it("policy: success, I-don't-know and wrong-answer rates, mean turns", () => {
    const m = policyMetrics([
      r(true, true, false, 2),
      r(false, true, true, 4),
      r(false, true, false, 6),
      r(false, false, false, 8),
    ]);
    expect(m).toEqual({
      episodes: 4,
      successRate: 0.25,
      successSe: Math.sqrt((0.25 * 0.75) / 4),
      idkRate: 0.25,
      wrongRate: 0.25,
      meanTurns: 5,
    });
  });
  it('reward model: agreement, precision/recall for "correct", calibration', () => {
    const m = rmMetrics([
      { score: 0.9, confidence: 0.95, failed: false, label: true },
      { score: 0.8, confidence: 0.95, failed: false, label: false },
      { score: 0.1, confidence: 0.55, failed: false, label: false },
      { score: 0.0, confidence: 0.55, failed: true, label: true },
    ]);
    expect(m).toMatchObject({ judgements: 4, failures: 1, agreement: 0.5, precision: 0.5, recall: 0.5 });
    expect(m.ece).toBeCloseTo(0.5 * Math.abs(0.95 - 0.5) + 0.5 * Math.abs(0.55 - 0.5));
  });
});
