import { expect } from 'chai';
import fc from 'fast-check';
import { Command } from 'ioredis';
import { keyNameParts } from '../lib/keys.js';
import { batchKeys } from '../lib/stores/redis-batch.js';
import { evalShaCommand } from '../lib/stores/resp.js';

describe('the batch written as one command', () => {
  it('is byte for byte what ioredis writes for the same EVALSHA (any keys, both hash tags)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.string({ unit: 'grapheme', maxLength: 40 }), { maxLength: 20 }),
        fc.constantFrom('key' as const, 'name' as const),
        fc.uint8Array({ maxLength: 300 }),
        fc.integer({ min: 0, max: 10 ** 9 }),
        (users, hashTag, fields, grace) => {
          const keys = batchKeys(keyNameParts('vt', 'acme', hashTag), users, ['vt:acme:kept', 'vt:acme:mark']);
          const args = ['epoch-1', '.tag', 'vt:acme:free', grace, Buffer.from(fields), '1'];
          const sha = 'f'.repeat(40);
          const list = keys.list();
          expect(list).to.have.length(keys.count);
          const theirs = new Command('EVALSHA', [sha, list.length, ...list, ...args]).toWritable(undefined as never);
          expect(evalShaCommand(sha, keys, args).equals(Buffer.from(theirs))).to.equal(true);
        },
      ),
      { numRuns: 500 },
    );
  });
});
