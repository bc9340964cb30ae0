import { searchCandidates } from '../../src/env/demonstrations';

const gold = { subject: 'Quarterly gas contract', body: 'The contract is worth $2,500,000.' };

describe('searchCandidates: the searches a demonstration may make from the question alone', () => {
  it('searches by the quoted subject first, then by the question words the email holds', () => {
    expect(
      searchCandidates('Who sent me the email with the subject "Quarterly gas contract"?', gold),
    ).toEqual([
      { keywords: ['quarterly', 'gas', 'contract'] },
      { keywords: ['quarterly', 'gas'] },
      { keywords: ['quarterly'] },
    ]);
    expect(searchCandidates('On what date was the email about gas contract sent?', gold)[0]).toEqual({
      keywords: ['gas', 'contract'],
    });
  });

  it('searches by sender and day only with filters: the warm start demonstrates keyword searches alone', () => {
    const question = 'What was the subject of the email jane@enron.com sent me on 2001-03-05?';
    expect(searchCandidates(question, gold)).toEqual([
      { keywords: [], from: 'jane@enron.com', sent_after: '2001-03-05', sent_before: '2001-03-06' },
    ]);
    expect(searchCandidates(question, gold, false)).toEqual([]);
  });
});
