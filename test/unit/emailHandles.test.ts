import { MessageHandles, runEmailTool } from '../../src/env/emailTools';
import type { FullEmail, Mailbox } from '../../src/mail/search';

/** Two different emails of one inbox under one Message-ID, stored as rows 7 and 9, as src/store/mailbox.ts serves them. */
const stored: FullEmail[] = [
  {
    message_id: '<same@x>',
    email_id: '7',
    subject: 'first',
    from: 'a@b.c',
    date: '2001-01-01T00:00:00.000Z',
    to: [],
    cc: [],
    bcc: [],
    body: 'the first body',
  },
  {
    message_id: '<same@x>',
    email_id: '9',
    subject: 'second',
    from: 'a@b.c',
    date: '2001-01-02T00:00:00.000Z',
    to: [],
    cc: [],
    bcc: [],
    body: 'the second body',
  },
];
const mailbox: Mailbox = {
  search: async () => stored.map((e) => ({ ...e, snippet: e.body })),
  read: async (_scope, messageId, emailId) =>
    stored.find((e) => e.message_id === messageId && (emailId === undefined || e.email_id === emailId)) ??
    null,
};
const scope = { inbox: 'u' };
const limits = { searchHits: 10, bodyChars: 1000 };

describe('handles of emails sharing a Message-ID', () => {
  it('gives each its own handle, reads each as itself, and records their Message-ID as the facts’ id', async () => {
    const handles = new MessageHandles();
    const search = await runEmailTool(
      mailbox,
      scope,
      'search_emails',
      { keywords: ['body'] },
      limits,
      handles,
    );
    expect(search).toMatchObject({ kind: 'result', searchedIds: ['<same@x>', '<same@x>'] });
    const lines = search.kind === 'result' ? search.content.split('\n') : [];
    expect(lines.map((l) => l.split(' | ')[0])).toEqual(['m1', 'm2']);
    for (const [handle, body] of [
      ['m1', 'the first body'],
      ['m2', 'the second body'],
    ]) {
      const read = await runEmailTool(mailbox, scope, 'read_email', { message_id: handle }, limits, handles);
      expect(read).toMatchObject({ kind: 'result', readId: '<same@x>' });
      expect(read.kind === 'result' && read.content).toContain(`id: ${handle}\n`);
      expect(read.kind === 'result' && read.content).toContain(body);
    }
    // The full Message-ID still reads (the first stored), and sources resolve to the real id for the reward.
    const byId = await runEmailTool(
      mailbox,
      scope,
      'read_email',
      { message_id: '<same@x>' },
      limits,
      handles,
    );
    expect(byId.kind === 'result' && byId.content).toContain('the first body');
    const final = await runEmailTool(
      mailbox,
      scope,
      'return_final_answer',
      { answer: 'x', sources: ['m2', 'm1'] },
      limits,
      handles,
    );
    expect(final).toMatchObject({ kind: 'final', sources: ['<same@x>', '<same@x>'] });
    expect(handles.handle('<same@x>')).toBe('m1'); // a gold id names the first of them
  });
});
