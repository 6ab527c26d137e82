/**
 * Limits a key learns from what its vendor publishes (`Throttle.learn`): shared at once with every
 * process on the store, only ever lower than the configured rules, counted with the calls already
 * made, forgotten when the vendor says the configured limit again or `reset()`; values that cannot
 * apply are said in `debug` events and change nothing.
 */
import { expect } from 'chai';
import { MemoryStore, RateLimitedError, Throttle, type ThrottleOptions } from '../lib/index.js';
import { lessonsOf } from '../lib/learning.js';
import { readPublishedLimits } from '../lib/vendor-signals.js';
import { encodeKey, keyNames } from '../lib/keys.js';
import { redisClient, redisServer, redisStore, uniquePrefix } from './support/hooks.js';
import { spawnWorkers } from './support/worker.js';
import { STORE_PAIRS } from './support/throttles.js';
import { startHttpVendor, type Respond, type Vendor } from './support/http-vendor.js';

const stores = STORE_PAIRS;

const policy = (text: string) => ({ status: 200, headers: { 'ratelimit-policy': text } });

/** Starts calls of `key` in `throw` mode until one is refused: how many started. */
async function startsUntilRefused(throttle: Throttle, key: string): Promise<number> {
  for (let started = 0; ; started++) {
    try {
      await throttle.schedule(key, async () => undefined);
    } catch (error) {
      expect(error).to.be.instanceOf(RateLimitedError);
      return started;
    }
  }
}

for (const [name, make] of stores) {
  describe(`learning the vendor's limits: ${name}`, () => {
    const throttles: Throttle[] = [];
    afterEach(async () => {
      await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
    });
    function pair(options: Partial<ThrottleOptions> = {}): { a: Throttle; b: Throttle } {
      const { one, other } = make();
      const a = new Throttle({ name: 'acme', rules: ['10/s'], mode: 'throw', store: one, ...options });
      const b = new Throttle({ name: 'acme', rules: ['10/s'], mode: 'throw', store: other, ...options });
      throttles.push(a, b);
      return { a, b };
    }

    it('lowers a rule to the published policy in every process, counting the calls already made', async () => {
      const { a, b } = pair();
      const learned: unknown[] = [];
      a.on('learned', (event) => learned.push(event));
      for (let i = 0; i < 4; i++) await a.schedule('u1', async () => undefined);
      await a.learn('u1', policy('"burst";q=6;w=1'));
      expect(learned).to.have.length(1);
      expect(learned[0]).to.deep.nested.include({ key: 'u1', 'learned[0].limit': 6, 'learned[0].windowMs': 1_000, 'learned[0].source': 'policy' });
      // The other process counts the four calls made: two more fit, not six.
      expect(await startsUntilRefused(b, 'u1')).to.equal(2);
      const usage = await b.inspect('u1');
      expect(usage.rules[0]).to.deep.include({ limit: 6, windowMs: 1_000, used: 6 });
      expect(usage.learned).to.have.length(1);
      expect(usage.learned[0]!.lapsesInMs).to.be.within(899_000, 900_000);
      // Another key learned nothing.
      expect(await startsUntilRefused(b, 'u2')).to.equal(10);
      // Said again: nothing changes, no event.
      await a.learn('u1', policy('"burst";q=6;w=1'));
      expect(learned).to.have.length(1);
    });

    it('never learns above the configured rule, and forgets when the vendor says its limit again', async () => {
      const { a, b } = pair();
      const learned: Array<{ learned: readonly unknown[] }> = [];
      b.on('learned', (event) => learned.push(event));
      await b.learn('u1', policy('"default";q=50;w=1'));
      expect((await a.inspect('u1')).learned).to.deep.equal([]);
      expect(learned).to.deep.equal([]);
      await a.learn('u1', { status: 200, headers: { 'x-ratelimit-limit': '3' } });
      expect((await b.inspect('u1')).rules[0]!.limit).to.equal(3);
      // The vendor raised it back: the next response says so, in any process.
      await b.learn('u1', { status: 200, headers: { 'x-ratelimit-limit': '10', 'x-ratelimit-remaining': '9' } });
      expect(learned).to.have.length(1);
      expect(learned[0]!.learned).to.deep.equal([]);
      expect((await a.inspect('u1')).rules[0]!.limit).to.equal(10);
      expect(await startsUntilRefused(a, 'u1')).to.equal(10);
    });

    it('with learnAboveRules, paces at a published limit above the rule in every process, and a refusal lowers from there', async () => {
      const { a, b } = pair({ learnAboveRules: true });
      await a.learn('u1', policy('"burst";q=14;w=1'));
      expect((await b.inspect('u1')).rules[0]).to.deep.include({ limit: 14 });
      expect(await startsUntilRefused(b, 'u1')).to.equal(14);
      // Not X-RateLimit-Limit, which names no window: the rule's is only a guess.
      await b.learn('u2', { status: 200, headers: { 'x-ratelimit-limit': '12' } });
      expect(await startsUntilRefused(a, 'u2')).to.equal(10);
      // A refusal teaches below what is in force (14 taken, the first refusal: 13), still above the rule.
      await a.learn('u1', { status: 429, headers: { 'retry-after': '1' } });
      const usage = await b.inspect('u1');
      expect(usage.learned.map(({ limit, source }) => ({ limit, source }))).to.deep.equal([{ limit: 13, source: 'refusals' }]);
      expect(usage.rules[0]).to.deep.include({ limit: 13 });
    });

    it('from refusals, slows a key down to learnedFloor and no further', async () => {
      const { a, b } = pair({ learnedFloor: 4 });
      for (let i = 0; i < 12; i++) await a.learn('u1', { status: 429, headers: {} });
      expect((await b.inspect('u1')).rules[0]).to.deep.include({ limit: 4 });
      expect(await startsUntilRefused(b, 'u1')).to.equal(4);
    });

    it('takes a policy of another window as a rule of its own, within the history kept, and reset() forgets it', async () => {
      const { a, b } = pair({ retainMs: 60_000 });
      await a.learn('u1', policy('"hour";q=5000;w=3600, "minute";q=4;w=60'));
      const usage = await b.inspect('u1');
      expect(usage.rules.map(({ limit, windowMs }) => ({ limit, windowMs }))).to.deep.equal([
        { limit: 10, windowMs: 1_000 },
        { limit: 4, windowMs: 60_000 },
      ]);
      expect(await startsUntilRefused(b, 'u1')).to.equal(4);
      try {
        await b.schedule('u1', async () => undefined);
        expect.fail('Expected the call to be refused');
      } catch (error) {
        expect(error).to.be.instanceOf(RateLimitedError).and.include({ reason: 'learned' });
        expect((error as RateLimitedError).retryAfterMs).to.be.above(59_000);
      }
      await a.reset('u1');
      expect((await b.inspect('u1')).learned).to.deep.equal([]);
      // (b trusts the refusal it just had for a second: a, which reset the key, asks.)
      expect(await startsUntilRefused(a, 'u1')).to.equal(10);
    });

    it('says why in a debug event when a value cannot apply, and learns nothing from it', async () => {
      const { a } = pair();
      const debug: string[] = [];
      a.on('debug', (event) => debug.push(event.message));
      const hostile = [
        '"a";q=0;w=1',
        '"b";q=6;w=0',
        '"c";q=1000000000000;w=1',
        '"d";q=6;w=1;qu="content-bytes"',
        '"e";q=6',
        '"f";q=six;w=1',
        '"g";q=2.5;w=1',
        '"h";q=6;w=86400',
      ];
      for (const text of hostile) await a.learn('u1', policy(text));
      await a.learn('u1', { status: 200, headers: { 'x-ratelimit-limit': '0' } });
      await a.learn('u1', { status: 200, headers: { 'x-ratelimit-limit': '-5' } });
      await a.learn('u1', { status: 200, headers: { 'x-ratelimit-limit': '1e12' } });
      expect((await a.inspect('u1')).learned).to.deep.equal([]);
      expect(debug.join('\n')).to.match(/q is not a whole number from 1 up/);
      expect(debug.join('\n')).to.match(/w is not between 1 ms and 366 days/);
      expect(debug.join('\n')).to.match(/q above 1000000000/);
      expect(debug.join('\n')).to.match(/counted in "content-bytes", not requests/);
      expect(debug.join('\n')).to.match(/without both q and w/);
      expect(debug.join('\n')).to.match(/longer than the history this throttle keeps \(retainMs 1000\); set retainMs to 86400000/);
      expect(debug.join('\n')).to.match(/X-RateLimit-Limit value "0"/);
      expect(debug.join('\n')).to.match(/X-RateLimit-Limit value "-5"/);
      expect(debug.every((message) => message.startsWith('learn(): '))).to.equal(true);
      expect(await startsUntilRefused(a, 'u1')).to.equal(10);
    });

    it('learns from a refusal while the vendor publishes the configured limit (other calls count on the account), not while it publishes a lower one', async () => {
      const { a, b } = pair();
      for (let i = 0; i < 6; i++) await a.schedule('u1', async () => undefined);
      await a.learn('u1', { status: 429, headers: { 'x-ratelimit-limit': '10', 'x-ratelimit-remaining': '0', 'retry-after': '1' } });
      expect((await b.inspect('u1')).learned.map(({ limit, source }) => ({ limit, source }))).to.deep.equal([{ limit: 5, source: 'refusals' }]);
      // A published limit below the rule says more than a refusal: it is what is learned.
      await b.learn('u2', { status: 429, headers: { 'ratelimit-policy': '"d";q=4;w=1', 'retry-after': '1' } });
      expect((await a.inspect('u2')).learned.map(({ limit, source }) => ({ limit, source }))).to.deep.equal([{ limit: 4, source: 'policy' }]);
    });

    it('rejects a response that is not one, with a ThrottleConfigError, and learns nothing', async () => {
      const { a } = pair();
      const responses = [
        null,
        42,
        { status: 200 },
        { status: 200, headers: 'x' },
        { status: '429', headers: { 'retry-after': '1' } },
        { status: 42, headers: {} },
        { status: 429.5, headers: {} },
        { status: 429, headers: {}, flagged: 'yes' },
      ];
      for (const response of responses) {
        let caught: unknown;
        await a.learn('u1', response as never).catch((error: unknown) => (caught = error));
        expect(caught, JSON.stringify(response)).to.have.property('name', 'ThrottleConfigError');
      }
      expect((await a.inspect('u1')).learned).to.deep.equal([]);
    });
  });
}

describe('what a response teaches (lessonsOf)', () => {
  const rules = [
    { limit: 100, windowMs: 60_000 },
    { limit: 1_000, windowMs: 86_400_000 },
  ];
  const lessons = (headers: Record<string, string>) => lessonsOf(readPublishedLimits(headers), rules, 86_400_000, { lapseMs: 5_000 });

  it('applies X-RateLimit-Limit to a key of one rule, reads 100;w=60 as a policy, and says why it cannot choose among several rules', () => {
    const one = [{ limit: 100, windowMs: 60_000 }];
    expect(lessonsOf(readPublishedLimits({ 'x-ratelimit-limit': '60', 'x-ratelimit-reset': '30' }), one, 60_000, { lapseMs: 5_000 })).to.deep.equal([
      { source: 'limit', windowMs: 60_000, limit: 60, lapseMs: 5_000, configured: 100 },
    ]);
    // At or above the rule: what it taught before is forgotten (limit 0).
    expect(lessonsOf(readPublishedLimits({ 'x-ratelimit-limit': '100' }), one, 60_000, { lapseMs: 5_000 })).to.deep.equal([
      { source: 'limit', windowMs: 60_000, limit: 0, lapseMs: 5_000, configured: 100 },
    ]);
    const said: string[] = [];
    expect(
      lessonsOf(readPublishedLimits({ 'x-ratelimit-limit': '60', 'x-ratelimit-reset': '30' }), rules, 86_400_000, { lapseMs: 5_000 }, (m) => said.push(m)),
    ).to.deep.equal([]);
    expect(said.join('\n')).to.match(/ignored X-RateLimit-Limit 60: it names no window, and the key has 2 rules/);
    expect(lessons({ 'ratelimit-limit': '100, 60;w=60, 500;w=86400' })).to.deep.equal([
      { source: 'policy', windowMs: 60_000, limit: 60, lapseMs: 5_000, configured: 100 },
      { source: 'policy', windowMs: 86_400_000, limit: 500, lapseMs: 5_000, configured: 1_000 },
    ]);
  });

  it('with aboveRules, teaches a policy above the rule of its window (never X-RateLimit-Limit, which names no window), and its remaining counts against it', () => {
    const one = [{ limit: 10, windowMs: 60_000 }];
    const taught = (headers: Record<string, string>) => lessonsOf(readPublishedLimits(headers), one, 60_000, { lapseMs: 5_000, aboveRules: true });
    expect(taught({ 'ratelimit-policy': '"m";q=50;w=60' })).to.deep.equal([
      { source: 'policy', windowMs: 60_000, limit: 50, lapseMs: 5_000, configured: 10, aboveRules: true },
    ]);
    // The rule's own limit forgets what was learned above it, in the same case.
    expect(taught({ 'ratelimit-policy': '"m";q=10;w=60' })).to.deep.equal([
      { source: 'policy', windowMs: 60_000, limit: 0, lapseMs: 5_000, configured: 10, aboveRules: true },
    ]);
    expect(taught({ 'x-ratelimit-limit': '5000' })).to.deep.equal([{ source: 'limit', windowMs: 60_000, limit: 0, lapseMs: 5_000, configured: 10 }]);
    expect(taught({ 'ratelimit-limit': '50;w=60' })).to.deep.equal([
      { source: 'policy', windowMs: 60_000, limit: 50, lapseMs: 5_000, configured: 10, aboveRules: true },
    ]);
    // 20 remaining is below half of 50 (not of the rule's 10): a hold on the window's 50.
    expect(taught({ 'ratelimit-policy': '"m";q=50;w=60', ratelimit: '"m";r=20;t=30' }).filter((entry) => entry.mode === 'hold')).to.deep.equal([
      { mode: 'hold', source: 'policy', windowMs: 60_000, limit: 50, remaining: 20, lapseMs: 30_000 },
    ]);
  });

  it('keeps the tightest of several policies of one window', () => {
    const tightest = [{ source: 'policy', windowMs: 60_000, limit: 60, lapseMs: 5_000, configured: 100 }];
    expect(lessons({ 'ratelimit-policy': '"a";q=60;w=60, "b";q=500;w=60' })).to.deep.equal(tightest);
    expect(lessons({ 'ratelimit-policy': '"b";q=500;w=60, "a";q=60;w=60' })).to.deep.equal(tightest);
  });

  it('lets a policy of the same window win over X-RateLimit-Limit, and skips a window the rules already keep to', () => {
    const one = [{ limit: 100, windowMs: 60_000 }];
    expect(lessonsOf(readPublishedLimits({ 'ratelimit-policy': '"m";q=50;w=60', 'x-ratelimit-limit': '40' }), one, 60_000, { lapseMs: 5_000 })).to.deep.equal([
      { source: 'policy', windowMs: 60_000, limit: 50, lapseMs: 5_000, configured: 100 },
    ]);
    // 100 a minute never makes more than 6,000 an hour: a policy of 10,000 an hour teaches nothing new.
    expect(lessons({ 'ratelimit-policy': '"h";q=10000;w=3600' })).to.deep.equal([
      { source: 'policy', windowMs: 3_600_000, limit: 0, lapseMs: 5_000, configured: 0 },
    ]);
    expect(lessons({ 'ratelimit-policy': '"h";q=3000;w=3600' })).to.deep.equal([
      { source: 'policy', windowMs: 3_600_000, limit: 3_000, lapseMs: 5_000, configured: 0 },
    ]);
  });
});

describe('learning through the adapters (a loud vendor)', function () {
  this.timeout(20_000);
  let vendor: Vendor | undefined;
  const throttles: Throttle[] = [];
  afterEach(async () => {
    await Promise.all(throttles.splice(0).map((throttle) => throttle.close()));
    await vendor?.close();
    vendor = undefined;
  });

  /** 3 requests per second per user, counted where they arrive; above it 429 with Retry-After: 1; RateLimit-Policy on every answer unless `silent`. */
  function loudVendor(silent = false, limit = 3): Respond {
    const accepted: number[] = [];
    return (arrival) => {
      const recent = accepted.filter((at) => at > arrival.at - 1_000);
      const headers: Record<string, string> = silent ? {} : { 'ratelimit-policy': `"default";q=${limit};w=1` };
      if (recent.length >= limit) return { status: 429, headers: { ...headers, 'retry-after': '1' } };
      accepted.push(arrival.at);
      return { status: 200, headers };
    };
  }

  async function run(learn: boolean, silent = false, calls = 6, limits = { ours: 5, vendor: 3 }): Promise<{ refused: number; ok: number }> {
    await vendor?.close();
    vendor = await startHttpVendor(loudVendor(silent, limits.vendor));
    const prefix = uniquePrefix();
    const statuses: number[] = [];
    const pending: Array<Promise<void>> = [];
    for (let p = 0; p < 2; p++) {
      const throttle = new Throttle({ name: 'acme', rules: [{ limit: limits.ours, windowMs: 1_000 }], store: redisStore(redisClient(), { prefix }) });
      throttles.push(throttle);
      const fetchAcme = throttle.fetch({ key: () => 'u1', learn, retries: 3 });
      for (let i = 0; i < calls; i++) pending.push(fetchAcme(`${vendor.url}/?user=u1`).then((response) => void statuses.push(response.status)));
    }
    await Promise.all(pending);
    return { refused: vendor.arrivals.length - statuses.length, ok: statuses.filter((status) => status === 200).length };
  }

  it('refuses nothing after the first answers: only the first burst, sent before any answer, goes over', async () => {
    const learning = await run(true);
    expect(learning.ok).to.equal(12);
    // The first burst: 5 sent at once (the configured 5/s, over both processes) before any answer, 3 fit.
    expect(learning.refused).to.be.at.most(2);
  });

  it('with learn: false, keeps being refused every window', async () => {
    const off = await run(false);
    expect(off.ok).to.equal(12);
    // 2 of every 5 sent at the configured rate, window after window.
    expect(off.refused).to.be.at.least(4);
  });

  it('from 429s alone: lowers the pace on each refusal, and is refused less than without learning', async () => {
    const limits = { ours: 16, vendor: 10 };
    const learning = await run(true, true, 15, limits);
    const off = await run(false, true, 15, limits);
    expect(learning.ok).to.equal(30);
    expect(off.ok).to.equal(30);
    // The first burst (16 where 10 fit) is refused 6 times either way; then learning probes up a
    // tenth a window at most (one refusal each), where a throttle that does not learn goes over every window.
    expect(learning.refused).to.be.below(off.refused);
    expect(learning.refused).to.be.at.most(6 + 3);
  });
});

describe('learning across processes (real processes, RedisStore)', function () {
  this.timeout(40_000);

  it('what one process learned from the vendor paces a process started after it: refused nothing', async () => {
    const accepted: number[] = [];
    // 3 a second per user, RateLimit-Policy on every answer, 429 above it.
    const vendor = await startHttpVendor((arrival) => {
      const headers = { 'ratelimit-policy': '"default";q=3;w=1' };
      if (arrival.path.startsWith('/healthz')) return { status: 200, headers };
      if (accepted.filter((at) => at > arrival.at - 1_000).length >= 3) return { status: 429, headers: { ...headers, 'retry-after': '1' } };
      accepted.push(arrival.at);
      return { status: 200, headers };
    });
    try {
      const config = { redisUrl: redisServer().url, vendorUrl: vendor.url, rules: '5/s' as const, keys: ['u1'], calls: 4, prefix: uniquePrefix(), learn: true };
      const [first] = await spawnWorkers([config]);
      const refusedFirst = vendor.arrivals.filter((arrival) => arrival.user === 'u1').length - accepted.length;
      expect(first!.errors.length).to.equal(refusedFirst);
      const [late] = await spawnWorkers([{ ...config, calls: 6 }]);
      expect(late!.errors).to.deep.equal([]);
      expect(vendor.arrivals.filter((arrival) => arrival.user === 'u1').length - accepted.length).to.equal(refusedFirst);
      // The later process's six went at the vendor's 3 a second: the fourth a second after the first.
      const starts = late!.starts.map((at) => at!).sort((a, b) => a - b);
      expect(starts[3]! - starts[0]!).to.be.at.least(999);
    } finally {
      await vendor.close();
    }
  });
});

describe('learning while calls are booked ahead (RedisStore)', function () {
  this.timeout(20_000);

  for (const [what, lower] of [
    ['a lesson that lowers the limit', (throttle: Throttle) => throttle.learn('k', { status: 200, headers: { 'x-ratelimit-limit': '9' } })],
    ['a vendor pause', (throttle: Throttle) => throttle.pause('k', 1_000)],
  ] as const) {
    it(`takes ${what} for no loss of data: the slots it took out were this process's newest, and nothing is held`, async () => {
      const prefix = uniquePrefix();
      const client = redisClient();
      const throttle = new Throttle({ name: 'acme', rules: ['10/s'], store: redisStore(redisClient(), { prefix }) });
      const reasons: unknown[] = [];
      throttle.on('delayed', (event) => reasons.push(event.reason));
      try {
        // 10 start now, 10 are booked a second ahead: the process's newest slot (its witness) is one of those.
        const calls = Array.from({ length: 20 }, () => throttle.schedule('k', async () => undefined));
        await new Promise((resolve) => setTimeout(resolve, 100));
        await lower(throttle);
        await Promise.all(calls);
        // The next call decides on the key with the witness the lesson or the pause took out.
        await throttle.schedule('k', async () => undefined);
        expect(reasons).to.not.include('recovering');
        expect(await client.hget(keyNames(prefix, 'acme', encodeKey('k')).meta, 'h')).to.equal(null);
      } finally {
        await throttle.close();
        client.disconnect();
      }
    });
  }

  it('keeps what a key learned when the throttle that learned it closes (its keys tidied)', async () => {
    const prefix = uniquePrefix();
    const client = redisClient();
    const throttle = new Throttle({ name: 'acme', rules: ['10/s'], store: redisStore(redisClient(), { prefix }) });
    try {
      await throttle.schedule('k', async () => undefined);
      await throttle.learn('k', policy('"d";q=6;w=1'));
    } finally {
      await throttle.close();
    }
    const meta = keyNames(prefix, 'acme', encodeKey('k')).meta;
    expect(await client.hget(meta, 'l')).to.match(/^6:1000:/);
    // It lives until the lesson lapses (15 min), not a window after the last call.
    expect(await client.pttl(meta)).to.be.above(800_000);
    client.disconnect();
  });

  it('keeps a learned limit of another window when a bucketed rule set folds its log', async () => {
    for (const store of [new MemoryStore(), redisStore(redisClient(), { prefix: uniquePrefix() })]) {
      // 1000/h is bucketed (above bucketAbove): its log folds down to the 100 ms rule's window.
      const throttle = new Throttle({ name: 'acme', rules: ['10/100ms', '1000/h'], mode: 'throw', store });
      try {
        await throttle.learn('k', policy('"m";q=60;w=60'));
        // Calls as fast as they are let through: 60 take 0.6 s at 10/100ms; the fold comes at 53. The
        // loop goes on 0.6 s past the 60th (a 61st would start then if the fold had dropped the calls
        // the learned rule counts), however slow the machine is to reach it.
        let started = 0;
        let until = Infinity;
        const giveUp = performance.now() + 10_000;
        while (performance.now() < Math.min(until, giveUp)) {
          if (started === 60 && until === Infinity) until = performance.now() + 600;
          try {
            await throttle.schedule('k', async () => undefined);
            started++;
          } catch (error) {
            if (!(error instanceof RateLimitedError)) throw error;
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
        }
        expect(started).to.equal(60);
      } finally {
        await throttle.close();
      }
    }
  });
});

describe('learning what remains: another client on the same account (RedisStore)', function () {
  this.timeout(20_000);

  it('holds what the vendor counted and this store did not, so the next calls wait instead of being refused', async () => {
    const outcome = async (learn: boolean): Promise<{ refused: number; ok: number }> => {
      // 10 a second at the vendor, 4 of them taken by another client each second.
      const performed: number[] = [];
      let refused = 0;
      const vendor = await startHttpVendor((arrival) => {
        const others = 4;
        const recent = performed.filter((at) => at > arrival.at - 1_000).length + others;
        const reset = String(1);
        if (recent >= 10) {
          refused++;
          return { status: 429, headers: { 'retry-after': '1', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': reset } };
        }
        performed.push(arrival.at);
        return { status: 200, headers: { 'x-ratelimit-remaining': String(10 - recent - 1), 'x-ratelimit-reset': reset } };
      });
      const throttle = new Throttle({ name: 'acme', rules: ['10/s'], store: redisStore(redisClient(), { prefix: uniquePrefix() }) });
      try {
        const fetchAcme = throttle.fetch({ key: () => 'u1', learn, retries: 5 });
        // Three calls first: their answers say what remains.
        const statuses: number[] = [];
        for (let i = 0; i < 3; i++) statuses.push((await fetchAcme(`${vendor.url}/?user=u1`)).status);
        statuses.push(...(await Promise.all(Array.from({ length: 9 }, () => fetchAcme(`${vendor.url}/?user=u1`).then((response) => response.status)))));
        return { refused, ok: statuses.filter((status) => status === 200).length };
      } finally {
        await throttle.close();
        await vendor.close();
      }
    };
    const learning = await outcome(true);
    const off = await outcome(false);
    expect(learning.ok).to.equal(12);
    expect(off.ok).to.equal(12);
    expect(off.refused).to.be.at.least(3);
    expect(learning.refused).to.be.below(off.refused);
  });
});
