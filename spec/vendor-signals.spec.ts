import { AxiosHeaders } from 'axios';
import { expect } from 'chai';
import fc from 'fast-check';
import { headerValue, parseHttpDate, parseRateLimitHeaders, parseRateLimitReset, parseRetryAfter, readVendorSignal } from '../lib/vendor-signals.js';

/** 2015-10-21 07:28:00 UTC, in ms. */
const T = Date.UTC(2015, 9, 21, 7, 28, 0);

/** Collects what a parser reports as ignored. */
function reporter() {
  const problems: string[] = [];
  return { problems, report: (problem: string) => problems.push(problem) };
}

describe('vendor signals: parseRetryAfter', () => {
  it('reads delay-seconds as ms', () => {
    expect(parseRetryAfter('120')).to.equal(120_000);
    expect(parseRetryAfter(' 5 ')).to.equal(5_000);
    expect(parseRetryAfter('0')).to.equal(0);
    expect(parseRetryAfter('1.5')).to.equal(1_500); // lenient: some vendors send decimals
  });

  it('reads the three HTTP-date forms against the given clock, a past date giving 0', () => {
    const now = T - 30_000;
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', now)).to.equal(30_000);
    expect(parseRetryAfter('Wednesday, 21-Oct-15 07:28:00 GMT', now)).to.equal(30_000);
    expect(parseRetryAfter('Wed Oct 21 07:28:00 2015', now)).to.equal(30_000);
    expect(parseRetryAfter('wed,  21 oct 2015 07:28:00 gmt', now)).to.equal(30_000); // case and spacing
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', T + 5_000)).to.equal(0);
  });

  for (const malformed of [
    '',
    'soon',
    '-5',
    '5s',
    '1e3',
    '0x10',
    'Infinity',
    'NaN',
    '9'.repeat(400),
    '1,5',
    'Wed, 32 Oct 2015 07:28:00 GMT',
    'Wed, 21 Foo 2015 07:28:00 GMT',
    'Wed, 21 Oct 2015 25:28:00 GMT',
    'Wed, 21 Oct 2015 07:28:00 PST',
    '2015-10-21T07:28:00Z',
    'Sat, 29 Feb 2015 00:00:00 GMT',
  ]) {
    it(`ignores ${JSON.stringify(malformed.slice(0, 40))}`, () => {
      expect(parseRetryAfter(malformed, T)).to.equal(undefined);
    });
  }

  it('ignores what is not a string', () => {
    expect(parseRetryAfter(undefined)).to.equal(undefined);
    expect(parseRetryAfter(null)).to.equal(undefined);
  });
});

describe('vendor signals: parseHttpDate', () => {
  it('parses UTC dates, checks the calendar, and places two-digit years', () => {
    expect(parseHttpDate('Thu, 29 Feb 2024 12:00:00 GMT')).to.equal(Date.UTC(2024, 1, 29, 12));
    expect(parseHttpDate('Thu, 30 Feb 2024 12:00:00 GMT')).to.equal(undefined);
    expect(parseHttpDate('Sunday, 06-Nov-94 08:49:37 GMT', Date.UTC(2025, 0, 1))).to.equal(Date.UTC(1994, 10, 6, 8, 49, 37));
    expect(parseHttpDate('Monday, 06-Nov-30 08:49:37 GMT', Date.UTC(2025, 0, 1))).to.equal(Date.UTC(2030, 10, 6, 8, 49, 37));
    expect(parseHttpDate('Sun Nov  6 08:49:37 1994')).to.equal(Date.UTC(1994, 10, 6, 8, 49, 37)); // asctime is UTC too
  });
});

describe('vendor signals: parseRateLimitReset', () => {
  const now = 1_700_000_000_000;

  it('reads small numbers as seconds from now', () => {
    expect(parseRateLimitReset('30', now)).to.equal(30_000);
    expect(parseRateLimitReset('0')).to.equal(0);
    expect(parseRateLimitReset('1.25')).to.equal(1_250);
    expect(parseRateLimitReset('999999999')).to.equal(999_999_999_000); // just below the epoch threshold
  });

  it('reads numbers from 10^9 as Unix seconds and from 10^12 as Unix ms, against the given clock', () => {
    expect(parseRateLimitReset('1700000030', now)).to.equal(30_000);
    expect(parseRateLimitReset('1700000030.5', now)).to.equal(30_500);
    expect(parseRateLimitReset('1700000030000', now)).to.equal(30_000);
    expect(parseRateLimitReset('1699999990', now)).to.equal(0); // in the past
  });

  for (const malformed of ['', '-1', 'abc', '10s', '1e9', ' ', 'Wed, 21 Oct 2015 07:28:00 GMT']) {
    it(`ignores ${JSON.stringify(malformed)}`, () => {
      expect(parseRateLimitReset(malformed, now)).to.equal(undefined);
    });
  }
});

describe('vendor signals: parseRateLimitHeaders', () => {
  const now = 1_700_000_000_000;

  it('X-RateLimit-*: pauses until the reset of a used-up limit, seconds or epoch', () => {
    expect(parseRateLimitHeaders({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '30' }, now)).to.equal(30_000);
    expect(parseRateLimitHeaders({ 'X-RateLimit-Remaining': '0', 'X-RateLimit-Reset': '1700000060' }, now)).to.equal(60_000);
    expect(parseRateLimitHeaders({ 'x-ratelimit-remaining': '4', 'x-ratelimit-reset': '30' }, now)).to.equal(undefined);
    expect(parseRateLimitHeaders({ 'x-ratelimit-remaining': '0' }, now)).to.equal(undefined); // no reset: nothing to wait for
  });

  it('a refused request without remaining falls back to the reset given', () => {
    expect(parseRateLimitHeaders({ 'x-ratelimit-reset': '30' }, now)).to.equal(undefined);
    expect(parseRateLimitHeaders({ 'x-ratelimit-reset': '30' }, now, { refused: true })).to.equal(30_000);
    expect(parseRateLimitHeaders({ 'x-ratelimit-remaining': '3', 'x-ratelimit-reset': '30' }, now, { refused: true })).to.equal(undefined);
  });

  it('IETF RateLimit, draft-7 dictionary form', () => {
    expect(parseRateLimitHeaders({ ratelimit: 'limit=10, remaining=0, reset=30' }, now)).to.equal(30_000);
    expect(parseRateLimitHeaders({ ratelimit: 'limit=10, remaining=3, reset=30' }, now)).to.equal(undefined);
  });

  it('IETF RateLimit, list of policies: the longest reset among used-up ones', () => {
    expect(parseRateLimitHeaders({ ratelimit: '"default";r=0;t=30' }, now)).to.equal(30_000);
    expect(parseRateLimitHeaders({ ratelimit: 'default;r=0;t=30' }, now)).to.equal(30_000);
    expect(parseRateLimitHeaders({ ratelimit: '"burst";r=0;t=1, "daily";r=0;t=3600' }, now)).to.equal(3_600_000);
    expect(parseRateLimitHeaders({ ratelimit: '"burst";r=5;t=1, "daily";r=0;t=60' }, now)).to.equal(60_000);
    expect(parseRateLimitHeaders({ ratelimit: '"a,b;c";r=0;t=7' }, now)).to.equal(7_000); // separators inside quotes
  });

  it('a used-up policy without t waits its RateLimit-Policy window', () => {
    expect(parseRateLimitHeaders({ ratelimit: '"default";r=0', 'ratelimit-policy': '"default";q=10;w=60' }, now)).to.equal(60_000);
    expect(parseRateLimitHeaders({ ratelimit: '"burst";r=0', 'ratelimit-policy': '"burst";q=2;w=1, "daily";q=100;w=86400' }, now)).to.equal(1_000);
    expect(parseRateLimitHeaders({ 'ratelimit-remaining': '0', 'ratelimit-policy': '10;w=60' }, now)).to.equal(60_000); // drafts 0–6
  });

  it('RateLimit-Remaining/RateLimit-Reset of the earlier drafts', () => {
    expect(parseRateLimitHeaders({ 'ratelimit-limit': '10', 'ratelimit-remaining': '0', 'ratelimit-reset': '20' }, now)).to.equal(20_000);
  });

  it('combines every header: the longest reset wins', () => {
    const headers = { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '10', ratelimit: '"default";r=0;t=30' };
    expect(parseRateLimitHeaders(headers, now)).to.equal(30_000);
  });

  it('a repeated header counts its lowest remaining and its latest reset', () => {
    expect(parseRateLimitHeaders({ 'x-ratelimit-remaining': ['5', '0'], 'x-ratelimit-reset': '10, 40' }, now)).to.equal(40_000);
  });

  it('reads fetch Headers, AxiosHeaders and plain objects alike, case-insensitively', () => {
    const init = { 'X-RateLimit-Remaining': '0', 'X-RateLimit-Reset': '30' };
    expect(parseRateLimitHeaders(new Headers(init), now)).to.equal(30_000);
    expect(parseRateLimitHeaders(new AxiosHeaders(init), now)).to.equal(30_000);
    expect(parseRateLimitHeaders({ 'x-ratelimit-remaining': 0, 'x-ratelimit-reset': 30 }, now)).to.equal(30_000); // numbers
    expect(headerValue({ 'Retry-After': '5' }, 'retry-after')).to.equal('5');
  });

  describe('malformed values are ignored and reported, never thrown', () => {
    const cases: Array<[string, Record<string, string>, number | undefined]> = [
      ['a remaining that is not a number', { 'x-ratelimit-remaining': 'none', 'x-ratelimit-reset': '30' }, undefined],
      ['a negative remaining', { 'x-ratelimit-remaining': '-1', 'x-ratelimit-reset': '30' }, undefined],
      ['a reset that is not a number', { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': 'tomorrow' }, undefined],
      ['one bad value among good ones', { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': 'x, 30' }, 30_000],
      ['a dictionary with a bad member', { ratelimit: 'limit=10, remaining=zero, reset=30' }, undefined],
      ['a dictionary with nothing usable', { ratelimit: 'limit=10' }, undefined],
      ['an item without r or t', { ratelimit: '"default";q=10' }, undefined],
      ['a bad item next to a good one', { ratelimit: '@@@;r=0;t=5, "ok";r=0;t=9' }, 9_000],
      ['an unterminated string', { ratelimit: '"default;r=0;t=30' }, undefined],
      ['a bad t', { ratelimit: '"default";r=0;t=-3' }, undefined],
      ['a bad policy window', { ratelimit: '"default";r=0', 'ratelimit-policy': '"default";w=soon' }, undefined],
    ];
    for (const [what, headers, expected] of cases) {
      it(what, () => {
        const { problems, report } = reporter();
        expect(parseRateLimitHeaders(headers, now, { report })).to.equal(expected);
        expect(problems).to.have.length.at.least(1);
        expect(problems.join('\n')).to.match(/^ignored malformed/);
      });
    }

    it('any text in any of the headers: no exception, and a whole number of ms from 0 up or undefined', () => {
      const names = [
        'retry-after',
        'date',
        'ratelimit',
        'ratelimit-policy',
        'ratelimit-remaining',
        'ratelimit-reset',
        'x-ratelimit-remaining',
        'x-ratelimit-reset',
      ];
      const text = fc.oneof(fc.string(), fc.constantFrom('0', '30', '"x";r=0;t=', 'r=0', ';', ',', '"', '\\', 'remaining=0, reset='));
      fc.assert(
        fc.property(fc.dictionary(fc.constantFrom(...names), text), fc.integer({ min: 100, max: 599 }), (headers, status) => {
          const ms = parseRateLimitHeaders(headers, now, { refused: true, report: () => {} });
          const signal = readVendorSignal({ status, headers, now, report: () => {} });
          for (const value of [ms, signal.pauseMs, parseRetryAfter(headers['retry-after']), parseRateLimitReset(headers['x-ratelimit-reset'])]) {
            if (value !== undefined) expect(Number.isInteger(value) && value >= 0, String(value)).to.equal(true);
          }
        }),
        { numRuns: 2_000 },
      );
    });
  });
});

describe('vendor signals: readVendorSignal (the policy)', () => {
  const now = T;
  const read = (status: number, headers: Record<string, string> = {}, flagged = false) => readVendorSignal({ status, headers, flagged, now, report: () => {} });

  it('429 is a refusal, with or without a pause', () => {
    expect(read(429)).to.deep.equal({ refused: true, pauseMs: undefined });
    expect(read(429, { 'retry-after': '3' })).to.deep.equal({ refused: true, pauseMs: 3_000 });
    expect(read(429, { ratelimit: '"default";r=0;t=4' })).to.deep.equal({ refused: true, pauseMs: 4_000 });
    expect(read(429, { 'x-ratelimit-reset': '5' })).to.deep.equal({ refused: true, pauseMs: 5_000 });
  });

  it('Retry-After comes first, then the used-up limits', () => {
    expect(read(429, { 'retry-after': '2', ratelimit: '"default";r=0;t=30' })).to.deep.equal({ refused: true, pauseMs: 2_000 });
  });

  it('Retry-After-Ms is read too, and with Retry-After the longer wait is obeyed', () => {
    expect(read(429, { 'retry-after-ms': '734.2' })).to.deep.equal({ refused: true, pauseMs: 735 });
    expect(read(429, { 'retry-after': '1', 'retry-after-ms': '734' })).to.deep.equal({ refused: true, pauseMs: 1_000 });
    expect(read(429, { 'retry-after': '1', 'retry-after-ms': '1500' })).to.deep.equal({ refused: true, pauseMs: 1_500 });
    expect(read(503, { 'retry-after-ms': '200' })).to.deep.equal({ refused: true, pauseMs: 200 });
    const problems: string[] = [];
    const signal = readVendorSignal({
      status: 429,
      headers: { 'retry-after': '2', 'retry-after-ms': 'soon' },
      now,
      report: (problem) => problems.push(problem),
    });
    expect(signal).to.deep.equal({ refused: true, pauseMs: 2_000 });
    expect(problems).to.deep.equal(['ignored malformed Retry-After-Ms value "soon"']);
  });

  it('503 and 403 are refusals only with Retry-After or a used-up limit (GitHub answers 403)', () => {
    expect(read(503)).to.deep.equal({ refused: false, pauseMs: undefined });
    expect(read(503, { 'retry-after': '7' })).to.deep.equal({ refused: true, pauseMs: 7_000 });
    expect(read(403)).to.deep.equal({ refused: false, pauseMs: undefined });
    const github = { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(Math.floor(T / 1_000) + 600) };
    expect(read(403, github)).to.deep.equal({ refused: true, pauseMs: 600_000 });
    expect(read(500, { 'retry-after': '7' })).to.deep.equal({ refused: false, pauseMs: undefined });
  });

  it('a success that used the last call pauses the key without being a refusal', () => {
    expect(read(200, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '10' })).to.deep.equal({ refused: false, pauseMs: 10_000 });
    expect(read(200, { 'retry-after': '10' })).to.deep.equal({ refused: false, pauseMs: undefined }); // only read on refusals
  });

  it("the user's hook turns any response into a refusal", () => {
    expect(read(200, {}, true)).to.deep.equal({ refused: true, pauseMs: undefined });
    expect(read(200, { 'retry-after': '1' }, true)).to.deep.equal({ refused: true, pauseMs: 1_000 });
  });

  it("measures absolute times on the vendor's clock (Date header), else on the local one", () => {
    const headers = { date: 'Wed, 21 Oct 2015 07:27:00 GMT', 'retry-after': 'Wed, 21 Oct 2015 07:28:00 GMT' };
    expect(readVendorSignal({ status: 429, headers, now: T + 3_600_000 }).pauseMs).to.equal(60_000);
    expect(readVendorSignal({ status: 429, headers: { 'retry-after': headers['retry-after'] }, now: T - 10_000 }).pauseMs).to.equal(10_000);
    const epoch = { date: 'Wed, 21 Oct 2015 07:28:00 GMT', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(T / 1_000 + 90) };
    expect(readVendorSignal({ status: 200, headers: epoch, now: 0 }).pauseMs).to.equal(90_000);
  });

  it('reports a malformed Date or Retry-After and carries on', () => {
    const { problems, report } = reporter();
    const signal = readVendorSignal({ status: 429, headers: { date: 'yesterday', 'retry-after': 'later', 'x-ratelimit-reset': '3' }, now, report });
    expect(signal).to.deep.equal({ refused: true, pauseMs: 3_000 });
    expect(problems).to.deep.equal(['ignored malformed Date header "yesterday"; using the local clock', 'ignored malformed Retry-After header "later"']);
  });
});
