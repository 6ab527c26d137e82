import { expect } from 'chai';
import fc from 'fast-check';
import { MAX_DRIFT, StoreClock } from '../lib/time.js';

describe('StoreClock: where the store clock stands, from round trips', () => {
  it('keeps the tightest bounds: the quickest round trip places slots and releases', () => {
    const clock = new StoreClock();
    // Store clock = local + 1,000,000 exactly. A slow answer (40 ms), then a quick one (2 ms).
    clock.sample(100, 140, 1_000_120);
    expect(clock.storeTime(140)).to.be.closeTo(1_000_160 + MAX_DRIFT * 40, 1e-9); // 1,000,120 − 100 + 140, aged 40 ms
    clock.sample(200, 202, 1_000_201);
    // Upper bound from the quick answer: the release is read 1 ms late instead of 20.
    expect(clock.storeTime(202)).to.be.closeTo(1_000_203 + MAX_DRIFT * 2, 1e-9);
    // Lower bound: the reading may be rounded up by 1 ms, so the slot is reached 2 ms late at most.
    expect(clock.localTime(1_000_300)).to.be.closeTo(302 + MAX_DRIFT * 100, 0.001); // aged 100 ms
  });

  it('widens an old bound by the drift two clocks may have, never narrows it', () => {
    const clock = new StoreClock();
    clock.sample(0, 1, 1_000_001);
    const later = 60_000;
    expect(clock.storeTime(later)).to.be.closeTo(later + 1_000_001 + MAX_DRIFT * later, 1e-6);
    // A slot a minute ahead is reached later by the same allowance.
    expect(clock.localTime(1_000_000 + later)).to.be.above(later + 1);
    // A fresh sample with a slower round trip replaces the widened bound only where it is tighter.
    clock.sample(later, later + 30, 1_000_000 + later + 15);
    expect(clock.storeTime(later + 30)).to.be.closeTo(later + 30 + 1_000_015 + MAX_DRIFT * 30, 1e-6);
  });

  it('takes a sample that contradicts the bounds kept (the store clock stepped, a failover) instead of them', () => {
    const clock = new StoreClock();
    clock.sample(0, 2, 1_000_001);
    // The store's clock stepped 500 ms ahead: the old upper bound would place releases 500 ms early.
    clock.sample(100, 102, 1_000_601);
    expect(clock.storeTime(102)).to.be.at.least(1_000_601);
    expect(clock.localTime(1_000_700)).to.be.closeTo(202 + MAX_DRIFT * 100, 0.001); // from the new lower bound, aged 100 ms
  });

  it('tells nothing before a round trip, and the earliest the store can read from the quickest one', () => {
    const clock = new StoreClock();
    expect(clock.sampled).to.equal(false);
    // Store clock = local + 1,000,000 exactly; read at 101.5, answered rounded up.
    clock.sample(100, 103, 1_000_102);
    expect(clock.sampled).to.equal(true);
    // At the answer the store read at least 1,000,102 − 1 (rounded up by up to 1 ms); later, less the drift.
    expect(clock.earliestStoreTime(103)).to.equal(1_000_101);
    expect(clock.earliestStoreTime(1_103)).to.be.closeTo(1_001_101 - MAX_DRIFT * 1_000, 1e-6);
  });

  it('never places a start before the store reaches it, nor a release before the store clock, whatever the round trips', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: -1_000_000, max: 1_000_000 }),
        fc.array(fc.record({ gap: fc.nat(5_000), to: fc.nat(50), back: fc.nat(50), frac: fc.double({ min: 0, max: 1, noNaN: true }) }), {
          minLength: 1,
          maxLength: 20,
        }),
        fc.nat(100_000),
        (offset, trips, ahead) => {
          const clock = new StoreClock();
          let local = 0;
          for (const { gap, to, back, frac } of trips) {
            local += gap;
            const sent = local;
            const received = local + to + back;
            // The store read its clock somewhere in the round trip and answered it rounded up.
            const reading = sent + frac * (to + back) + offset;
            clock.sample(sent, received, Math.ceil(reading));
            local = received;
          }
          // Same rate: a start is never before its store time, a release never before the store clock.
          const slot = local + offset + ahead;
          expect(clock.localTime(slot) + offset).to.be.at.least(slot - 1e-6);
          expect(clock.storeTime(local + ahead)).to.be.at.least(local + ahead + offset - 1e-6);
          // The journal's clock: never ahead of the store's (it prunes nothing that may still count).
          expect(clock.earliestStoreTime(local + ahead)).to.be.at.most(local + ahead + offset + 1e-6);
        },
      ),
    );
  });
});
