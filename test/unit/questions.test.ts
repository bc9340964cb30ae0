import { givesAwayAnswer, questionId, splitInboxes } from '../../src/mail/question';
import { parseQuestionReply } from '../../src/mail/llmQuestions';
import { templateQuestions, type InboxEmail } from '../../src/mail/templateQuestions';

const email = (over: Partial<InboxEmail>): InboxEmail => ({
  messageId: '<m1@x>',
  subject: 'Quarterly gas contract',
  fromAddress: 'jane@enron.com',
  date: new Date('2001-03-05T10:00:00Z'),
  body: 'The contract is worth $2,500,000 and starts April 1, 2001.',
  ...over,
});

describe('templateQuestions', () => {
  it('asks who, when, which amount and which date, with the gold ids and a later query date', () => {
    const qs = templateQuestions('owner-a', 'owner@enron.com', [email({})]);
    const byTemplate = Object.fromEntries(qs.map((q) => [q.source, q]));
    expect(byTemplate['template:who_sent'].answer).toBe('jane@enron.com');
    expect(byTemplate['template:when_sent'].answer).toBe('2001-03-05');
    expect(byTemplate['template:amount'].answer).toBe('$2,500,000');
    expect(byTemplate['template:stated_date'].answer).toBe('April 1, 2001');
    expect(byTemplate['template:subject'].answer).toBe('Quarterly gas contract');
    for (const q of qs) {
      expect(q.messageIds).toEqual(['<m1@x>']);
      expect(q.queryDate.getTime()).toBeGreaterThan(new Date('2001-03-05T10:00:00Z').getTime());
    }
  });

  it('treats copies of one email as one, and skips ambiguous subjects', () => {
    const copies = [email({}), email({ messageId: '<m2@x>' })];
    const who = templateQuestions('a', null, copies).find((q) => q.source === 'template:who_sent');
    expect(who?.messageIds).toEqual(['<m1@x>', '<m2@x>']);
    const clash = [email({}), email({ messageId: '<m3@x>', fromAddress: 'bob@enron.com' })];
    expect(templateQuestions('a', null, clash).filter((q) => q.source === 'template:who_sent')).toEqual([]);
  });

  it('does not ask the owner who sent their own mail, nor about two amounts', () => {
    const qs = templateQuestions('a', 'jane@enron.com', [email({ body: '$5 or $6' })]);
    expect(qs.map((q) => q.source).sort()).toEqual(['template:when_sent', 'template:when_sent_topic']);
  });

  it('names an email without quoting its subject: by its rarer words, by sender and day, by a body fact', () => {
    const mailbox = [
      email({}),
      email({
        messageId: '<m2@x>',
        subject: 'Gas contract renewal',
        date: new Date('2001-03-09T10:00:00Z'),
        body: 'see $7',
      }),
    ];
    const qs = templateQuestions('owner-a', 'owner@enron.com', mailbox).filter(
      (q) => q.messageIds[0] === '<m1@x>',
    );
    const bySource = Object.fromEntries(qs.map((q) => [q.source, q]));
    // "gas contract" is in both subjects: the paraphrase needs "quarterly", and is still not the whole subject.
    expect(bySource['template:who_sent_topic'].question).toBe('Who sent me the email about quarterly gas?');
    expect(bySource['template:who_sent_topic'].question).not.toContain('Quarterly gas contract');
    expect(bySource['template:amount_by_sender']).toMatchObject({
      question: 'What dollar amount is mentioned in the email jane@enron.com sent me on 2001-03-05?',
      answer: '$2,500,000',
    });
    expect(bySource['template:who_mentioned']).toMatchObject({
      question: 'Who sent me the email that mentions $2,500,000?',
      answer: 'jane@enron.com',
    });
    for (const q of qs.filter((q) => /_topic|_by_sender|who_mentioned/.test(q.source))) {
      expect(q.question.toLowerCase()).not.toContain('quarterly gas contract');
    }
  });

  it('asks no paraphrase or body-fact question that another email would also answer', () => {
    const twin = email({
      messageId: '<m2@x>',
      subject: 'Gas contract quarterly',
      date: new Date('2001-03-09T10:00:00Z'),
    });
    const qs = templateQuestions('owner-a', 'owner@enron.com', [email({}), twin]);
    // Same words in both subjects, and $2,500,000 in both bodies: neither names one email.
    expect(qs.filter((q) => /_topic$|who_mentioned/.test(q.source))).toEqual([]);
    // Three-word subjects leave no shorter paraphrase, and a short subject is never paraphrased.
    const short = templateQuestions('a', null, [email({ subject: 'Gas contract' })]);
    expect(short.filter((q) => q.source.endsWith('_topic'))).toEqual([]);
  });
});

describe('givesAwayAnswer', () => {
  it('refuses questions that state their answer, in any date format or as the subject', () => {
    const ask = (question: string, answer: string) => givesAwayAnswer({ question, answer });
    expect(
      ask('What date is given in the email jane@enron.com sent me on 2001-11-20?', 'November 20, 2001'),
    ).toBe(true);
    expect(
      ask('On what date was the email "Headlines for Sunday, November 25, 2001" sent?', '2001-11-25'),
    ).toBe(true);
    expect(
      ask('What date is given in the email jane@enron.com sent me on 2001-11-20?', 'November 6, 2001'),
    ).toBe(false);
    expect(ask('Who sent me the email that mentions $25.00?', 'calxa@aol.com')).toBe(false);
    expect(ask('What dollar amount is mentioned in the email about the 2002 budget?', '$25.00')).toBe(false);
  });

  it("keeps the templates from asking them, and drops them from a teacher's reply", () => {
    const sameDay = email({ body: 'Notice dated March 5, 2001: the contract starts soon.' });
    const qs = templateQuestions('owner-a', 'owner@enron.com', [sameDay]);
    expect(qs.filter((q) => q.source === 'template:stated_date')).toHaveLength(1);
    expect(qs.filter((q) => q.source === 'template:stated_date_by_sender')).toEqual([]);
    expect(qs.filter((q) => q.source === 'template:subject')).toHaveLength(1);
    for (const q of qs) expect(givesAwayAnswer(q)).toBe(false);

    const reply = `{"questions": [{"question": "What date is in the notice of 2001-03-05?", "answer": "March 5, 2001",
      "message_ids": ["<m1@x>"], "how_realistic": 0.9}]}`;
    expect(parseQuestionReply(reply, 'a', [sameDay], 'judge', 0.5)).toMatchObject({
      questions: [],
      dropped: 1,
    });
  });
});

describe('splitInboxes', () => {
  it('is deterministic per seed and holds out whole inboxes', () => {
    const inboxes = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
    const one = splitInboxes(inboxes, 0.3, 's1');
    expect(splitInboxes([...inboxes].reverse(), 0.3, 's1')).toEqual(one);
    expect([...one.values()].filter((s) => s === 'test')).toHaveLength(2);
    const seeds = ['s1', 's2', 's3', 's4'].map((s) =>
      JSON.stringify([...splitInboxes(inboxes, 0.3, s)].sort()),
    );
    expect(new Set(seeds).size).toBeGreaterThan(1);
  });
});

describe('parseQuestionReply', () => {
  const batch = [email({})];
  it('keeps valid items and drops those citing unknown ids', () => {
    const reply = `Sure! {"questions": [
      {"question": "How much is the gas contract worth?", "answer": "$2.5M", "message_ids": ["<m1@x>"], "how_realistic": 0.9},
      {"question": "Who wrote the memo nobody sent?", "answer": "x", "message_ids": ["<nope>"], "how_realistic": 0.2},
      {"question": "What is the 3rd word of the email?", "answer": "gas", "message_ids": ["<m1@x>"], "how_realistic": 0.1}]}`;
    const { questions, dropped, unrealistic } = parseQuestionReply(reply, 'a', batch, 'judge', 0.5);
    expect(questions).toHaveLength(1);
    expect(questions[0]).toMatchObject({ source: 'llm:judge', howRealistic: 0.9, messageIds: ['<m1@x>'] });
    expect({ dropped, unrealistic }).toEqual({ dropped: 1, unrealistic: 1 });
    expect(parseQuestionReply(reply, 'a', batch, 'judge', 0).questions).toHaveLength(2);
  });
  it('turns a malformed reply into a dropped batch, not a throw', () => {
    expect(parseQuestionReply('no json here', 'a', batch, 'judge', 0.5)).toEqual({
      questions: [],
      dropped: 1,
      unrealistic: 0,
    });
  });
});

it('question ids are stable and content-addressed', () => {
  const q = { source: 's', inbox: 'a', question: 'q?', messageIds: ['<2>', '<1>'] };
  expect(questionId(q)).toBe(questionId({ ...q, messageIds: ['<1>', '<2>'] }));
  expect(questionId(q)).not.toBe(questionId({ ...q, question: 'other?' }));
});
