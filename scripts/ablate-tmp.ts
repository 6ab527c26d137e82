// Ablation: one batch of 256 decisions (with witnesses) and 256 completions, run 300 times.
import { Redis } from 'ioredis';
import { RedisStore } from '../lib/index.js';
const port = Number(process.argv[2] ?? 7799);
const client = new Redis({ port });
const admin = new Redis({ port });
await admin.flushall();
const store = new RedisStore(client, { prefix: 'ab' });
const rules = [{ limit: 1000, windowMs: 1000, bucketMs: 20 }];
const N = 256;
// warm: book each key once so witnesses exist
let prev: Array<{ key: string; member: string }> = [];
async function round() {
  const settles = prev.filter((p) => p.member).map((p) => store.settle('ns', p.key, [{ member: p.member, releaseAt: Date.now() }]));
  const asks = [];
  for (let i = 0; i < N; i++)
    asks.push(
      store
        .reserve({ namespace: 'ns', key: `u${i}`, cost: 1, maxHoldMs: 10000, retainMs: 1000, rules, maxDelayMs: Infinity })
        .then((r) => ({ key: `u${i}`, member: r.members[0]! })),
    );
  await Promise.all(settles);
  prev = await Promise.all(asks);
}
for (let i = 0; i < 20; i++) await round();
await new Promise((r) => setTimeout(r, 3500));
for (let i = 0; i < 5; i++) await round();
await admin.config('RESETSTAT');
for (let i = 0; i < 300; i++) await round();
const stats = await admin.info('commandstats');
let inner = 0;
let evalsha = 0;
for (const line of stats.split('\n')) {
  const m = line.match(/^cmdstat_(\w+):calls=(\d+),usec=(\d+)/);
  if (!m) continue;
  if (m[1] === 'evalsha') evalsha = Number(m[3]);
  else if (m[1] !== 'config' && m[1] !== 'info') inner += Number(m[3]);
}
const pairs = 300 * N;
console.log(
  `per pair: evalsha ${(evalsha / pairs).toFixed(2)} µs, commands ${(inner / pairs).toFixed(2)} µs, outside ${((evalsha - inner) / pairs).toFixed(2)} µs`,
);
console.log(
  stats
    .split('\n')
    .filter((l) => l.startsWith('cmdstat'))
    .map((l) => l.replace(/,rejected.*/, ''))
    .join('\n'),
);
await store.close();
client.disconnect();
admin.disconnect();
