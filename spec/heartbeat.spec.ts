/**
 * The recovery heartbeat's round trips (lib/stores/redis-heartbeat.ts): its reading of
 * Redis's evictions (`INFO stats`) goes inside a batch, the one its checks go in or one it rides,
 * instead of as a command of its own; a process whose batches go several times a beat sends no
 * beat of its own. Counted with MONITOR on a Redis of the test's own.
 */
import { expect } from 'chai';
import { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../lib/index.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the recovery heartbeat', function () {
  this.timeout(20_000);
  let server: RedisServer;
  let monitor: Redis;
  /** MONITOR's own connection (`monitor()` opens one). */
  let feed: Redis;
  /** Commands seen, `client <name>` or `lua <name>` (INFO with its section). */
  const seen = new Map<string, number>();

  before(async () => {
    server = await startRedis();
    monitor = new Redis(server.url);
    feed = await monitor.monitor();
    feed.on('monitor', (_time: string, args: string[], source: string) => {
      const name = `${source.includes('lua') ? 'lua' : 'client'} ${args[0]!.toLowerCase()}${args[0]!.toLowerCase() === 'info' ? ` ${args[1] ?? ''}` : ''}`;
      seen.set(name, (seen.get(name) ?? 0) + 1);
    });
  });

  after(async () => {
    feed.disconnect();
    monitor.disconnect();
    await server.stop();
  });

  beforeEach(() => seen.clear());

  async function withThrottle(run: (throttle: Throttle) => Promise<void>): Promise<void> {
    const client = new Redis(server.url);
    const throttle = new Throttle({ rules: ['1000/1s'], store: new RedisStore(client, { prefix: `hb${Date.now()}` }) });
    try {
      await run(throttle);
    } finally {
      await throttle.close();
      client.disconnect();
    }
    // MONITOR's feed trails the commands a little.
    await sleep(100);
  }

  it('a busy process reads evictions in the batches its beats ride, with no INFO of its own', async () => {
    await withThrottle(async (throttle) => {
      // A call every 40 ms for 1.6 s: about three beats (heartbeatMs 500), each due while batches go.
      for (let i = 0; i < 40; i++) {
        void throttle.schedule(`user-${i % 3}`, async () => {});
        await sleep(40);
      }
    });
    expect(seen.get('client info stats') ?? 0, 'INFO stats sent on its own').to.equal(0);
    expect(seen.get('lua info stats') ?? 0, 'INFO stats read by batches').to.be.at.least(2);
  });

  it('an idle process holding a call sends each beat as one batch: its checks, the reading of evictions and the epoch', async () => {
    await withThrottle(async (throttle) => {
      // One call that runs 1.8 s: nothing else goes, so each beat goes at its timer.
      await throttle.schedule('user', () => sleep(1_800));
    });
    expect(seen.get('client info stats') ?? 0, 'INFO stats sent on its own').to.equal(0);
    expect(seen.get('client get') ?? 0, "the epoch's GET sent on its own").to.equal(0);
    expect(seen.get('lua info stats') ?? 0, 'INFO stats read by batches').to.be.at.least(2);
  });
});
