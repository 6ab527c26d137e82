import { expect } from 'chai';
import { clock, maxInWindow, maxOverlap, startVendor, vendorDrops, windowViolations } from '../scripts/sim-vendor.js';

describe('simulated vendor', () => {
  describe('windowViolations', () => {
    it('counts nothing for no arrivals or arrivals within the limit', () => {
      expect(windowViolations([], 1, 100)).to.equal(0);
      expect(windowViolations([0, 1, 2], 3, 100)).to.equal(0);
    });

    it('counts each arrival that has more than the limit in its trailing window', () => {
      expect(windowViolations([0, 1, 2, 3, 4], 3, 100)).to.equal(2);
      expect(windowViolations([0, 0, 0, 0], 1, 100)).to.equal(3);
    });

    it('uses half-open windows (a − T, a]: an arrival exactly T later is fine, a hair earlier is not', () => {
      expect(windowViolations([0, 100, 200], 1, 100)).to.equal(0);
      expect(windowViolations([0, 99.999], 1, 100)).to.equal(1);
    });

    it('slides: at most the limit in every window, whatever the alignment', () => {
      // 2 per 100 ms: 0, 50, 100, 150, … never has 3 in (a − 100, a]; in 0, 50, 99, 150 the window (−1, 99] holds 3.
      expect(windowViolations([0, 50, 100, 150, 200, 250], 2, 100)).to.equal(0);
      expect(windowViolations([0, 50, 99, 150], 2, 100)).to.equal(1);
    });

    it('does not need sorted input and does not change it', () => {
      const arrivals = [300, 0, 200, 100, 50];
      // Sorted: 0, 50, 100, 200, 300; 50 shares (−50, 50] with 0, and 100 shares (0, 100] with 50.
      expect(windowViolations(arrivals, 1, 100)).to.equal(2);
      expect(arrivals).to.deep.equal([300, 0, 200, 100, 50]);
    });
  });

  describe('vendorDrops and maxInWindow', () => {
    it('drops what exceeds the limit, and dropped calls do not count against later ones', () => {
      // limit 1 per 100: 0 performed, 60 dropped, 110 performed (60 was never performed), 150 dropped.
      expect(vendorDrops([0, 60, 110, 150], 1, 100)).to.equal(2);
      // windowViolations counts every arrival: 110 has 60 and itself in (10, 110].
      expect(windowViolations([0, 60, 110, 150], 1, 100)).to.equal(3);
      expect(maxInWindow([0, 60, 110, 150], 100)).to.equal(3); // (50, 150]
      expect(maxInWindow([], 100)).to.equal(0);
    });
  });

  describe('maxOverlap (calls in service at once)', () => {
    it('counts the most spans open at one moment; one that ends as another starts does not overlap it', () => {
      expect(maxOverlap([])).to.equal(0);
      expect(maxOverlap([[0, 10]])).to.equal(1);
      expect(
        maxOverlap([
          [0, 10],
          [10, 20],
          [20, 30],
        ]),
      ).to.equal(1);
      expect(
        maxOverlap([
          [0, 10],
          [5, 20],
          [9, 12],
          [11, 30],
        ]),
      ).to.equal(3);
      expect(
        maxOverlap([
          [20, 30],
          [0, 25],
          [24, 26],
        ]),
      ).to.equal(3);
    });
  });

  describe('startVendor', () => {
    it('answers 200 to everything, records arrivals between each call start and response, and drops silently', async () => {
      const vendor = await startVendor({ limit: 2, windowMs: 10_000, latencyMs: { min: 5, max: 30 } });
      try {
        const calls = await Promise.all(
          Array.from({ length: 5 }, async (_, i) => {
            const start = clock();
            const response = await fetch(`${vendor.url}?user=alice`, { headers: { 'x-call': String(i) } });
            const body = (await response.json()) as { ok: boolean; user: string };
            const end = clock();
            return { status: response.status, body, start, end };
          }),
        );
        const bob = await fetch(vendor.url, { headers: { 'x-user': 'bob' } });
        await bob.text();
        const health = await fetch(new URL('/healthz', vendor.url));
        await health.text();

        expect(calls.map((call) => call.status)).to.deep.equal([200, 200, 200, 200, 200]);
        expect(calls.every((call) => call.body.ok && call.body.user === 'alice')).to.equal(true);
        expect(health.status).to.equal(200);
        const stats = vendor.stats();
        expect(stats.received).to.equal(6);
        expect(stats.accepted).to.equal(3);
        expect(stats.dropped).to.equal(3);
        expect(stats.droppedPerUser).to.deep.equal(new Map([['alice', 3]]));
        expect([...stats.perUser.keys()].sort()).to.deep.equal(['alice', 'bob']);
        const arrivals = stats.perUser.get('alice')!;
        expect(arrivals).to.have.length(5);
        expect([...arrivals].sort((a, b) => a - b)).to.deep.equal(arrivals);
        const firstStart = Math.min(...calls.map((call) => call.start));
        const lastEnd = Math.max(...calls.map((call) => call.end));
        for (const arrival of arrivals) expect(arrival).to.be.within(firstStart, lastEnd);
        expect(vendor.maxInWindow('alice')).to.equal(5);
        expect(vendor.maxInWindow()).to.equal(5);
        expect(vendor.violations('alice')).to.equal(3);
        expect(vendor.violations('bob')).to.equal(0);
      } finally {
        await vendor.close();
      }
    });

    it('places every arrival between the call start and its response, one user per call', async () => {
      const vendor = await startVendor({ limit: 100, windowMs: 1000, latencyMs: { min: 0, max: 40 } });
      try {
        const calls = await Promise.all(
          Array.from({ length: 30 }, async (_, i) => {
            const start = clock();
            await (await fetch(`${vendor.url}?user=u${i}`)).text();
            return { user: `u${i}`, start, end: clock() };
          }),
        );
        const { perUser } = vendor.stats();
        for (const { user, start, end } of calls) expect(perUser.get(user)![0]).to.be.within(start, end);
      } finally {
        await vendor.close();
      }
    });

    it('closes at once, even with responses still pending', async () => {
      const vendor = await startVendor({ limit: 1, windowMs: 1000, latencyMs: { min: 5_000, max: 5_000 } });
      const pending = fetch(`${vendor.url}?user=slow`).then(
        () => 'answered',
        () => 'failed',
      );
      while (vendor.stats().received === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      const started = performance.now();
      await vendor.close();
      expect(await pending).to.equal('failed');
      expect(performance.now() - started).to.be.below(1000);
    });

    it('rejects bad options', async () => {
      let error: unknown;
      try {
        await startVendor({ limit: 0, windowMs: 1000 });
      } catch (caught) {
        error = caught;
      }
      expect(error).to.be.instanceOf(TypeError);
    });
  });
});
