/**
 * A process that starts with its Redis (spec/startup.spec.ts):
 *
 *     node --import tsx spec/support/startup-worker.ts '<json StartupConfig>'
 *
 * Prints `{"ready":true}` once loaded, then waits for a line on stdin holding the Redis URL: only
 * then does it connect (its own ioredis client and RedisStore), and prints `{"connected":true}` once
 * the client is ready. At the next line it makes one call through a Throttle in `mode`, prints ONE
 * JSON line, a {@link StartupResult}, closes everything and exits.
 */
import { Redis } from 'ioredis';
import { createInterface } from 'node:readline';
import { RedisStore, Throttle, type ThrottleMode } from '../../lib/index.js';
import { runAsChild } from '../../scripts/support/child.js';

export interface StartupConfig {
  readonly prefix: string;
  readonly mode: ThrottleMode;
}

export interface StartupResult {
  /** From the go line to the call's start (ms), or null if it did not start. */
  readonly startedAfterMs: number | null;
  /** Redis's uptime (s) just before the call, read on this process's own connection. */
  readonly uptimeS: number;
  /** The call's error: its name and `reason`, if it failed. */
  readonly error: { readonly name: string; readonly reason?: unknown } | null;
}

/** The first two lines on stdin, each as it comes; then lets go of stdin. */
function twoLines(): [Promise<string>, Promise<string>] {
  const lines = createInterface({ input: process.stdin });
  const got: Array<(line: string) => void> = [];
  const fail: Array<(error: Error) => void> = [];
  const next = (): Promise<string> =>
    new Promise<string>((resolve, reject) => {
      got.push(resolve);
      fail.push(reject);
    });
  const both: [Promise<string>, Promise<string>] = [next(), next()];
  lines.on('close', () => fail.splice(0).forEach((reject) => reject(new Error('stdin closed early'))));
  lines.on('line', (line) => {
    fail.shift();
    got.shift()?.(line);
    if (got.length === 0) {
      lines.close();
      process.stdin.destroy();
    }
  });
  return both;
}

runAsChild<StartupConfig>(import.meta.url, 'startup worker', async (config) => {
  const [urlLine, goLine] = twoLines();
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  const client = new Redis(await urlLine);
  client.on('error', () => {});
  // Heartbeats of 1 s: Redis counts as young (up less than two heartbeats, in whole seconds) for
  // 2 s, time for three processes to load and connect on a busy machine.
  const store = new RedisStore(client, { prefix: config.prefix, recovery: { heartbeatMs: 1000, graceMs: 3000 } });
  const throttle = new Throttle({ name: 'vendor', rules: ['10/1s'], store, mode: config.mode });
  await new Promise((resolve) => client.once('ready', resolve));
  process.stdout.write(`${JSON.stringify({ connected: true })}\n`);
  await goLine;
  const arrived = performance.now();
  // Settled into a value, so that a refusal before the INFO below is no unhandled rejection.
  const calling = throttle
    .schedule('user', () => performance.now())
    .then(
      (started) => ({ started }),
      (error: unknown) => ({ error }),
    );
  const uptimeS = Number(/uptime_in_seconds:(\d+)/.exec(await client.info('server'))?.[1]);
  let result: StartupResult;
  try {
    const outcome = await calling;
    if ('started' in outcome) {
      result = { startedAfterMs: Math.round(outcome.started - arrived), uptimeS, error: null };
    } else {
      const { name, reason } = outcome.error as { name: string; reason?: unknown };
      result = { startedAfterMs: null, uptimeS, error: { name, reason } };
    }
  } finally {
    await throttle.close();
    await store.close();
    client.disconnect();
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
});
