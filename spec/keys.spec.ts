import { expect } from 'chai';
import fc from 'fast-check';
import { ThrottleConfigError } from '../lib/errors.js';
import { encodeKey, keyNames, normalizeKey } from '../lib/keys.js';

describe('keys', () => {
  it('gives two different ids two different encodings (any string, any length)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 300 }), fc.string({ unit: 'binary', maxLength: 300 }), (a, b) => {
        fc.pre(a !== b);
        expect(encodeKey(a)).to.not.equal(encodeKey(b));
      }),
      { numRuns: 2_000 },
    );
  });

  it('keeps the hash tag and the namespace whatever the id holds', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 400 }), (id) => {
        const encoded = encodeKey(id);
        expect(encoded).to.not.match(/[{}\s]/);
        const { log, meta } = keyNames('vt', 'acme', encoded);
        expect(log.startsWith('vt:acme:{')).to.equal(true);
        const tag = (key: string) => key.slice(key.indexOf('{') + 1, key.indexOf('}'));
        expect(tag(log)).to.equal(encoded);
        expect(tag(meta)).to.equal(encoded);
      }),
    );
  });

  it("with hashTag 'name', puts every id under the throttle's name as hash tag, the encoded id after it", () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 400 }), (id) => {
        const encoded = encodeKey(id);
        const { log, meta } = keyNames('vt', 'acme', encoded, 'name');
        expect(log).to.equal(`vt:acme:{acme}:${encoded}:log`);
        expect(meta).to.equal(`vt:acme:{acme}:${encoded}:meta`);
        // As vt_user_key (lua/includes/log.lua) reads the id back for a wake message.
        expect(/\}:([^{}]*):log$/.exec(log)?.[1]).to.equal(encoded);
        expect(/\{([^{}]*)\}:log$/.exec(log)).to.equal(null);
      }),
    );
  });

  it('tells apart the ids that usually collide', () => {
    const ids = ['', ' ', '{', '}', '{}', 'a:b', 'a%3Ab', '*', '\n', '\uD800', '\uFFFD', 'é', 'e\u0301', 'x'.repeat(10_000), `${'x'.repeat(10_000)}y`];
    expect(new Set(ids.map(encodeKey)).size).to.equal(ids.length);
  });

  it('bounds the size of huge ids', () => {
    expect(encodeKey('k'.repeat(10_000)).length).to.be.below(60);
  });

  it('accepts strings and finite numbers, and nothing else', () => {
    expect(normalizeKey(42)).to.equal('42');
    expect(normalizeKey('42')).to.equal('42');
    for (const bad of [NaN, Infinity, null, undefined, {}, [], Symbol('x'), 10n, true]) {
      expect(() => normalizeKey(bad), String(typeof bad)).to.throw(ThrottleConfigError, /Expected key to be a string or a finite number/);
    }
  });
});
