/**
 * Functions (serverless) that reserve now and call later: a webhook handler reserves a user's slot
 * and hands the token to a platform's delay (QStash in production; a timer here); the sync handler,
 * invoked at the reservation's time, calls on the reserved slot. Each invocation makes its own
 * `@upstash/redis` client, store and throttle, as a function does; Redis is reached over HTTP, through
 * a local server of Upstash's REST protocol (scripts/support/upstash-rest.ts) in front of Redis.
 *
 *     npx tsx scripts/examples/functions.ts          # against redis://127.0.0.1:6379
 *     REDIS_URL=redis://host:port npx tsx scripts/examples/functions.ts
 *
 * Prints, per webhook, when its call was reserved for and when it started (ms from the first
 * webhook): at most 2 calls a second for the user, each reserved slot held for its grace (1 s) and
 * maxHoldMs (0.5 s) besides; then what a second delivery of a token does.
 * Its keys live under a fresh prefix and expire on their own.
 */
import { Redis } from '@upstash/redis';
import { RedisStore, ReservationError, Throttle } from '../../lib/index.js';
import { startUpstashRest } from '../support/upstash-rest.js';

const rest = await startUpstashRest(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const prefix = `example-${process.pid}`;
const webhooks = Number(process.env.EXAMPLE_WEBHOOKS ?? 6);
const t0 = Date.now();

/** One invocation: its own client, store and throttle, closed when it returns (a function's life). */
async function invocation<T>(work: (throttle: Throttle) => Promise<T>): Promise<T> {
  const store = new RedisStore(new Redis({ url: rest.url, token: rest.token, retry: false }), { prefix });
  const throttle = new Throttle({ name: 'acme', rules: ['2/s'], store, maxHoldMs: 500, reservationGraceMs: 1_000 });
  try {
    return await work(throttle);
  } finally {
    await throttle.close();
    await store.close();
  }
}

/** The platform's delay: QStash's `notBefore` in production. */
function deliverAt(at: number, body: { user: string; token: string }): Promise<string> {
  return new Promise((resolve, reject) => setTimeout(() => sync(body).then(resolve, reject), Math.max(0, at - Date.now())));
}

/** The webhook: reserves the user's slot and returns; the sync runs at the slot's time. */
async function onWebhook(user: string): Promise<{ readonly reservedFor: number; readonly delivered: Promise<string> }> {
  const { token, startAt } = await invocation((throttle) => throttle.reserve(user));
  return { reservedFor: startAt - t0, delivered: deliverAt(startAt, { user, token }) };
}

/** The sync: the vendor call, on the reserved slot. */
async function sync(body: { user: string; token: string }): Promise<string> {
  return invocation(async (throttle) => {
    try {
      return await throttle.schedule(body.user, async () => `started ${Date.now() - t0} ms`, { token: body.token, maxDelayMs: 2_000 });
    } catch (error) {
      if (error instanceof ReservationError) return `refused: ${error.reason}`;
      throw error;
    }
  });
}

try {
  const reserved = await Promise.all(Array.from({ length: webhooks }, () => onWebhook('alice')));
  reserved.sort((a, b) => a.reservedFor - b.reservedFor);
  for (const { reservedFor, delivered } of reserved) console.log(`alice: reserved for ${reservedFor} ms, ${await delivered}`);
  // A second delivery of the last token (a platform's retry): no second call.
  const { token } = await invocation((throttle) => throttle.reserve('bob'));
  await sync({ user: 'bob', token });
  console.log(`bob: a token delivered twice: ${await sync({ user: 'bob', token })}`);
} finally {
  await rest.close();
}
