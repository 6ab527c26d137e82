import { expect } from 'chai';
import { ThrottleConfigError } from '../lib/errors.js';
import { formatRule, parseRule, parseRules } from '../lib/rules.js';
import type { RuleString } from '../lib/rules.js';

describe('rules', () => {
  it('parses the shorthand units and durations', () => {
    expect(parseRule('5/s')).to.deep.equal({ limit: 5, windowMs: 1_000 });
    expect(parseRule('30/min')).to.deep.equal({ limit: 30, windowMs: 60_000 });
    expect(parseRule('100/h')).to.deep.equal({ limit: 100, windowMs: 3_600_000 });
    expect(parseRule('10000/day')).to.deep.equal({ limit: 10_000, windowMs: 86_400_000 });
    expect(parseRule('30/90s')).to.deep.equal({ limit: 30, windowMs: 90_000 });
    expect(parseRule('20/500ms')).to.deep.equal({ limit: 20, windowMs: 500 });
    expect(parseRule(' 3 / 1.5h ' as RuleString)).to.deep.equal({ limit: 3, windowMs: 5_400_000 });
    expect(parseRule({ limit: 30, windowMs: 60_000 })).to.deep.equal({ limit: 30, windowMs: 60_000 });
  });

  it('parses a cap on calls in flight as a rule of window 0', () => {
    expect(parseRule('4 concurrent')).to.deep.equal({ limit: 4, windowMs: 0 });
    expect(parseRule(' 1  Concurrent ' as RuleString)).to.deep.equal({ limit: 1, windowMs: 0 });
    expect(parseRule({ concurrent: 4 })).to.deep.equal({ limit: 4, windowMs: 0 });
    expect(parseRules(['30/min', '4 concurrent'])).to.deep.equal([
      { limit: 30, windowMs: 60_000 },
      { limit: 4, windowMs: 0 },
    ]);
    expect(() => parseRule('0 concurrent')).to.throw(ThrottleConfigError, /limit/);
    expect(() => parseRule('4concurrent' as RuleString)).to.throw(ThrottleConfigError, /'4 concurrent'/);
    expect(() => parseRule({ concurrent: 1.5 })).to.throw(ThrottleConfigError, /limit/);
    expect(() => parseRule({ concurrent: 4, limit: 4, windowMs: 1_000 } as never)).to.throw(ThrottleConfigError, /not both/);
    // { limit, windowMs: 0 } is refused, with the way to write a cap in flight.
    expect(() => parseRule({ limit: 4, windowMs: 0 })).to.throw(ThrottleConfigError, /\{ concurrent: N \}/);
  });

  for (const bad of ['30/fortnight', '30', '/min', '0/min', '-1/min', '1.5/min', '30/0s', '30/0.5ms', 'abc', '']) {
    it(`rejects '${bad}' saying what was expected`, () => {
      expect(() => parseRule(bad as RuleString)).to.throw(ThrottleConfigError, /Expected/);
    });
  }

  for (const bad of [
    { limit: 0, windowMs: 1000 },
    { limit: 1.5, windowMs: 1000 },
    { limit: NaN, windowMs: 1000 },
    { limit: Infinity, windowMs: 1000 },
    { limit: 5, windowMs: 0 },
    { limit: 5, windowMs: -1 },
    { limit: 5, windowMs: Infinity },
    { limit: '5', windowMs: 1000 },
  ]) {
    it(`rejects ${JSON.stringify(bad)}`, () => {
      expect(() => parseRule(bad as never)).to.throw(ThrottleConfigError, /Expected rule/);
    });
  }

  it('rejects an empty list and non-rules', () => {
    expect(() => parseRules([])).to.throw(ThrottleConfigError, /at least one rule/);
    expect(() => parseRule(null as never)).to.throw(ThrottleConfigError, /got null/);
    expect(() => parseRule(42 as never)).to.throw(ThrottleConfigError, /got 42/);
  });

  it('formats rules back to shorthand', () => {
    expect(['30/min', '5/s', '10000/day', '30/90s', '20/500ms', '1/2h'].map((text) => formatRule(parseRule(text as RuleString)))).to.deep.equal([
      '30/min',
      '5/s',
      '10000/day',
      '30/90s',
      '20/500ms',
      '1/2h',
    ]);
    expect(formatRule(parseRule({ concurrent: 4 }))).to.equal('4 concurrent');
  });
});
