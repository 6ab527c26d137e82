/**
 * A vendor pause set while calls are booked ahead (docs/design.md, "A pause set while calls are
 * booked ahead"): lua/pause.lua announces it on the namespace's channel, and a process that holds
 * slots booked ahead there learns of it without reading the key's pause per call; a call booked
 * before its process's subscription was confirmed, or before the subscriber lost its connection,
 * reads the pause as before. Two stores on two clients stand for two processes.
 */
import { expect } from 'chai';
import type { Redis } from 'ioredis';
import { Throttle } from '../lib/index.js';
import { redisClient, redisStore, uniquePrefix } from './support/hooks.js';

const NAME = 'vendor';

async function until(what: string, check: () => Promise<boolean>, withinMs: number): Promise<void> {
  const end = Date.now() + withinMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The ids of the clients of the test Redis subscribed to some channel. */
async function subscribers(control: Redis): Promise<string[]> {
  const list = (await control.call('CLIENT', 'LIST', 'TYPE', 'pubsub')) as string;
  return list
    .split('\n')
    .filter((line) => / sub=[1-9]/.test(line))
    .map((line) => /^id=(\d+)/.exec(line)?.[1])
    .filter((id): id is string => id !== undefined);
}

/**
 * The times (`performance.now()`) the store on `client` read a key's pause: an `HGET … pause`, as a
 * call booked ahead whose slot comes due with nothing else to send reads it (a `PAUSED` operation
 * alone in its batch, lib/stores/redis-batch.ts).
 */
function pauseReads(client: Redis): number[] {
  const reads: number[] = [];
  const hget = client.hget.bind(client) as (key: string, field: string) => Promise<string | null>;
  Object.assign(client, {
    hget: (key: string, field: string) => {
      if (field === 'pause') reads.push(performance.now());
      return hget(key, field);
    },
  });
  return reads;
}

describe('RedisStore: vendor pauses announced to processes with calls booked ahead', () => {
  it('delays a call booked ahead by a pause another process set after its booking, without reading the pause', async () => {
    const prefix = uniquePrefix();
    const control = redisClient();
    const client = redisClient();
    const store = redisStore(client, { prefix });
    const other = redisStore(redisClient(), { prefix });
    const reads = pauseReads(client);
    const throttle = new Throttle({ name: NAME, rules: ['1/300ms'], store });
    const pauser = new Throttle({ name: NAME, rules: ['1/300ms'], store: other });
    let delayed = 0;
    throttle.on('delayed', () => (delayed += 1));
    const t0 = performance.now();
    const starts: number[] = [];
    const call = (): Promise<void> => throttle.schedule('acct', () => void starts.push(performance.now() - t0));
    // The first call starts at once; the second is booked ahead, which subscribes this process to the
    // namespace's pauses (it was booked before: it reads the pause when its start comes).
    const first = [call(), call()];
    await until('the subscription', async () => ((await control.pubsub('NUMSUB', `${prefix}:${NAME}:paused`)) as [string, number])[1] === 1, 2_000);
    await new Promise((resolve) => setTimeout(resolve, 50));
    // Booked after the subscription: it learns of pauses from their announcements.
    const third = call();
    await until('the third booking', async () => delayed === 2, 2_000);
    await pauser.pause('acct', 1_500);
    const pausedAt = performance.now() - t0;
    await Promise.all([...first, third]);
    expect(starts).to.have.length(3);
    // The third slot (and the second, if not started yet) was taken out of the log by the pause: no
    // call starts after it was set and before its end (less the store clock's reading in this process).
    for (const start of starts.filter((at) => at > pausedAt)) expect(start).to.be.at.least(pausedAt + 1_500 - 50);
    expect(starts[2]).to.be.above(pausedAt);
    // Of the slots due before the pause's end, only the one booked before the subscription read the
    // pause (the calls booked again after it may find the subscription gone: they read it then).
    expect(reads.filter((at) => at - t0 < pausedAt + 1_500)).to.have.length(1);
    await Promise.all([throttle.close(), pauser.close()]);
  });

  it('reads the pause for a call booked before its subscriber lost its connection, and holds it to the pause', async () => {
    const prefix = uniquePrefix();
    const control = redisClient();
    const client = redisClient();
    const store = redisStore(client, { prefix });
    const other = redisStore(redisClient(), { prefix });
    const reads = pauseReads(client);
    const throttle = new Throttle({ name: NAME, rules: ['1/300ms'], store });
    const pauser = new Throttle({ name: NAME, rules: ['1/300ms'], store: other });
    const channel = `${prefix}:${NAME}:paused`;
    // The subscribers of other stores on this Redis (other specs' stores, not closed yet).
    const before = await subscribers(control);
    const subscribed = async (): Promise<boolean> => ((await control.pubsub('NUMSUB', channel)) as [string, number])[1] === 1;
    let delayed = 0;
    throttle.on('delayed', () => (delayed += 1));
    const t0 = performance.now();
    const starts: number[] = [];
    const call = (): Promise<void> => throttle.schedule('acct', () => void starts.push(performance.now() - t0));
    const first = [call(), call()];
    await until('the subscription', subscribed, 2_000);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const third = call();
    await until('the third booking', async () => delayed === 2, 2_000);
    // This process's subscriber's connection is cut (its client reconnects and subscribes again on
    // its own): a pause set meanwhile may be announced while no subscription hears it.
    for (const id of (await subscribers(control)).filter((id) => !before.includes(id))) await control.call('CLIENT', 'KILL', 'ID', id);
    await pauser.pause('acct', 1_500);
    const pausedAt = performance.now() - t0;
    await Promise.all([...first, third]);
    expect(starts).to.have.length(3);
    for (const start of starts.filter((at) => at > pausedAt)) expect(start).to.be.at.least(pausedAt + 1_500 - 50);
    expect(starts[2]).to.be.above(pausedAt);
    // The call booked before the loss read the pause too, as did the one booked before the subscription.
    expect(reads.filter((at) => at - t0 < pausedAt + 1_500)).to.have.length(2);
    await Promise.all([throttle.close(), pauser.close()]);
  });
});
