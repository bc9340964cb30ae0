import { ApplicationFailure } from '@temporalio/common';
import { classified } from '../../src/activities/failures';
import { loadConfig } from '../../src/config';
import type { Trajectory } from '../../src/env/trajectory';
import { llmQuestions } from '../../src/mail/llmQuestions';
import { rewardWeightsSchema } from '../../src/reward/deterministic';
import { teacherLabel } from '../../src/reward/teacher';
import type { TeacherEndpoint } from '../../src/reward/teacherClient';
import { startOpenAITeacher, type ChatRequest, type OpenAITeacherDouble } from '../doubles/openaiTeacher';
import { episodeFacts } from '../episodeFacts';

const gold = { answer: '$2,500,000', messageIds: ['<m1@x>'] };
const weights = rewardWeightsSchema.parse({});
const trajectory: Trajectory = {
  messages: [
    { role: 'user', content: 'How much is the quarterly gas contract worth?' },
    { role: 'assistant', content: 'It is worth $2.5M.' },
  ],
  turns: [],
  facts: episodeFacts({ answer: '$2.5M', sources: ['<m1@x>'], readIds: ['<m1@x>'] }),
  wallMs: 1,
};
const inboxEmail = {
  messageId: '<m1@x>',
  subject: 'Quarterly gas contract',
  fromAddress: 'jane@enron.com',
  date: new Date('2001-03-05T10:00:00Z'),
  body: 'The contract is worth $2,500,000 and starts April 1, 2001.',
};

/** The test's verdicts, by the structured-output format the request names. */
function reply(request: ChatRequest): string {
  return request.response_format.json_schema.name === 'label'
    ? JSON.stringify({ correct: true, reason: '$2.5M is the reference amount' })
    : JSON.stringify({
        questions: [
          {
            question: 'How much is the quarterly gas contract worth?',
            answer: '$2,500,000',
            message_ids: ['<m1@x>'],
            how_realistic: 0.9,
          },
        ],
      });
}

let double: OpenAITeacherDouble;
beforeAll(async () => {
  double = await startOpenAITeacher(reply);
});
afterAll(() => double.close());

/** The teacher as configured from the environment, pointed at the double. */
const teacher = (env: Record<string, string> = {}): TeacherEndpoint =>
  loadConfig({ EVALRL_TEACHER_URL: double.url, EVALRL_TEACHER_MODEL: 'gpt-5-mini', ...env }).teacher!;

const lastRequest = () => double.requests.at(-1)!;

describe('teacher against a reasoning model', () => {
  it('labels with the model default temperature, asking for the label JSON schema', async () => {
    const label = await teacherLabel('How much?', gold, trajectory, weights, 10, teacher());
    expect(label).toEqual({
      correct: true,
      reason: '$2.5M is the reference amount',
      source: 'teacher:gpt-5-mini',
    });
    const request = lastRequest();
    expect(request).not.toHaveProperty('temperature');
    expect(request).not.toHaveProperty('max_tokens');
    expect(request).not.toHaveProperty('max_completion_tokens');
    expect(request.response_format).toEqual({
      type: 'json_schema',
      json_schema: {
        name: 'label',
        strict: true,
        schema: expect.objectContaining({
          type: 'object',
          properties: { correct: { type: 'boolean' }, reason: expect.objectContaining({ type: 'string' }) },
          required: ['correct', 'reason'],
          additionalProperties: false,
        }),
      },
    });
  });

  it('sends the configured temperature and max_completion_tokens', async () => {
    const env = { EVALRL_TEACHER_TEMPERATURE: '1', EVALRL_TEACHER_MAX_COMPLETION_TOKENS: '4096' };
    await teacherLabel('How much?', gold, trajectory, weights, 10, teacher(env));
    expect(lastRequest()).toMatchObject({ temperature: 1, max_completion_tokens: 4096 });
  });

  it('stops, without retrying, at a temperature the model refuses, naming the setting', async () => {
    const sent = double.requests.length;
    const failure = await classified(() =>
      teacherLabel('How much?', gold, trajectory, weights, 10, teacher({ EVALRL_TEACHER_TEMPERATURE: '0' })),
    ).catch((err: unknown) => err);
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure).toMatchObject({ nonRetryable: true, type: 'BadTeacherRequest' });
    expect((failure as Error).message).toMatch(/'temperature' does not support 0 with this model/);
    expect((failure as Error).message).toMatch(/unset EVALRL_TEACHER_TEMPERATURE/);
    expect(double.requests.length).toBe(sent + 1);
  });

  it('generates questions, asking for the questions JSON schema', async () => {
    const batch = await llmQuestions(teacher(), 'owner-a', 'owner@enron.com', [inboxEmail], 0.5);
    expect(batch).toMatchObject({ dropped: 0, unrealistic: 0 });
    expect(batch.questions).toEqual([
      expect.objectContaining({ answer: '$2,500,000', messageIds: ['<m1@x>'], source: 'llm:gpt-5-mini' }),
    ]);
    const request = lastRequest();
    expect(request).not.toHaveProperty('temperature');
    expect(request.response_format).toMatchObject({ json_schema: { name: 'questions', strict: true } });
  });
});
