import {
  checkAnswer,
  datesAndNumbersMatch,
  datesIn,
  exactMatch,
  isIdk,
  normalise,
  tokenF1,
} from '../../src/reward/answerMatch';
import { deterministicReward, rewardWeightsSchema } from '../../src/reward/deterministic';
import type { EpisodeFacts } from '../../src/env/trajectory';
import { episodeFacts } from '../episodeFacts';

const W = rewardWeightsSchema.parse({});
const gold = { answer: 'phillip.allen@enron.com', messageIds: ['<g1>', '<g2>'] };
const facts = (over: Partial<EpisodeFacts>) =>
  episodeFacts({
    answer: 'phillip.allen@enron.com',
    sources: ['<g1>'],
    searchedIds: ['<g1>', '<x>'],
    readIds: ['<g1>'],
    turns: 3,
    ...over,
  });

describe('answer matching', () => {
  it('normalises case, punctuation, articles and thousands separators', () => {
    expect(normalise('The  Lease, signed!')).toBe('lease signed');
    expect(normalise('$1,500.00')).toBe('$1500.00');
    expect(normalise('From: _Daily_Word_123@dictionary.com_')).toBe('from daily_word_123@dictionary.com');
    expect(exactMatch('Phillip.Allen@enron.com.', 'phillip.allen@enron.com')).toBe(true);
    expect(exactMatch('', '')).toBe(false);
  });
  it('scores token F1', () => {
    expect(tokenF1('the quarterly gas contract', 'Quarterly gas contract')).toBe(1);
    expect(tokenF1('gas contract renewal', 'quarterly gas contract')).toBeCloseTo(2 / 3);
    expect(tokenF1('nothing', 'quarterly gas contract')).toBe(0);
  });
  it('reads dates in several spellings and numbers with separators', () => {
    expect(datesIn('sent on December 14, 2000 and 2001-03-05, due 4/1/2001').sort()).toEqual([
      '2000-12-14',
      '2001-03-05',
      '2001-04-01',
    ]);
    expect(datesAndNumbersMatch('It was sent Dec. 14, 2000', '2000-12-14')).toBe(false); // "Dec." is not a full month name
    expect(datesAndNumbersMatch('It was sent December 14, 2000', '2000-12-14')).toBe(true);
    expect(datesAndNumbersMatch('about $2,500,000', '$2,500,000')).toBe(true);
    expect(datesAndNumbersMatch('about $2,400,000', '$2,500,000')).toBe(false);
    expect(datesAndNumbersMatch('Jane', 'jane@enron.com')).toBeNull();
  });
  it('recognises "I don\'t know"', () => {
    expect(isIdk("I don't know")).toBe(true);
    expect(isIdk('I could not find any email about it')).toBe(true);
    expect(isIdk('It was Jane')).toBe(false);
  });
});

describe('deterministicReward', () => {
  it('rewards a correct, sourced, quick answer above 1', () => {
    const r = deterministicReward(facts({}), gold, 10, W);
    expect(r).toMatchObject({
      correct: true,
      exactMatch: true,
      formatValid: true,
      foundGold: true,
      readGold: true,
      hallucinatedIds: 0,
    });
    expect(r.sourcesRecall).toBe(0.5);
    expect(r.total).toBeCloseTo(1 + 0.1 * 0.5 + 0.1 * 0.7 + 0.1 + 0.1);
  });
  it("orders correct > I don't know > wrong > malformed", () => {
    const correct = deterministicReward(facts({}), gold, 10, W).total;
    const idk = deterministicReward(facts({ answer: "I don't know", sources: [] }), gold, 10, W).total;
    const wrong = deterministicReward(facts({ answer: 'jane@enron.com' }), gold, 10, W).total;
    const malformed = deterministicReward(
      facts({ answer: null, ending: 'malformed', malformedCalls: 2 }),
      gold,
      10,
      W,
    ).total;
    expect(correct).toBeGreaterThan(idk);
    expect(idk).toBeGreaterThan(wrong);
    expect(wrong).toBeGreaterThan(malformed);
  });
  it('penalises cited ids the agent never saw, and counts bad calls against the format', () => {
    const r = deterministicReward(facts({ sources: ['<g1>', '<made-up>'], badArguments: 1 }), gold, 10, W);
    expect(r.hallucinatedIds).toBe(1);
    expect(r.formatValid).toBe(false);
    expect(r.sourcesPrecision).toBe(0.5);
  });
  it('is reproducible for a stored trajectory', () => {
    expect(deterministicReward(facts({}), gold, 10, W)).toEqual(deterministicReward(facts({}), gold, 10, W));
  });
});

describe('checkAnswer', () => {
  it('accepts a verbose answer that contains the reference, unless it contradicts a date or number', () => {
    expect(checkAnswer('It was sent by phillip.allen@enron.com.', 'phillip.allen@enron.com').correct).toBe(
      true,
    );
    expect(checkAnswer('The email was sent on December 14, 2000', '2000-12-14').correct).toBe(true);
    expect(checkAnswer('The amount was $1,500 not $2,000 as in 2000-12-14', '$1,500').correct).toBe(true);
    expect(checkAnswer('It was sent on 2000-12-15', '2000-12-14').correct).toBe(false);
    expect(checkAnswer("I don't know", 'phillip.allen@enron.com').correct).toBe(false);
  });
  it("reads a date copied from a search hit's timestamp", () => {
    expect(datesIn('2001-05-05T14:32:00.000Z')).toEqual(['2001-05-05']);
    expect(checkAnswer('2001-05-05T14:32:00.000Z', '2001-05-05').correct).toBe(true);
    expect(datesIn('id 12001-05-050')).toEqual([]); // not a date inside a longer number
  });
  it('cannot be gamed by listing candidates', () => {
    const senders = 'a@enron.com, phillip.allen@enron.com, b@enron.com, c@enron.com';
    expect(checkAnswer(senders, 'phillip.allen@enron.com').correct).toBe(false);
    expect(checkAnswer('$100, $250, $1,500, $3,000, $7,000', '$1,500').correct).toBe(false);
    expect(checkAnswer('2001-01-01 or 2001-01-02 or 2000-12-14', '2000-12-14').correct).toBe(false);
    const subjects = 'Gas lease, Budget, Q3 numbers, Re: dinner, Meeting notes, Forecast, Travel plans';
    expect(checkAnswer(subjects, 'Meeting notes').correct).toBe(false);
    // A little context stays correct.
    expect(checkAnswer('phillip.allen@enron.com, to me@enron.com', 'phillip.allen@enron.com').correct).toBe(
      true,
    );
    expect(checkAnswer('Meeting notes', 'meeting notes').correct).toBe(true);
  });
});
