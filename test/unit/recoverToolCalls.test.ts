import { recoverToolCalls } from '../../src/env/recoverToolCalls';

describe('recoverToolCalls', () => {
  it('reads tagged and bare calls', () => {
    expect(
      recoverToolCalls(
        'ok <tool_call>{"name": "read_email", "arguments": {"message_id": "<1>"}}</tool_call>',
      ),
    ).toEqual([{ name: 'read_email', arguments: '{"message_id":"<1>"}' }]);
    expect(
      recoverToolCalls('```json\n{"name": "search_emails", "parameters": {"keywords": ["a"]}}\n```'),
    ).toEqual([{ name: 'search_emails', arguments: '{"keywords":["a"]}' }]);
  });
  it('returns [] for plain text and null for a broken call', () => {
    expect(recoverToolCalls('The answer is 4.')).toEqual([]);
    expect(recoverToolCalls('<tool_call>{"name": oops}</tool_call>')).toBeNull();
    expect(recoverToolCalls('{"arguments": {}}')).toBeNull();
  });
});
