/**
 * The same burst, round after round, in one process: what the waiting path costs this process per
 * call, from the first round (code not yet compiled by the JIT) to the later ones. USERS users
 * (default 100) × PER calls each (default 16) at once, rule 5/1s, each call 5–55 ms; ROUNDS rounds
 * (default 5), each on new keys.
 *
 *   npx tsx scripts/burst-rounds.ts
 *
 * Starts its own redis-server on a free port and stops it.
 */
import { Redis } from 'ioredis';
import { RedisStore, Throttle } from '../lib/index.js';
import { startRedis } from './support/redis-server.js';

const USERS = Number(process.env.USERS ?? 100);
const PER = Number(process.env.PER ?? 16);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const server = await startRedis();
const client = new Redis({ port: server.port });
const store = new RedisStore(client, { prefix: 'rounds' });
const throttle = new Throttle({ name: 'n', rules: ['5/1s'], store });
const call = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 50));

try {
  for (let round = 0; round < ROUNDS; round++) {
    const cpuBefore = process.cpuUsage();
    const startedAt = performance.now();
    const calls: Array<Promise<void>> = [];
    for (let j = 0; j < PER; j++) for (let u = 0; u < USERS; u++) calls.push(throttle.schedule(`r${round}u${u}`, call));
    await Promise.all(calls);
    const cpu = process.cpuUsage(cpuBefore);
    const seconds = (performance.now() - startedAt) / 1000;
    console.log(
      `round ${round + 1}: ${calls.length} calls in ${seconds.toFixed(2)} s, worker CPU ${Math.round((cpu.user + cpu.system) / calls.length)} µs per call`,
    );
  }
} finally {
  await throttle.close();
  await store.close();
  client.disconnect();
  await server.stop();
}
