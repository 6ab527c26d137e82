import { expect } from 'chai';
import { Queue, Worker, type Job, type WorkerOptions } from 'bullmq';
import { Redis } from 'ioredis';
import { fileURLToPath } from 'node:url';
import { RESERVATION, throttleProcessor, type ThrottleProcessorOptions } from '../lib/adapters/bullmq.js';
import { RateLimitedError, ThrottleConfigError } from '../lib/errors.js';
import type { RulesOption, ThrottleOptions } from '../lib/options.js';
import type { Store } from '../lib/store.js';
import { MemoryStore } from '../lib/stores/memory-store.js';
import { Throttle } from '../lib/throttle.js';
import { delegatingStore } from './support/delegating-store.js';
import { redisClient, redisServer, redisStore, uniquePrefix } from './support/hooks.js';

interface Data {
  readonly user: string;
}

/** One call a job made: its job, user, start and completion (ms, this process's clock). */
interface Call {
  readonly id: string;
  readonly user: string;
  readonly start: number;
  end: number;
}

/**
 * Workers of one queue on the test Redis, each with a throttle of its own (as separate processes
 * would have) sharing one namespace; every job's processor records its call.
 */
function useQueue() {
  let closing: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const close of closing.reverse()) await close();
    closing = [];
  });

  return async function setUp(
    options: {
      readonly workers?: number;
      readonly concurrency?: number;
      readonly rules?: RulesOption;
      readonly throttle?: Partial<ThrottleOptions>;
      readonly processor?: Partial<ThrottleProcessorOptions<Job<Data, string>>>;
      readonly worker?: Partial<WorkerOptions>;
      readonly callMs?: number;
      readonly fn?: (job: Job<Data, string>) => Promise<string>;
      /** Each worker's store, wrapped (a store of the user's own). */
      readonly store?: (store: Store) => Store;
    } = {},
  ) {
    const prefix = uniquePrefix();
    const connection = (): Redis => {
      const client = new Redis(redisServer().url, { maxRetriesPerRequest: null });
      closing.push(async () => client.disconnect());
      return client;
    };
    const queue = new Queue<Data, string>('jobs', { connection: connection(), prefix });
    closing.push(() => queue.obliterate({ force: true }).finally(() => queue.close()));
    const calls: Call[] = [];
    const runs = new Map<string, number>();
    // Jobs whose processor saw a reservation's token in their data (none should).
    const sawToken: string[] = [];
    const throttles: Throttle[] = [];
    const workers: Array<Worker<Data, string>> = [];
    for (let i = 0; i < (options.workers ?? 2); i++) {
      const store = redisStore(connection(), { prefix });
      const throttle = new Throttle({ name: 'vendor', rules: options.rules ?? ['5/500ms'], store: options.store?.(store) ?? store, ...options.throttle });
      throttles.push(throttle);
      const fn =
        options.fn ??
        (async (job: Job<Data, string>) => {
          runs.set(job.id!, (runs.get(job.id!) ?? 0) + 1);
          if (RESERVATION in job.data) sawToken.push(job.id!);
          const call: Call = { id: job.id!, user: job.data.user, start: performance.now(), end: NaN };
          calls.push(call);
          await new Promise((resolve) => setTimeout(resolve, options.callMs ?? 5));
          call.end = performance.now();
          return `done ${job.id}`;
        });
      const worker = new Worker<Data, string>('jobs', throttleProcessor(throttle, fn, { key: (job) => job.data.user, ...options.processor }), {
        connection: connection(),
        prefix,
        concurrency: options.concurrency ?? 4,
        ...options.worker,
      });
      workers.push(worker);
      // The order the docs give: the worker first (its jobs finish), then the throttle.
      closing.push(async () => {
        await worker.close();
        await throttle.close();
      });
    }
    await Promise.all(workers.map((worker) => worker.waitUntilReady()));
    const finished = (count: number): Promise<Array<Job<Data, string>>> =>
      new Promise((resolve, reject) => {
        const seen: Array<Job<Data, string>> = [];
        const timer = setTimeout(() => reject(new Error(`only ${seen.length} of ${count} jobs ended within 15 s`)), 15_000);
        for (const worker of workers) {
          const ended = (job: Job<Data, string> | undefined): void => {
            if (job === undefined) return;
            seen.push(job);
            if (seen.length === count) {
              clearTimeout(timer);
              resolve(seen);
            }
          };
          worker.on('completed', ended);
          worker.on('failed', ended);
        }
      });
    return { queue, throttles, workers, calls, runs, sawToken, finished };
  };
}

/** Most calls of `user` that started within any `windowMs`, a completed call counting until its end + `windowMs` (the throttle's rule). */
function mostInWindow(calls: readonly Call[], user: string, windowMs: number): number {
  const mine = calls.filter((call) => call.user === user);
  let most = 0;
  for (const call of mine) most = Math.max(most, mine.filter((other) => other.start <= call.start && other.end + windowMs > call.start).length);
  return most;
}

describe('throttleProcessor (BullMQ)', function () {
  this.timeout(30_000);
  const setUp = useQueue();

  it("keeps every user under the limit across workers, delays a heavy user's jobs to their reserved slots, and lets light users through at once", async () => {
    const { queue, calls, runs, sawToken, finished } = await setUp();
    const ended = finished(20 + 2 * 3);
    await queue.addBulk(Array.from({ length: 20 }, (_, i) => ({ name: 'call', data: { user: 'heavy' }, opts: { jobId: `heavy-${i}` } })));
    const lightAdded = performance.now();
    await queue.addBulk(Array.from({ length: 6 }, (_, i) => ({ name: 'call', data: { user: `light-${i % 2}` }, opts: { jobId: `light-${i}` } })));
    const jobs = await ended;

    expect(jobs.every((job) => job.finishedOn !== undefined && job.failedReason === undefined)).to.equal(true);
    for (const user of ['heavy', 'light-0', 'light-1']) expect(mostInWindow(calls, user, 500)).to.be.at.most(5);
    expect([...runs.values()].every((count) => count === 1)).to.equal(true);
    expect(runs.size).to.equal(26);
    // The light users wait for no heavy job: all done while the heavy user still has 3 windows to go.
    const lightDone = Math.max(...calls.filter((call) => call.user !== 'heavy').map((call) => call.end));
    expect(lightDone - lightAdded).to.be.below(500);
    // The heavy user's jobs were delayed (not held in a worker), and no wait counted as an attempt.
    const heavy = jobs.filter((job) => job.data.user === 'heavy');
    expect(heavy.filter((job) => job.attemptsStarted > 1).length).to.be.at.least(10);
    expect(jobs.every((job) => job.attemptsMade === 1 && job.returnvalue === `done ${job.id}`)).to.equal(true);
    // Each delayed once at most, to its reserved slot; the processor sees the data as added.
    expect(Math.max(...heavy.map((job) => job.attemptsStarted))).to.be.at.most(2);
    expect(sawToken).to.deep.equal([]);
    // The quota is used: 20 calls at 5 per 500 ms take 3 windows and a bit, not a window per call.
    const heavyStarts = calls.filter((call) => call.user === 'heavy').map((call) => call.start);
    expect(Math.max(...heavyStarts) - Math.min(...heavyStarts)).to.be.below(2_500);
  });

  it("reserves a job's slot in each of its keys: an app-wide key over several users", async () => {
    const { queue, calls, runs, finished } = await setUp({ rules: ['3/500ms'], processor: { key: (job) => [job.data.user, 'app'] } });
    const ended = finished(12);
    await queue.addBulk(Array.from({ length: 12 }, (_, i) => ({ name: 'call', data: { user: `u${i % 4}` }, opts: { jobId: `j-${i}` } })));
    const jobs = await ended;
    expect(jobs.every((job) => job.failedReason === undefined)).to.equal(true);
    expect([...runs.values()].every((count) => count === 1)).to.equal(true);
    // Every call counts in 'app': at most 3 in any 500 ms, over every user and both workers.
    const app = calls.map((call) => ({ ...call, user: 'app' }));
    expect(mostInWindow(app, 'app', 500)).to.equal(3);
    // Reserved once, then delayed to that slot at most.
    expect(Math.max(...jobs.map((job) => job.attemptsStarted))).to.be.at.most(2);
    // 3 a window on 'app': 12 calls take 4 windows, not a window each.
    const starts = calls.map((call) => call.start);
    expect(Math.max(...starts) - Math.min(...starts)).to.be.below(2_600);
  });

  it("delays a paused key's jobs to the pause's end, without holding a worker", async () => {
    const { queue, throttles, calls, finished } = await setUp({ workers: 1, concurrency: 1, processor: { waitMs: 50 } });
    await throttles[0]!.pause('alice', 800);
    const ended = finished(2);
    const added = performance.now();
    await queue.add('call', { user: 'alice' }, { jobId: 'paused' });
    await queue.add('call', { user: 'bob' }, { jobId: 'free' });
    const jobs = await ended;
    const alice = calls.find((call) => call.user === 'alice')!;
    const bob = calls.find((call) => call.user === 'bob')!;
    expect(alice.start - added).to.be.at.least(790);
    // One worker slot: bob's job ran while alice's waited in the delayed set.
    expect(bob.end).to.be.below(alice.start);
    expect(jobs.find((job) => job.id === 'paused')!.attemptsStarted).to.equal(2);
  });

  it('a job whose reserved slot moved while it was delayed (a vendor pause) reserves again, and runs after the pause', async () => {
    const { queue, throttles, calls, finished } = await setUp({ workers: 1, rules: ['1/300ms'], processor: { waitMs: 50 } });
    const ended = finished(2);
    await queue.addBulk(['a', 'b'].map((id) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: id } })));
    // b is delayed to its reserved slot, its token in its data.
    let b = await queue.getJob('b');
    while ((await b!.getState()) !== 'delayed') {
      await new Promise((resolve) => setTimeout(resolve, 10));
      b = await queue.getJob('b');
    }
    expect((await queue.getJob('b'))!.data).to.have.property(RESERVATION);
    const pausedAt = performance.now();
    await throttles[0]!.pause('alice', 700);
    const jobs = await ended;
    const second = calls.find((call) => call.id === 'b')!;
    expect(second.start - pausedAt).to.be.at.least(690);
    expect(jobs.find((job) => job.id === 'b')!.attemptsStarted).to.equal(3);
  });

  it('a job whose slot is a window after a call it depends on completed, past waitMs, is delayed to it with its token: it starts then', async () => {
    const { queue, calls, finished } = await setUp({ workers: 1, rules: ['1/200ms'], callMs: 100, throttle: { reservationGraceMs: 2_000 } });
    const ended = finished(2);
    await queue.addBulk(['a', 'b'].map((id) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: id } })));
    await ended;
    const [a, b] = ['a', 'b'].map((id) => calls.find((call) => call.id === id)!);
    // A window after a's completion, not after a slot left behind (it would count 12 s).
    expect(b!.start - a!.end).to.be.within(195, 1_000);
  });

  it('waits in the worker for a slot within waitMs: the job starts once', async () => {
    const { queue, calls, finished } = await setUp({ workers: 1, rules: ['1/300ms'], processor: { waitMs: 1_000 } });
    const ended = finished(2);
    await queue.addBulk([
      { name: 'call', data: { user: 'alice' }, opts: { jobId: 'a' } },
      { name: 'call', data: { user: 'alice' }, opts: { jobId: 'b' } },
    ]);
    const jobs = await ended;
    expect(jobs.map((job) => job.attemptsStarted)).to.deep.equal([1, 1]);
    expect(calls[1]!.start - calls[0]!.end).to.be.at.least(295);
  });

  it("fails a job with the processor's own error, once, even a RateLimitedError", async () => {
    let ran = 0;
    const { queue, finished } = await setUp({
      workers: 1,
      fn: async () => {
        ran++;
        throw new RateLimitedError('another vendor', 'paused', 1_000);
      },
    });
    const ended = finished(1);
    await queue.add('call', { user: 'alice' }, { attempts: 1 });
    const [job] = await ended;
    expect(ran).to.equal(1);
    expect(job!.failedReason).to.match(/another vendor/);
    expect(job!.attemptsMade).to.equal(1);
  });

  it('with maxStartedAttempts, a job at its last start waits in the worker instead of being delayed and failed', async () => {
    const { queue, calls, finished } = await setUp({
      workers: 1,
      rules: ['1/700ms'],
      processor: { waitMs: 0, maxStartedAttempts: 2 },
      worker: { maxStartedAttempts: 2 },
      // Shorter than the wait at the last start: the job waits in the worker all the same.
      throttle: { maxDelayMs: 300 },
    });
    const ended = finished(3);
    await queue.addBulk(['a', 'b', 'c'].map((id) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: id } })));
    const jobs = await ended;
    expect(jobs.every((job) => job.failedReason === undefined)).to.equal(true);
    expect(Math.max(...jobs.map((job) => job.attemptsStarted))).to.equal(2);
    expect(mostInWindow(calls, 'alice', 700)).to.equal(1);
  });

  it('sends a job whose throttle closes before its slot back to the queue, a second later, not to the failed set', async () => {
    const { queue, throttles, workers, calls, finished } = await setUp({ workers: 1, concurrency: 2, rules: ['1/s'], processor: { waitMs: 5_000 } });
    const ended = finished(1);
    await queue.addBulk(['a', 'b'].map((id) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: id } })));
    await ended;
    // b waits in the worker for its slot, a second after a's.
    await new Promise((resolve) => setTimeout(resolve, 100));
    await throttles[0]!.close();
    // The worker goes on with the closed throttle: b comes back once a second, not in a loop.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await workers[0]!.close();
    const b = await queue.getJob('b');
    expect(await b!.getState()).to.equal('delayed');
    expect(b!.attemptsMade).to.equal(0);
    expect(b!.attemptsStarted).to.be.within(2, 3);
    expect(calls.map((call) => call.id)).to.deep.equal(['a']);
  });

  it('sends a job at its last start back to the queue too when its throttle is closed, not to the failed set', async () => {
    const { queue, throttles, workers } = await setUp({ workers: 1, processor: { maxStartedAttempts: 1 }, worker: { maxStartedAttempts: 2 } });
    await throttles[0]!.close();
    await queue.add('call', { user: 'alice' }, { jobId: 'last' });
    let job = await queue.getJob('last');
    while ((await job!.getState()) === 'waiting' || (await job!.getState()) === 'active') {
      await new Promise((resolve) => setTimeout(resolve, 20));
      job = await queue.getJob('last');
    }
    await workers[0]!.close();
    expect(await job!.getState()).to.equal('delayed');
    expect(job!.attemptsMade).to.equal(0);
  });

  it("counts a job's cost in its reservation: a job of a whole window's cost gets a window of its own", async () => {
    const { queue, calls, finished } = await setUp({ workers: 1, processor: { cost: () => 5 } });
    const ended = finished(4);
    await queue.addBulk(['a', 'b', 'c', 'd'].map((id) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: id } })));
    const jobs = await ended;
    expect(jobs.every((job) => job.failedReason === undefined)).to.equal(true);
    // Each delayed once, to a window of its own: none delayed twice, none waiting in the worker.
    expect(jobs.map((job) => job.attemptsStarted).sort()).to.deep.equal([1, 2, 2, 2]);
    const starts = calls.map((call) => call.start).sort((x, y) => x - y);
    for (let i = 1; i < starts.length; i++) expect(starts[i]! - starts[i - 1]!).to.be.at.least(495);
  });

  it('puts a new job of a key behind the jobs delayed on it, by any worker: their slots are reserved in the log', async () => {
    const { queue, calls, finished } = await setUp({ workers: 2, concurrency: 4 });
    const ended = finished(15);
    await queue.addBulk(Array.from({ length: 10 }, (_, i) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: `first-${i}` } })));
    await new Promise((resolve) => setTimeout(resolve, 300));
    await queue.addBulk(Array.from({ length: 5 }, (_, i) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: `then-${i}` } })));
    const jobs = await ended;
    const lastOfFirst = Math.max(...calls.filter((call) => call.id.startsWith('first')).map((call) => call.start));
    const firstOfThen = Math.min(...calls.filter((call) => call.id.startsWith('then')).map((call) => call.start));
    expect(firstOfThen).to.be.above(lastOfFirst);
    // The first 10 took their places once: 5 ran, 5 were delayed once.
    expect(
      jobs
        .filter((job) => job.id!.startsWith('first'))
        .map((job) => job.attemptsStarted)
        .sort(),
    ).to.deep.equal([1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
  });

  it('carries the token of a job whose data is not a plain object in a wrapper: the key, cost and processor see the data as added', async () => {
    const seen: unknown[] = [];
    const { queue, runs, finished } = await setUp({
      workers: 1,
      rules: ['2/500ms'],
      processor: { key: (job) => (job.data as unknown as string[])[0]!, cost: (job) => ((job.data as unknown as string[]).length > 0 ? 1 : 9) },
      fn: async (job) => {
        seen.push(job.data);
        runs.set(job.id!, (runs.get(job.id!) ?? 0) + 1);
        return `done ${job.id}`;
      },
    });
    const ended = finished(5);
    await queue.addBulk(Array.from({ length: 5 }, (_, i) => ({ name: 'call', data: ['alice', i] as unknown as Data, opts: { jobId: `a-${i}` } })));
    const jobs = await ended;
    expect(jobs.every((job) => job.failedReason === undefined)).to.equal(true);
    expect([...runs.values()].every((count) => count === 1)).to.equal(true);
    // Three were delayed to reserved slots, their data wrapped meanwhile; each ran with its array.
    expect(jobs.filter((job) => job.attemptsStarted === 2)).to.have.length(3);
    expect(seen.map((data) => JSON.stringify(data)).sort()).to.deep.equal([0, 1, 2, 3, 4].map((i) => JSON.stringify(['alice', i])));
  });

  it('on a store that keeps no reservations, delays a job to the soonest its slot could be free: every limit holds', async () => {
    const { queue, calls, runs, finished } = await setUp({ rules: ['2/500ms'], store: (store) => delegatingStore(store, {}) });
    const ended = finished(6);
    await queue.addBulk(Array.from({ length: 6 }, (_, i) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: `n-${i}` } })));
    const jobs = await ended;
    expect(jobs.every((job) => job.failedReason === undefined)).to.equal(true);
    expect([...runs.values()].every((count) => count === 1)).to.equal(true);
    expect(mostInWindow(calls, 'alice', 500)).to.equal(2);
    expect(jobs.some((job) => job.attemptsStarted > 1)).to.equal(true);
    // No job carried a token.
    expect(jobs.every((job) => !(RESERVATION in job.data))).to.equal(true);
  });

  it('works in a sandboxed processor: a throttle per child process, jobs delayed from the child', async () => {
    const prefix = uniquePrefix();
    process.env.VT_SPEC_REDIS_URL = redisServer().url;
    process.env.VT_SPEC_PREFIX = prefix;
    const connection = { url: redisServer().url, maxRetriesPerRequest: null };
    const queue = new Queue<Data, string>('sandboxed', { connection, prefix });
    const file = fileURLToPath(new URL('./support/bullmq-sandboxed.ts', import.meta.url));
    const worker = new Worker<Data, string>('sandboxed', file, { connection, prefix, concurrency: 3, useWorkerThreads: false });
    try {
      const ended = new Promise<Array<Job<Data, string>>>((resolve) => {
        const jobs: Array<Job<Data, string>> = [];
        const seen = (job: Job<Data, string> | undefined): void => {
          if (job !== undefined && jobs.push(job) === 6) resolve(jobs);
        };
        worker.on('completed', seen);
        worker.on('failed', seen);
      });
      await queue.addBulk(Array.from({ length: 6 }, (_, i) => ({ name: 'call', data: { user: 'alice' }, opts: { jobId: `s-${i}` } })));
      const jobs = await ended;
      expect(jobs.map((job) => job.returnvalue).sort()).to.deep.equal(jobs.map((job) => `done ${job.id}`).sort());
      expect(jobs.filter((job) => job.attemptsStarted > 1).length).to.be.at.least(3);
      const calls = (await redisClient().lrange(`${prefix}:calls`, 0, -1)).map((text) => JSON.parse(text) as { id: string; start: number });
      expect(calls.map((call) => call.id).sort()).to.deep.equal(jobs.map((job) => job.id).sort());
      // 2 per 500 ms: 6 calls span two windows at least, and no 500 ms holds 3 starts.
      const starts = calls.map((call) => call.start).sort((a, b) => a - b);
      for (let i = 2; i < starts.length; i++) expect(starts[i]! - starts[i - 2]!).to.be.at.least(495);
    } finally {
      await worker.close();
      await queue.obliterate({ force: true });
      await queue.close();
    }
  });

  it("gives back the reservation of a job whose data could not be written: the slot does not count to its bound, and the job fails with BullMQ's error", async () => {
    const throttle = new Throttle({ name: 'vendor', rules: ['1/10s'], store: new MemoryStore() });
    try {
      await throttle.schedule('alice', () => undefined);
      const job = {
        id: 'w-1',
        attemptsStarted: 1,
        attemptsMade: 0,
        data: { user: 'alice' },
        moveToDelayed: async () => undefined,
        updateData: async () => Promise.reject(new Error('Connection is closed.')),
      };
      let ran = 0;
      const processor = throttleProcessor(throttle, async () => ran++, { key: (j: typeof job) => j.data.user });
      const error = await processor(job, 'bullmq-lock').catch((caught: unknown) => caught);
      expect(error).to.be.instanceOf(Error).with.property('message', 'Connection is closed.');
      expect(ran).to.equal(0);
      // Given back in the background: the next call waits for the first's window alone, not behind a reserved slot.
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect((await throttle.inspect('alice')).bookedAhead).to.equal(0);
    } finally {
      await throttle.close();
    }
  });

  describe('a job waiting in the worker on a slot it just reserved', () => {
    /** A job by hand, its data as the processor writes it, and a processor on a key whose window is taken: its slot is 1 s away, within waitMs. */
    async function waiting(throttle: Throttle, signal?: AbortSignal) {
      await throttle.schedule('alice', () => undefined);
      const job = {
        id: 'w-2',
        attemptsStarted: 1,
        attemptsMade: 0,
        data: { user: 'alice' } as Record<string, unknown>,
        delayedTo: undefined as number | undefined,
        moveToDelayed: async (at: number) => void (job.delayedTo = at),
        updateData: async (data: Record<string, unknown>) => void (job.data = data),
      };
      let ran = 0;
      const processor = throttleProcessor(throttle, async () => ran++, { key: (j: typeof job) => j.data.user as string, waitMs: 5_000 });
      const outcome = processor(job, 'bullmq-lock', signal).catch((caught: unknown) => caught);
      while ((await throttle.inspect('alice')).bookedAhead === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      return { job, outcome, ran: () => ran };
    }

    it('gives its reservation back when the job is aborted: the slot does not count to its bound', async () => {
      const throttle = new Throttle({ name: 'vendor', rules: ['1/s'], store: new MemoryStore() });
      try {
        const aborting = new AbortController();
        const { outcome, ran } = await waiting(throttle, aborting.signal);
        aborting.abort(new Error('job cancelled'));
        expect(await outcome)
          .to.be.instanceOf(Error)
          .with.property('message', 'job cancelled');
        expect(ran()).to.equal(0);
        await new Promise((resolve) => setTimeout(resolve, 20));
        expect((await throttle.inspect('alice')).bookedAhead).to.equal(0);
      } finally {
        await throttle.close();
      }
    });

    it('sends the job back to the queue with its token when the throttle closes: the next worker claims the slot', async () => {
      const store = new MemoryStore();
      const throttle = new Throttle({ name: 'vendor', rules: ['1/s'], store });
      const next = new Throttle({ name: 'vendor', rules: ['1/s'], store });
      try {
        const { job, outcome } = await waiting(throttle);
        await throttle.close();
        expect(((await outcome) as Error).name).to.equal('DelayedError');
        expect(job.delayedTo).to.be.a('number');
        expect(job.data).to.have.property(RESERVATION).that.is.a('string');
        expect((await next.inspect('alice')).bookedAhead).to.equal(1);
        let ran = 0;
        const processor = throttleProcessor(next, async () => ran++, { key: (j: typeof job) => j.data.user as string, waitMs: 5_000 });
        await processor({ ...job, attemptsStarted: 2 }, 'bullmq-lock');
        expect(ran).to.equal(1);
        const usage = await next.inspect('alice');
        expect(usage.bookedAhead).to.equal(0);
        expect(usage.rules[0]!.used, 'the call made on the token').to.equal(1);
      } finally {
        await throttle.close();
        await next.close();
      }
    });
  });

  it('refuses bad options at once, with a typed error', async () => {
    const throttle = new Throttle({ rules: ['1/s'] });
    const fn = async (): Promise<void> => {};
    const bad =
      (options: object): (() => unknown) =>
      () =>
        throttleProcessor(throttle, fn, options as ThrottleProcessorOptions);
    expect(bad({})).to.throw(ThrottleConfigError, /key to be a function/);
    expect(bad({ key: () => 'a', waitMs: -1 })).to.throw(ThrottleConfigError, /waitMs/);
    expect(bad({ key: () => 'a', maxStartedAttempts: 0 })).to.throw(ThrottleConfigError, /maxStartedAttempts/);
    expect(bad({ key: () => 'a', wait: 5 })).to.throw(ThrottleConfigError, /Unknown throttleProcessor option 'wait'/);
    expect(() => throttleProcessor(throttle, 'fn' as never, { key: () => 'a' })).to.throw(ThrottleConfigError);
    expect(() => throttleProcessor({ mode: 'wait' } as never, fn, { key: () => 'a' })).to.throw(
      ThrottleConfigError,
      /Expected a Throttle made by vendor-throttle, got {"mode":"wait"}/,
    );
    const throwing = new Throttle({ rules: ['1/s'], mode: 'throw' });
    expect(() => throttleProcessor(throwing, fn, { key: () => 'a' })).to.throw(ThrottleConfigError, /'wait' mode/);
    await Promise.all([throttle.close(), throwing.close()]);
  });
});
