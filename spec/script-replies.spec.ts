/**
 * The scripts' replies read as their headers say they answer (lib/stores/redis-scripts.ts,
 * `replies`): a reply of another shape fails as StoreUnavailableError naming the script; so does lua/batch.lua's (lib/stores/redis-batch.ts).
 */
import { expect } from 'chai';
import { StoreUnavailableError } from '../lib/errors.js';
import { encodeBatch } from '../lib/stores/redis-batch.js';
import { replies } from '../lib/stores/redis-scripts.js';

describe('script replies', () => {
  it('reads each reply of the expected shape', () => {
    expect(replies.inspect([1, 2, 3, 0, 1, 0, 4, 5, 10, 0], 1)).to.deep.equal({
      now: 1,
      nextFreeInMs: 2,
      pausedForMs: 3,
      bookedAhead: 0,
      stored: true,
      rules: [{ used: 4, resetInMs: 5, limit: 10 }],
      learned: [],
    });
    expect(replies.inspect([1, 2, 3, 0, 1, 1, 4, 5, 6, 4, 5, 3, 2, 6, 1000, 900, 'p', 3, 5000, 800, 'x'], 1)).to.deep.equal({
      now: 1,
      nextFreeInMs: 2,
      pausedForMs: 3,
      bookedAhead: 0,
      stored: true,
      rules: [
        { used: 4, resetInMs: 5, limit: 6 },
        { used: 4, resetInMs: 5, limit: 3 },
      ],
      learned: [
        { limit: 6, windowMs: 1000, lapsesInMs: 900, source: 'policy' },
        { limit: 3, windowMs: 5000, lapsesInMs: 800, source: 'limit' },
      ],
    });
    expect(replies.learn([1, 0, 2, 6, 1000, 900, 'p'])).to.deep.equal({
      changed: true,
      pausedUntil: 0,
      held: 2,
      learned: [{ limit: 6, windowMs: 1000, lapsesInMs: 900, source: 'policy' }],
    });
    expect(replies.pause(1_700)).to.equal(1_700);
    expect(replies.epochFirst(['a@b:12', 1])).to.deep.equal({ value: 'a@b:12', provisional: true });
    expect(replies.epochExtend(null)).to.equal(null);
    expect(replies.aliveStamp(15, false)).to.deep.equal({ at: 15, stamps: [] });
    expect(replies.aliveStamp([15, 20, '.t', '1:2:3'], true)).to.deep.equal({ at: 15, stamps: [20, '.t', '1:2:3'] });
  });

  it('fails a reply of another shape with StoreUnavailableError naming the script', () => {
    const cases: Array<[() => unknown, RegExp]> = [
      [() => replies.pause('OK'), /lua\/pause\.lua: "OK"/],
      [() => replies.inspect([1, 2, 3, 0, 1, 0, '4', 5, 10, 0], 1), /lua\/inspect\.lua/],
      [() => replies.inspect([1, 2, 3, 0, 1], 1), /lua\/inspect\.lua: \[1,2,3,0,1\]/],
      [() => replies.inspect([1, 2, 3, 0, 1, 0, 4, 5, 10, 1, 6], 1), /lua\/inspect\.lua/],
      [() => replies.learn([1, 0]), /lua\/learn\.lua: \[1,0\]/],
      [() => replies.learn([1, 0, 0, 6, 1000, 900]), /lua\/learn\.lua/],
      [() => replies.inspect(7, 1), /lua\/inspect\.lua: 7/],
      [() => replies.pause(10n), /lua\/pause\.lua: \[object BigInt\]/],
      [() => replies.epochFirst(['a@b:12']), /lua\/epoch\.lua/],
      [() => replies.epochFirst(['a@b:12', 2]), /lua\/epoch\.lua/],
      [() => replies.epochLost(null), /lua\/epoch\.lua: null/],
      [() => replies.aliveStamp([], true), /lua\/alive\.lua/],
      [() => replies.reap(undefined), /lua\/reap\.lua: undefined/],
      [() => encodeBatch([]).deliver([1, 7, 'x']), /lua\/batch\.lua: \[1,7,"x"\]/],
    ];
    for (const [read, message] of cases) expect(read).to.throw(StoreUnavailableError, message);
  });
});
