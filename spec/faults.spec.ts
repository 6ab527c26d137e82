/**
 * Faults that are not Redis being down (spec/store-errors.spec.ts) or losing its data
 * (spec/data-loss.spec.ts):
 * - a worker process killed with `kill -9` while it holds booked slots and queued work;
 * - `SCRIPT FLUSH` in the middle of a run;
 * - a Redis ACL user that may only touch the throttle's key prefix and run its scripts.
 *
 * Real processes (spec/support/fault-worker.ts), the run's real Redis (spec/support/hooks.ts) and
 * the simulated vendor with a silent per-user limit (scripts/sim-vendor.ts).
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { readdirSync, readFileSync } from 'node:fs';
import { StoreUnavailableError, Throttle } from '../lib/index.js';
import { startVendor, type Vendor } from '../scripts/sim-vendor.js';
import { startFaultWorker, type FaultWorker, type FaultWorkerConfig, type FaultWorkerDone, type FaultWorkerProgress } from './support/fault-worker.js';
import { redisClient, redisServer, redisStore, uniquePrefix } from './support/hooks.js';

const LATENCY = { min: 5, max: 55 };
const now = (): number => performance.timeOrigin + performance.now();

function expectNothingOverTheLimit(vendor: Vendor): void {
  const stats = vendor.stats();
  expect(stats.dropped, `calls silently dropped by the vendor: ${JSON.stringify([...stats.droppedPerUser])}`).to.equal(0);
  expect(vendor.violations(), 'arrivals over the limit in their trailing window').to.equal(0);
  expect(vendor.maxInWindow(), 'most arrivals of one user in one window').to.be.at.most(vendor.limit);
}

/** Commands and their counters from `INFO commandstats`. */
async function commandStats(client: Redis): Promise<Map<string, { calls: number; rejected: number; failed: number }>> {
  const stats = new Map<string, { calls: number; rejected: number; failed: number }>();
  for (const line of (await client.info('commandstats')).split('\r\n')) {
    const match = /^cmdstat_([^:]+):calls=(\d+),.*rejected_calls=(\d+),failed_calls=(\d+)/.exec(line);
    if (match) stats.set(match[1]!, { calls: Number(match[2]), rejected: Number(match[3]), failed: Number(match[4]) });
  }
  return stats;
}

async function errorCount(client: Redis, prefix: string): Promise<number> {
  const match = new RegExp(`^errorstat_${prefix}:count=(\\d+)`, 'm').exec(await client.info('errorstats'));
  return match ? Number(match[1]) : 0;
}

describe('faults: a worker killed with kill -9 while it holds booked slots and queued work', function () {
  // Four child processes start tsx (~1 s each on 2 cores) before the clock of a scenario starts.
  this.timeout(60_000);

  const limit = 5;
  const windowMs = 300;
  const maxHoldMs = 300;
  const victimCalls = 20;
  const survivorCalls = 5;

  interface KillOutcome {
    readonly vendor: Vendor;
    /** The victim's last report before it died. */
    readonly victimAtDeath: FaultWorkerProgress;
    readonly survivors: FaultWorkerDone[];
    readonly exitCodes: Array<number | string>;
    readonly killedAt: number;
  }

  /**
   * What the victim holds when it is killed, besides calls still queued in its line:
   * - `in flight`: a window's worth of slots (calls in flight, or booked and sleeping until their start);
   * - `booked ahead`: at least one slot booked ahead (sleeping until its start, which is later than
   *   the kill), and a window's worth in all.
   * (v2 has one waiting mode, 'wait': a slot is booked ahead only when every call it depends on has
   * completed, so a process holds at most a window's worth of slots; the v1 `delay` scenario, two
   * windows booked ahead, no longer exists.)
   */
  type Scenario = 'in flight' | 'booked ahead';

  /**
   * Starts a victim and three survivors on one key. The victim goes first, alone, until it holds the
   * scenario's slots; then the survivors go and the victim is killed at once, its slots still
   * counting when the survivors ask. (Waiting processes take turns: a victim that shared the key
   * from the start could need most of the run to hold a window's worth, and the survivors would be
   * done before it died.)
   */
  async function killOneWorker(scenario: Scenario): Promise<KillOutcome> {
    const vendor = await startVendor({ limit, windowMs, latencyMs: LATENCY });
    const config: Omit<FaultWorkerConfig, 'calls'> = {
      redisUrl: redisServer().url,
      vendorUrl: vendor.url,
      prefix: uniquePrefix(),
      name: 'vendor',
      rules: [`${limit}/${windowMs}ms`],
      mode: 'wait',
      maxHoldMs,
      key: 'acct-1',
    };
    const victim = startFaultWorker({ ...config, calls: victimCalls });
    const survivors = [0, 1, 2].map(() => startFaultWorker({ ...config, calls: survivorCalls }));
    const workers: FaultWorker[] = [victim, ...survivors];
    try {
      await Promise.all(workers.map((worker) => worker.waitFor((message) => message.type === 'ready')));
      victim.go();
      // In flight: a window's worth of slots in flight or booked (the first call is asked alone, so on a
      // busy machine it may complete before the last of its window starts, and that slot is then booked
      // ahead). Booked ahead: a window's worth sleeping until its start, which no completion changes
      // before the kill.
      const holding = (message: FaultWorkerProgress): boolean =>
        message.queued >= 1 && (scenario === 'in flight' ? message.started - message.completed + message.sleeping >= limit : message.sleeping >= limit);
      // Its state as the kill is sent: a progress message sent after this one, before the signal
      // landed, may count a completion that raced the kill.
      const victimAtDeath = await victim.waitFor((message): message is FaultWorkerProgress => message.type === 'progress' && holding(message));
      for (const survivor of survivors) survivor.go();
      victim.child.kill('SIGKILL');
      const killedAt = now();
      const done = await Promise.all(survivors.map((survivor) => survivor.waitFor((message): message is FaultWorkerDone => message.type === 'done')));
      const exitCodes = await Promise.all(workers.map((worker) => worker.exited));
      return { vendor, victimAtDeath, survivors: done, exitCodes, killedAt };
    } finally {
      for (const { child } of workers) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await vendor.close();
    }
  }

  for (const scenario of ['in flight', 'booked ahead'] as const) {
    describe(`${scenario}: a victim and three survivors share one key, rule ${limit}/${windowMs}ms, maxHoldMs ${maxHoldMs}`, () => {
      let outcome: KillOutcome;
      /** The victim's reservations at its death: calls neither completed nor still queued (booked, sleeping, in flight, or being booked). */
      let reservations: number;
      /** Survivors' calls that had not started when the victim died. */
      let left: number;
      let finishedAfterKillMs: number;
      let boundMs: number;

      before(async function () {
        this.timeout(60_000);
        outcome = await killOneWorker(scenario);
        const { victimAtDeath, survivors, killedAt } = outcome;
        reservations = victimCalls - victimAtDeath.completed - victimAtDeath.queued;
        const starts = survivors.flatMap((survivor) => survivor.starts);
        left = starts.filter((start) => start > killedAt).length;
        finishedAfterKillMs = Math.max(...starts) - killedAt;
        // Without the victim, the remaining calls (the survivors', and as many as the victim held)
        // take ceil((left + reservations) / limit) windows, each costing at most the window plus the
        // slowest response (the next slot waits for it). A dead slot counts (v2 rule) until its
        // start + maxHoldMs while unfinished, then one window more; a slot is booked only on known
        // releases, so it starts at most one window after the kill: every dead slot stops counting
        // by kill + windowMs + maxHoldMs + windowMs. Twice the windows leaves room for 4 processes
        // on 2 cores. (v1 phrased it as maxHoldMs past the estimate, itself at most maxHoldMs past
        // the start: 2 × maxHoldMs + windowMs, the same figure here since maxHoldMs = windowMs.)
        const windows = Math.ceil((left + reservations) / limit);
        boundMs = 2 * windows * (windowMs + LATENCY.max) + windowMs + maxHoldMs + windowMs;
        console.log(
          `    [kill -9, ${scenario}] victim at death: ${JSON.stringify(victimAtDeath)}; survivors' calls left ${left}, ` +
            `finished ${Math.round(finishedAfterKillMs)} ms after the kill (bound ${boundMs} ms); ` +
            `vendor received ${outcome.vendor.stats().received}, dropped ${outcome.vendor.stats().dropped}, violations ${outcome.vendor.violations()}`,
        );
      });

      it('kills the victim while it holds booked slots and queued work', () => {
        expect(outcome.exitCodes[0]).to.equal('SIGKILL');
        expect(reservations, 'calls the victim had booked or was booking').to.be.at.least(limit);
        expect(outcome.victimAtDeath.queued, 'calls queued in its line').to.be.at.least(1);
        if (scenario === 'booked ahead') expect(outcome.victimAtDeath.sleeping, 'calls sleeping until a booked slot').to.be.at.least(1);
      });

      it('lets the survivors finish all their calls without an error and exit 0 by themselves', () => {
        expect(outcome.survivors.flatMap((survivor) => survivor.errors)).to.deep.equal([]);
        expect(outcome.survivors.map((survivor) => survivor.starts.length)).to.deep.equal([survivorCalls, survivorCalls, survivorCalls]);
        expect(outcome.exitCodes.slice(1)).to.deep.equal([0, 0, 0]);
        expect(left, 'survivors kept going after the kill').to.be.at.least(1);
      });

      it("lets no window over the limit reach the vendor, the dead worker's calls included", () => {
        expectNothingOverTheLimit(outcome.vendor);
        const received = outcome.vendor.stats().received;
        expect(received).to.be.within(3 * survivorCalls, 3 * survivorCalls + outcome.victimAtDeath.started);
      });

      it("loses no more capacity than the dead worker's own reservations, each counting until its start + maxHoldMs, then a window", () => {
        expect(finishedAfterKillMs, `last survivor start after the kill (bound ${boundMs} ms)`).to.be.below(boundMs);
      });
    });
  }
});

describe('faults: SCRIPT FLUSH in the middle of a run', function () {
  this.timeout(30_000);

  it('keeps every call succeeding (ioredis sends EVAL on NOSCRIPT), with no error reaching callers and no window over the limit', async () => {
    const limit = 5;
    const windowMs = 200;
    const vendor = await startVendor({ limit, windowMs, latencyMs: LATENCY });
    const prefix = uniquePrefix();
    // One client pipelines automatically, one does not. (Each has its own keys: how processes
    // share a key is the multi-process specs' business.)
    const throttles = [
      new Throttle({
        name: 'vendor',
        rules: [`${limit}/${windowMs}ms`],
        mode: 'wait',
        store: redisStore(redisClient({ enableAutoPipelining: true }), { prefix }),
      }),
      new Throttle({ name: 'vendor', rules: [`${limit}/${windowMs}ms`], mode: 'wait', store: redisStore(redisClient(), { prefix }) }),
    ];
    const problems: unknown[] = [];
    for (const throttle of throttles) {
      throttle.on('storeError', (event) => problems.push(event));
      throttle.on('debug', (event) => {
        if (event.error !== undefined) problems.push(event);
      });
    }
    const admin = redisClient();
    const noscriptBefore = await errorCount(admin, 'NOSCRIPT');
    let flushes = 0;
    const flusher = setInterval(() => {
      flushes += 1;
      void admin.script('FLUSH');
    }, 40);
    const errors: string[] = [];
    try {
      const url = (key: string): string => `${vendor.url}?user=${key}`;
      await Promise.all(
        throttles.flatMap((throttle, t) =>
          ['alice', 'bob', 'carol']
            .map((user) => `t${t}-${user}`)
            .flatMap((key) =>
              Array.from({ length: 12 }, () =>
                throttle
                  .schedule(key, async () => (await fetch(url(key))).text())
                  .catch((error: unknown) => {
                    errors.push(String(error));
                  }),
              ),
            ),
        ),
      );
    } finally {
      clearInterval(flusher);
      await Promise.all(throttles.map((throttle) => throttle.close()));
      await vendor.close();
    }
    const noscripts = (await errorCount(admin, 'NOSCRIPT')) - noscriptBefore;
    console.log(`    [SCRIPT FLUSH] ${flushes} flushes during the run, ${noscripts} NOSCRIPT replies recovered, vendor received ${vendor.stats().received}`);
    expect(errors).to.deep.equal([]);
    expect(problems, 'store errors and failed background writes').to.deep.equal([]);
    expect(flushes).to.be.at.least(5);
    expect(noscripts, 'EVALSHA calls that met a flushed script cache').to.be.at.least(1);
    expect(vendor.stats().received).to.equal(2 * 3 * 12);
    expectNothingOverTheLimit(vendor);
  });
});

describe('faults: a completion that reaches Redis after its window (a stalled worker, a slow network)', function () {
  this.timeout(10_000);

  it('leaves no key of the call without a time to live', async () => {
    const client = redisClient();
    const store = redisStore(client, { prefix: uniquePrefix() });
    const rules = [{ limit: 5, windowMs: 100 }];
    const booked = await store.reserve({
      namespace: 'late',
      key: 'user-1',
      rules,
      cost: 1,
      maxDelayMs: Infinity,
      maxHoldMs: 200,
      retainMs: 100,
    });
    expect(booked.status).to.equal('booked');
    // The call completed at once, but its completion is written 300 ms later, past its window.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await store.settle('late', 'user-1', [{ member: booked.members[0]!, releaseAt: booked.startAt + 1 }]);
    const keys = await client.keys(`${store.prefix}:late:{*`);
    const lifetimes = await Promise.all(keys.map(async (key) => [key, await client.pttl(key)] as const));
    await store.close();
    expect(
      lifetimes.filter(([, pttl]) => pttl === -1),
      'keys that would never expire',
    ).to.deep.equal([]);
  });
});

describe("faults: a Redis ACL user that may only touch the throttle's prefix and run its scripts", function () {
  this.timeout(30_000);

  /**
   * The commands the library's Lua scripts call. Redis checks a script's own commands (and its keys)
   * against the user that runs it, so EVALSHA alone is not enough.
   */
  function scriptCommands(): string[] {
    const commands = new Set<string>();
    for (const dir of ['../lib/lua/', '../lib/lua/includes/']) {
      const url = new URL(dir, import.meta.url);
      for (const file of readdirSync(url).filter((name) => name.endsWith('.lua'))) {
        for (const match of readFileSync(new URL(file, url), 'utf8').matchAll(/redis\.p?call\(\s*'([A-Za-z]+)'/g)) {
          commands.add(match[1]!.toLowerCase());
        }
      }
    }
    return [...commands].sort();
  }

  const user = `vt-acl-${process.pid}`;
  const password = 'vt-acl-password';
  const prefix = uniquePrefix();
  let admin: Redis;
  const clients: Redis[] = [];

  /**
   * What the library sends itself, besides its scripts' commands: EVALSHA (EVAL on NOSCRIPT), and
   * SUBSCRIBE on the subscriber connection it opens (`duplicate()`) to hear of completions. (INFO,
   * for the eviction watch, and HGET, for the pause a call booked ahead reads, are script commands
   * too.)
   */
  const clientCommands = ['evalsha', 'eval', 'subscribe'];

  /**
   * Creates (or resets) the user with exactly these commands, on keys `<prefix>:*` and channels
   * `<prefix>:*` only (completions are published on `<prefix>:<name>:free<tag>`).
   */
  async function setUser(commands: readonly string[]): Promise<void> {
    await admin.call('ACL', 'SETUSER', user, 'reset', 'on', `>${password}`, `~${prefix}:*`, `&${prefix}:*`, ...commands.map((command) => `+${command}`));
  }

  /** A client logged in as the user. No ready check: it would need INFO, which the library does not. */
  function userClient(): Redis {
    const client = new Redis(redisServer().url, { username: user, password, enableReadyCheck: false, maxRetriesPerRequest: 1 });
    clients.push(client);
    return client;
  }

  before(() => {
    admin = redisClient();
  });

  after(async () => {
    await Promise.allSettled(clients.map((client) => client.quit()));
    await admin.call('ACL', 'DELUSER', user);
  });

  it('runs a Throttle in every mode with only EVALSHA, EVAL, SUBSCRIBE and the commands its scripts call, with no command refused', async () => {
    const commands = [...clientCommands, ...scriptCommands()];
    console.log(`    [ACL] +${commands.join(' +')} ~${prefix}:* &${prefix}:*`);
    await setUser(commands);
    const store = redisStore(userClient(), { prefix });
    const statsBefore = await commandStats(admin);
    const refusedBefore = [...statsBefore.values()].reduce((sum, stat) => sum + stat.rejected, 0);
    const ran: string[] = [];
    for (const mode of ['wait', 'throw'] as const) {
      const throttle = new Throttle({ name: `acl-${mode}`, rules: ['3/150ms'], mode, store, maxHoldMs: 200 });
      const outcomes = await Promise.allSettled(
        // Each call takes 20 ms: the 4th call of a key asks while the calls it depends on are in flight.
        Array.from({ length: 8 }, (_, i) => throttle.schedule(`user:${i % 2}`, () => new Promise((resolve) => setTimeout(() => resolve(ran.push(mode)), 20)))),
      );
      const refused = outcomes.filter((outcome) => outcome.status === 'rejected');
      if (mode === 'throw')
        expect(refused.map((outcome) => (outcome as PromiseRejectedResult).reason.name)).to.deep.equal(['RateLimitedError', 'RateLimitedError']);
      else expect(refused.map((outcome) => String((outcome as PromiseRejectedResult).reason))).to.deep.equal([]);
      const usage = await throttle.inspect('user:0');
      expect(usage.rules[0]!.used).to.be.at.least(1);
      await throttle.pause('user:2', 50);
      const afterPause = await throttle.schedule('user:2', () => ran.push(mode)).catch((reason: unknown) => reason);
      if (mode === 'throw') expect(afterPause).to.have.property('reason', 'paused');
      // Let a call complete after the others booked on it, and the journal's heartbeat run.
      await new Promise((resolve) => setTimeout(resolve, 600));
      await throttle.close();
    }
    const statsAfter = await commandStats(admin);
    const refusedAfter = [...statsAfter.values()].reduce((sum, stat) => sum + stat.rejected, 0);
    // The 4th call of a key in 'wait' mode waits for a completion: the store subscribed.
    expect((statsAfter.get('subscribe')?.calls ?? 0) - (statsBefore.get('subscribe')?.calls ?? 0), 'SUBSCRIBE calls').to.be.at.least(1);
    // wait: 8 + 1 after the pause; throw: 6 (one refused per key), none after the pause.
    expect(ran).to.have.length(8 + 1 + 6);
    expect(refusedAfter - refusedBefore, 'commands Redis refused (ACL, background writes included)').to.equal(0);
  });

  it('without INFO: calls run, and the store says once that it cannot watch evictions nor tell which Redis wrote a liveness stamp (storeWarning cannotWatch)', async () => {
    await setUser([...clientCommands, ...scriptCommands().filter((command) => command !== 'info')]);
    const store = redisStore(userClient(), { prefix, recovery: { heartbeatMs: 50, graceMs: 150 } });
    const throttle = new Throttle({ name: 'acl-no-info', rules: ['3/150ms'], store });
    const warnings: Array<{ kind: string; message: string }> = [];
    throttle.on('storeWarning', (warning) => warnings.push(warning));
    const ran = await Promise.all(Array.from({ length: 4 }, (_, i) => throttle.schedule('u', () => i)));
    expect(ran).to.deep.equal([0, 1, 2, 3]);
    // Two heartbeats, each reading INFO stats.
    await new Promise((resolve) => setTimeout(resolve, 150));
    await throttle.close();
    expect(warnings.map((warning) => warning.kind)).to.deep.equal(['cannotWatch']);
    expect(warnings[0]!.message).to.match(/^Cannot read INFO stats \(NOPERM.*liveness stamp.*allow INFO/);
  });

  it('cannot touch a key outside the prefix, directly or from a script, so a library that did would be noticed', async () => {
    await setUser([...clientCommands, ...scriptCommands()]);
    const client = userClient();
    const outside = `${prefix}-other:key`;
    await admin.set(outside, 'kept');
    for (const attempt of [
      () => client.get(outside),
      () => client.set(outside, 'changed'),
      () => client.eval("return redis.call('GET', KEYS[1])", 1, outside),
      () => client.eval(`return redis.call('SET', '${outside}', 'changed')`, 0),
      () => client.call('FLUSHALL'),
      () => client.publish(`${prefix}-other:free`, 'x'),
      () => client.eval(`return redis.call('PUBLISH', '${prefix}-other:free', 'x')`, 0),
    ]) {
      const error = await attempt().then(
        () => undefined,
        (reason: unknown) => reason as Error,
      );
      // Redis 7.0 words a channel refused to a script as "can't publish to the channel".
      expect(error?.message, 'refused').to.match(/NOPERM|can't access|can't publish|no permissions/);
    }
    expect(await admin.get(outside)).to.equal('kept');
    await admin.del(outside);
  });

  it('needs the commands its scripts call: without TIME every decision fails with StoreUnavailableError (cause NOPERM)', async () => {
    await setUser([...clientCommands, ...scriptCommands().filter((command) => command !== 'time')]);
    const throttle = new Throttle({ name: 'acl-no-time', rules: ['3/150ms'], store: redisStore(userClient(), { prefix }) });
    let ran = false;
    const error = await throttle.schedule('u', () => (ran = true)).catch((reason: unknown) => reason);
    await throttle.close();
    expect(error).to.be.instanceOf(StoreUnavailableError);
    expect(String((error as StoreUnavailableError).cause)).to.match(/user executing the script can't run this command|NOPERM/);
    expect(ran).to.equal(false);
  });
});
