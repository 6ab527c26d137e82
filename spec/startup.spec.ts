/**
 * A Redis that starts with the app (docker compose up): processes connect to a brand-new Redis and
 * call at once. Nothing was ever stored there, so nothing may wait for a put-back: in every mode
 * their first calls are served at once (docs/design.md §9, "A start-up or a loss"). A restart that
 * lost data while processes held calls is still held: spec/data-loss.spec.ts.
 *
 * Real processes (spec/support/startup-worker.ts), each with its own client: what tells a start-up
 * from a loss counts the connections to Redis.
 */
import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { ThrottleMode } from '../lib/index.js';
import { startRedis, type RedisServer } from '../scripts/support/redis-server.js';
import { uniquePrefix } from './support/hooks.js';
import type { StartupConfig, StartupResult } from './support/startup-worker.js';

const WORKER = fileURLToPath(new URL('./support/startup-worker.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PROCESSES = 3;
/** Well under the default grace a sign of a loss costs (two heartbeats, 1 s; graceMs 3 s). */
const AT_ONCE_MS = 500;

/** Lines of a child's stdout, one promise per line to come ('closed' once it has ended). */
function lines(child: ChildProcess): () => Promise<string> {
  const queue: string[] = [];
  const waiting: Array<(line: string) => void> = [];
  let closed = false;
  const input = createInterface({ input: child.stdout! });
  input.on('line', (line) => {
    const next = waiting.shift();
    if (next) next(line);
    else queue.push(line);
  });
  input.on('close', () => {
    closed = true;
    for (const next of waiting.splice(0)) next('closed');
  });
  return () => (queue.length > 0 ? Promise.resolve(queue.shift()!) : closed ? Promise.resolve('closed') : new Promise((resolve) => waiting.push(resolve)));
}

describe('a Redis that starts with the app', function () {
  this.timeout(30_000);
  let server: RedisServer | undefined;
  let children: ChildProcess[] = [];

  afterEach(async () => {
    for (const child of children) child.kill('SIGKILL');
    children = [];
    await server?.stop();
    server = undefined;
  });

  /**
   * Starts the workers, then a brand-new Redis, and gives them its URL; once every one is connected
   * (so that each sees the others' connections), lets them call at once. Their results.
   */
  async function startTogether(mode: ThrottleMode): Promise<StartupResult[]> {
    const config: StartupConfig = { prefix: uniquePrefix(), mode };
    children = Array.from({ length: PROCESSES }, () =>
      spawn(process.execPath, ['--import', 'tsx', WORKER, JSON.stringify(config)], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] }),
    );
    const next = children.map(lines);
    // Loaded (tsx takes a while) before Redis starts, so that they connect within its first second.
    expect(await Promise.all(next.map((line) => line()))).to.deep.equal(Array(PROCESSES).fill('{"ready":true}'));
    server = await startRedis({ aged: false });
    for (const child of children) child.stdin!.write(`${server.url}\n`);
    expect(await Promise.all(next.map((line) => line()))).to.deep.equal(Array(PROCESSES).fill('{"connected":true}'));
    for (const child of children) child.stdin!.write('go\n');
    return (await Promise.all(next.map((line) => line()))).map((line) => JSON.parse(line) as StartupResult);
  }

  for (const mode of ['throw', 'wait', 'delay'] as const) {
    it(`${mode}: ${PROCESSES} processes calling at once on a brand-new Redis are served at once`, async () => {
      const results = await startTogether(mode);
      console.log(`      ${mode}: ${JSON.stringify(results)}`);
      // Young enough to be taken for a restart (up less than two heartbeats, 2 s) by the sign of a loss.
      for (const { uptimeS } of results) expect(uptimeS).to.be.below(2);
      expect(results.map((result) => result.error)).to.deep.equal(Array(PROCESSES).fill(null));
      for (const { startedAfterMs } of results) expect(startedAfterMs).to.be.a('number').and.below(AT_ONCE_MS);
    });
  }
});
