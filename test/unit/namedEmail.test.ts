import type { FullEmail, Mailbox } from '../../src/mail/search';
import { templateQuestions, type InboxEmail } from '../../src/mail/templateQuestions';
import { askedFields, isNamedEmail, namedEmail, runVerifier } from '../../src/reward/verifiers';
import { episodeFacts } from '../episodeFacts';

// Two emails that share a sender and words of their subjects, so that every naming must pick one of them.
const mailbox: InboxEmail[] = [
  {
    messageId: '<m1@x>',
    subject: 'Quarterly gas contract',
    fromAddress: 'jane@enron.com',
    date: new Date('2001-03-05T10:00:00Z'),
    body: 'The contract is worth $2,500,000 and starts April 1, 2001.',
  },
  {
    messageId: '<m2@x>',
    subject: 'Gas contract renewal',
    fromAddress: 'jane@enron.com',
    date: new Date('2001-03-09T10:00:00Z'),
    body: 'Renewal at $7 per unit from May 2, 2001.',
  },
];
const asRead = (e: InboxEmail): FullEmail => ({
  message_id: e.messageId,
  subject: e.subject,
  from: e.fromAddress,
  date: e.date.toISOString(),
  to: ['owner@enron.com'],
  cc: [],
  bcc: [],
  body: e.body,
});

describe('cited_email_matches_question: what a question names', () => {
  it('reads every template phrasing, and the named email is the gold one and not the other', () => {
    const questions = templateQuestions('owner-a', 'owner@enron.com', mailbox);
    const sources = new Set(questions.map((q) => q.source));
    for (const kind of ['who_sent_topic', 'amount_by_sender', 'who_mentioned', 'stated_date_topic'])
      expect(sources).toContain(`template:${kind}`);
    for (const q of questions) {
      const named = namedEmail(q.question);
      const [gold, other] = q.messageIds[0] === '<m1@x>' ? mailbox : [...mailbox].reverse();
      expect({ q: q.question, gold: isNamedEmail(named, asRead(gold)) }).toEqual({
        q: q.question,
        gold: true,
      });
      expect({ q: q.question, other: isNamedEmail(named, asRead(other)) }).toEqual({
        q: q.question,
        other: false,
      });
    }
  });

  it('takes a date or address that the body mentions for the body, not for the day sent', () => {
    expect(namedEmail('Who sent me the email that mentions April 1, 2001?')).toEqual({
      subject: [],
      topic: [],
      mentions: ['april 1 2001'],
      addresses: [],
      dates: [],
    });
    expect(namedEmail('On what date was the email about quarterly gas sent?').topic).toEqual([
      'quarterly',
      'gas',
    ]);
    expect(
      namedEmail('What was the subject of the email jane@enron.com sent me on 2001-03-05?'),
    ).toMatchObject({
      addresses: ['jane@enron.com'],
      dates: ['2001-03-05'],
      topic: [],
    });
  });

  it('checks addresses as written and topic words as the templates split subjects', () => {
    const deal = asRead({
      messageId: '<d@x>',
      subject: 'Nescience: Dictionary.com Word of the Day',
      fromAddress: 'daily_word123@dictionary.com',
      date: new Date('2002-03-11T08:00:00Z'),
      body: 'nescience',
    });
    const [topic] = templateQuestions('a', null, [
      { ...mailbox[0] },
      {
        messageId: '<d@x>',
        subject: deal.subject,
        fromAddress: deal.from,
        date: new Date(deal.date),
        body: 'x',
      },
    ]).filter((q) => q.source === 'template:who_sent_topic' && q.messageIds[0] === '<d@x>');
    expect(isNamedEmail(namedEmail(topic.question), deal)).toBe(true);
    expect(
      isNamedEmail(
        namedEmail('Who sent me the email daily_word123@dictionary.com sent me on 2002-03-11?'),
        deal,
      ),
    ).toBe(true);
  });
});

describe('answer_in_cited_email: the field a question asks for', () => {
  const emails = new Map(mailbox.map((e) => [e.messageId, asRead(e)]));
  // Only read is called by this verifier; the real mailbox is checked in test/integration/emailAgent.test.ts.
  const inbox: Mailbox = { search: async () => [], read: async (_scope, id) => emails.get(id) ?? null };
  const check = (question: string, answer: string, id = '<m1@x>') =>
    runVerifier('answer_in_cited_email', {
      mailbox: inbox,
      scope: { inbox: 'owner-a' },
      question,
      reference: null,
      facts: episodeFacts({ answer, sources: [id], searchedIds: [id], readIds: [id] }),
    });

  it('finds every template answer in the field its question asks for', async () => {
    const questions = templateQuestions('owner-a', 'owner@enron.com', mailbox);
    expect(questions.length).toBeGreaterThan(10);
    for (const q of questions) {
      expect({ q: q.question, asked: askedFields(q.question).length }).not.toEqual({
        q: q.question,
        asked: 5,
      });
      const result = await check(q.question, q.answer, q.messageIds[0]);
      expect({ q: q.question, passed: result.passed }).toEqual({ q: q.question, passed: true });
    }
  });

  it('fails an answer found only in another field: a recipient for the sender, the day sent for a stated date', async () => {
    const sender = await check('Who sent me the email about quarterly gas?', 'owner@enron.com');
    expect(sender).toMatchObject({ passed: false, critical: true });
    expect(sender.detail).toBe(
      "the answer appears in the cited email's to, not in its from, which the question asks for",
    );
    const stated = await check('What date is given in the email about quarterly gas?', '2001-03-05');
    expect(stated).toMatchObject({ passed: false, critical: true });
    expect((await check('What date is given in the email about quarterly gas?', '2001-04-01')).passed).toBe(
      true,
    );
    // A question of no template's phrasing may be answered from any field.
    expect((await check('Which address did the gas contract go to?', 'owner@enron.com')).passed).toBe(true);
  });

  it('fails an episode that never answered critically, and leaves an honest "I don\'t know" to the judge', async () => {
    const facts = (answer: string | null) => episodeFacts({ answer, sources: [], ending: 'malformed' });
    const run = (answer: string | null) =>
      runVerifier('answer_in_cited_email', {
        mailbox: inbox,
        scope: { inbox: 'owner-a' },
        question: 'Who sent me the email about quarterly gas?',
        reference: null,
        facts: facts(answer),
      });
    expect(await run(null)).toMatchObject({ passed: false, critical: true, detail: 'no answer given' });
    expect(await run("I don't know")).toMatchObject({ passed: false, critical: false });
  });
});
