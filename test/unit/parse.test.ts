import { parseMessage } from '../../src/mail/parse';

const origin = { inbox: 'test-u', folder: 'inbox', source: '/x/1.' };
const raw = (text: string) => ({ ...origin, raw: Buffer.from(text.replace(/\n/g, '\r\n'), 'latin1') });

describe('parseMessage', () => {
  it('decodes folded headers, quoted-printable bodies and charsets', async () => {
    const result = await parseMessage(
      raw(
        [
          'Message-ID: <abc.123@thyme>',
          'Date: Thu, 14 Dec 2000 06:33:00 -0800 (PST)',
          'From: "Allen, Phillip" <Phillip.Allen@ENRON.com>',
          'To: a@enron.com,',
          '\tb@enron.com',
          'Cc: Team: c@enron.com, d@enron.com;',
          'Subject: =?iso-8859-1?Q?Caf=E9_lease?=',
          '  renewal',
          'Content-Type: text/plain; charset=iso-8859-1',
          'Content-Transfer-Encoding: quoted-printable',
          '',
          'Rent is $1,500 per month, d=E9j=E0 vu =',
          'soft break.',
        ].join('\n'),
      ),
    );
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.email).toMatchObject({
      messageId: '<abc.123@thyme>',
      subject: expect.stringMatching(/^Café lease\s+renewal$/),
      from: { address: 'phillip.allen@enron.com', name: 'Allen, Phillip' },
      to: [{ address: 'a@enron.com' }, { address: 'b@enron.com' }],
      cc: [{ address: 'c@enron.com' }, { address: 'd@enron.com' }],
    });
    expect(result.email.date.toISOString()).toBe('2000-12-14T14:33:00.000Z');
    expect(result.email.body).toContain('déjà vu soft break.');
  });

  it.each([
    ['an empty file', '', /no headers|Message-ID|unparseable/],
    [
      'no Message-ID',
      'Date: Thu, 14 Dec 2000 06:33:00 -0800\nFrom: a@b.c\n\nhi',
      /messageId: missing Message-ID/,
    ],
    ['a bad date', 'Message-ID: <x@y>\nDate: someday\nFrom: a@b.c\n\nhi', /date/],
    ['no sender', 'Message-ID: <x@y>\nDate: Thu, 14 Dec 2000 06:33:00 -0800\n\nhi', /from/],
    [
      'a NUL in its Message-ID (its identity is never rewritten)',
      'Message-ID: <x\0z@y>\nDate: Thu, 14 Dec 2000 06:33:00 -0800\nFrom: a@b.c\n\nhi',
      /^messageId: contains a NUL/,
    ],
    [
      'a Message-ID longer than a mail line',
      `Message-ID: <${'x'.repeat(1200)}@y>\nDate: Thu, 14 Dec 2000 06:33:00 -0800\nFrom: a@b.c\n\nhi`,
      /^messageId: longer than 998/,
    ],
  ])('rejects %s with a reason', async (_name, text, reason) => {
    const result = await parseMessage(raw(text));
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toMatch(reason);
  });

  it('keeps a message whose subject is over a mail line after unfolding, or whose body holds NULs, noting each repair', async () => {
    const long = 'word '.repeat(300).trim(); // 1,499 characters, folded over many lines
    const folded = long.replace(/(.{70}) /g, '$1\n ');
    const result = await parseMessage(
      raw(
        `Message-ID: <long@y>\nDate: Thu, 14 Dec 2000 06:33:00 -0800\nFrom: "A\0B" <a@b.c>\nSubject: ${folded}\n\nrent\0 is\0 due`,
      ),
    );
    expect(result).toMatchObject({ ok: true });
    if (!result.ok) return;
    expect(result.email.subject).toHaveLength(998);
    expect(result.email.body.trim()).toBe('rent is due');
    expect(result.notes).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^subject: truncated from \d+ to 998 characters/),
        'body: 2 NUL characters stripped',
      ]),
    );
    const json = await parseMessage({
      ...origin,
      json: {
        messageId: '<j@3>',
        subject: 'a\0b',
        from: { address: 'a@b.c' },
        date: '2001-01-02',
        body: 'b',
      },
    });
    expect(json).toMatchObject({
      ok: true,
      email: { subject: 'ab' },
      notes: ['subject: 1 NUL character stripped'],
    });
  });

  it('validates JSONL objects field by field', async () => {
    const good = await parseMessage({
      ...origin,
      json: {
        messageId: '<j@1>',
        subject: 's',
        from: { address: 'a@b.c' },
        date: '2001-01-02T03:04:05Z',
        body: 'b',
      },
    });
    expect(good.ok).toBe(true);
    const bad = await parseMessage({
      ...origin,
      json: { messageId: '<j@2>', from: { address: 'a@b.c' }, date: 'x' },
    });
    expect(bad).toMatchObject({ ok: false, reason: expect.stringMatching(/^(date|body)/) });
  });

  it('rejects a message too big to read, unread', async () => {
    const result = await parseMessage({ ...origin, oversize: 30 * 2 ** 20 });
    expect(result).toMatchObject({ ok: false, reason: expect.stringMatching(/over the \d+-byte cap/) });
  });
});
