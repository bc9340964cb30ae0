// Issue 47: hostile mail and hostile model output. Every text function on mail or model text is linear (a crafted
// body must not stall a judge worker past its heartbeat), and no impossible date or odd string throws.
import { searchCandidates } from '../../src/env/demonstrations';
import { wrongAnswer, corrupted } from '../../src/env/rewardModelData';
import { emailSchema } from '../../src/mail/email';
import { searchArgsSchema, type FullEmail, type Mailbox } from '../../src/mail/search';
import { templateQuestions, type InboxEmail } from '../../src/mail/templateQuestions';
import { verdictSchema } from '../../src/reward/aggregate';
import {
  addressesIn,
  checkAnswer,
  datesIn,
  exactMatch,
  hedges,
  isIdk,
  isoDay,
  normalise,
  numbersIn,
  shiftDay,
  tokenF1,
} from '../../src/reward/answerMatch';
import { askedFields, isNamedEmail, namedEmail, runVerifier } from '../../src/reward/verifiers';
import { episodeFacts } from '../episodeFacts';

const N = 400_000;
/** Strings that made a backtracking regex quadratic (or cubic) before the fix, and other hostile text. */
const HOSTILE: [string, string][] = [
  ['run of -_./', 'x' + '-_./'.repeat(N / 4) + 'x'],
  ['run of dots between words', 'a' + '.'.repeat(N) + 'b'],
  ['run of address characters', 'a'.repeat(N)],
  ['address characters then @', 'a'.repeat(N) + '@'],
  ['domain without a top level', 'a@' + 'b.'.repeat(N / 2) + '1'],
  ['many @', 'a@'.repeat(N / 2)],
  ['topic then spaces', 'the email about x' + ' '.repeat(N) + 'y'],
  ['mentions then spaces', 'Who sent me the email that mentions x' + ' \t'.repeat(N / 2) + '.?'],
  ['many topic phrases', 'the email about '.repeat(N / 16) + '\n'],
  ['when … sent then non-words', 'when was ' + 'sent!'.repeat(N / 5) + 'x'],
  ['one character', 'q'.repeat(1_000_000)],
  ['digits', '9'.repeat(N)],
  ['digit groups', '1,000'.repeat(N / 5)],
  ['month then spaces', 'March ' + ' '.repeat(N) + 'x'],
  ['deep brackets', '['.repeat(N) + ']'.repeat(N)],
  ['lone surrogates and NUL', '\ud800\u0000\udfff'.repeat(N / 3)],
  ['huge number', '1e400 ' + '9'.repeat(400) + ' -0 NaN Infinity'],
  ['search listing without bars', 'm1 | '.repeat(N / 5)],
  ['impossible dates', '2001-02-30 2001-13-01 Feb 31, 2001 February 31, 2001 2/30/2001 275760-09-14'],
];

const email = (over: Partial<FullEmail>): FullEmail => ({
  message_id: '<m1@x>',
  subject: 'Quarterly gas contract',
  from: 'jane@enron.com',
  date: '2001-03-05T10:00:00.000Z',
  to: ['owner@enron.com'],
  cc: [],
  bcc: [],
  body: 'The contract is worth $2,500.',
  ...over,
});
const mailboxOf = (e: FullEmail): Mailbox => ({
  search: async () => [],
  read: async (_scope, id) => (id === e.message_id ? e : null),
});

describe('hostile text: linear time, no throw', () => {
  it.each(HOSTILE)('answer matching on %s', (_name, text) => {
    const started = Date.now();
    normalise(text);
    exactMatch(text, text);
    tokenF1(text, 'x');
    datesIn(text);
    numbersIn(text);
    addressesIn(text);
    hedges(text, 'March 5, 2001');
    isIdk(text);
    checkAnswer(text, 'jane@enron.com');
    checkAnswer('2001-03-05', text);
    namedEmail(text);
    askedFields(text);
    isNamedEmail(namedEmail(text), email({ body: text, subject: text.slice(0, 998) }));
    expect(Date.now() - started).toBeLessThan(4000);
  });

  it.each(HOSTILE)('verifiers, wrong answers and search candidates on %s', async (_name, text) => {
    const started = Date.now();
    const e = email({ body: text });
    const ctx = {
      mailbox: mailboxOf(e),
      scope: { inbox: 'owner' },
      question: `Who sent me the email that mentions ${text}`,
      reference: text,
      facts: episodeFacts({ answer: text, sources: ['<m1@x>'], readIds: ['<m1@x>'] }),
    };
    for (const v of ['answer_matches_reference', 'answer_in_cited_email', 'cited_email_matches_question'])
      await runVerifier(v, ctx);
    wrongAnswer(text, ['bob@enron.com'], [text]);
    searchCandidates(text, { subject: text, body: text });
    expect(Date.now() - started).toBeLessThan(4000);
  });

  it('finds the addresses the old pattern found', () => {
    expect(addressesIn('Mail Jane.Doe@Enron.com, or a@b@c.co.uk; not x@y, nor @z.com; k@d.e.fg.')).toEqual([
      'jane.doe@enron.com',
      'b@c.co.uk',
      'k@d.e.fg',
    ]);
    expect(normalise('The -- end ... of ./path/ and 1,000.50 a.b.')).toBe('end of path and 1000.50 a.b');
    expect(namedEmail('Who sent me the email about gas deals sent ?').topic).toEqual(['gas', 'deals']);
  });
});

describe('impossible dates', () => {
  const impossible = [
    '2001-02-30',
    '2001-13-01',
    'Feb 31, 2001',
    'February 31, 2001',
    '2/30/2001',
    '2001-00-10',
  ];

  it('are no dates in text, and no wrong answer is made from them', () => {
    for (const d of impossible) {
      expect(datesIn(`sent on ${d}`)).toEqual([]);
      expect(() => wrongAnswer(`On ${d}`, [], [])).not.toThrow();
    }
    expect(datesIn('2000-02-29 2001-02-28 2001-12-31')).toEqual(['2000-02-29', '2001-02-28', '2001-12-31']);
    expect(datesIn('1900-02-29')).toEqual([]);
    expect(wrongAnswer('2001-03-05', [], [])).toBe('2001-03-08');
  });

  it('format totally', () => {
    expect(isoDay(new Date(NaN))).toBe('');
    expect(isoDay(8.64e15 + 1)).toBe('');
    expect(isoDay(new Date('+275760-09-13T00:00:00Z'))).toBe('');
    expect(shiftDay('2001-02-30', 1)).toBeNull();
    expect(shiftDay('9999-12-31', 1)).toBeNull();
    expect(shiftDay('2001-02-28', 1)).toBe('2001-03-01');
  });

  it('in a sender address or body go through search candidates, corrupted negatives and questions', async () => {
    const q = 'What was the subject of the email 2001-02-30@x.com sent me on 2001-02-30?';
    expect(() => searchCandidates(q, { subject: 'a', body: 'b' })).not.toThrow();
    const e = email({ from: '2001-02-30@x.com', body: 'Due February 31, 2001 or 2001-13-01.' });
    const t = {
      messages: [{ role: 'assistant' as const, content: 'On 2001-02-30' }],
      turns: [],
      facts: episodeFacts({ answer: '2001-02-30' }),
    };
    const question = { scope: { inbox: 'owner' }, gold: { messageIds: ['<m1@x>'] } };
    await expect(corrupted(mailboxOf(e), question as never, t as never)).resolves.toBeNull();
    const inbox: InboxEmail[] = [
      {
        messageId: '<a@x>',
        subject: 'Bad day',
        fromAddress: '2001-02-30@x.com',
        date: new Date(NaN),
        body: 'x',
      },
      {
        messageId: '<b@x>',
        subject: 'Stated dates',
        fromAddress: 'jane@enron.com',
        date: new Date('2001-03-05T10:00:00Z'),
        body: 'We meet February 31, 2001 and $1,000 on 2001-02-30.',
      },
    ];
    expect(() => templateQuestions('owner', 'owner@enron.com', inbox)).not.toThrow();
    expect(searchArgsSchema.safeParse({ keywords: [], sent_after: '2001-02-30' }).success).toBe(false);
    expect(searchArgsSchema.safeParse({ keywords: [], sent_after: '2001-02-28' }).success).toBe(true);
  });

  it('in a Date header reject the message with a reason', () => {
    const base = { messageId: '<m@x>', from: { address: 'a@b.com' }, body: '' };
    // V8 reads an ISO 2001-02-30 as March 2 (a real day, nothing throws); a date it cannot read, or one past
    // year 9999, rejects the message.
    for (const date of [
      '+275761-01-01T00:00:00Z',
      'yesterday',
      '+012000-01-01T00:00:00Z',
      '0999-12-31T00:00:00Z',
    ]) {
      const parsed = emailSchema.safeParse({ ...base, date });
      expect(parsed.success).toBe(false);
    }
    expect(emailSchema.safeParse({ ...base, date: '2001-02-28T00:00:00Z' }).success).toBe(true);
  });
});

describe('hostile model JSON', () => {
  it('a deep or odd final_answer is no crash when a negative is made from it', async () => {
    const deep = '{"a":'.repeat(100_000) + '1' + '}'.repeat(100_000);
    for (const args of [deep, '{"__proto__": {"x": 1}, "answer": "a"}', '[1,2]', 'null', '1e400']) {
      const t = {
        messages: [
          {
            role: 'assistant' as const,
            content: null,
            tool_calls: [
              { id: 'c', type: 'function', function: { name: 'return_final_answer', arguments: args } },
            ],
          },
        ],
        turns: [],
        facts: episodeFacts({ answer: '2001-03-05' }),
      };
      const question = { scope: { inbox: 'owner' }, gold: { messageIds: ['<m1@x>'] } };
      const out = await corrupted(mailboxOf(email({})), question as never, t as never);
      expect(out?.facts.answer).toBe('2001-03-08');
      const written = JSON.parse(out?.messages[0].tool_calls?.[0].function.arguments ?? '{}');
      expect(written.answer).toBe('2001-03-08');
    }
    expect(verdictSchema.safeParse(JSON.parse(deep)).success).toBe(false);
    expect(verdictSchema.safeParse(JSON.parse('{"__proto__": {"score": 1}}')).success).toBe(false);
  });
});
