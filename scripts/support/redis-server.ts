import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

/** A redis-server process this test run started, on a free port of 127.0.0.1. */
export interface RedisServer {
  readonly port: number;
  readonly url: string;
  readonly pid: number;
  /** Stops the server by pid and removes its directory. */
  stop(): Promise<void>;
}

/** Asks the kernel for a free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/**
 * Starts `redis-server` with no persistence on a free port (or `port`), waits until it answers PING
 * and, unless `aged` is false, until it has been up a whole second: a process that finds a
 * namespace without an epoch on a Redis up for less than its grace takes it for a restart that lost
 * data, and waits (lib/lua/epoch.lua). `aged` defaults to false when `port` is given: a server
 * started again on the port of one that was killed stands for a restart. Never touches a server it
 * did not start.
 */
export async function startRedis(options: { port?: number; args?: string[]; aged?: boolean } = {}): Promise<RedisServer> {
  for (let attempt = 0; ; attempt++) {
    const port = options.port ?? (await freePort());
    const dir = mkdtempSync(join(tmpdir(), 'vt-redis-'));
    const child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...(options.args ?? [])],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    try {
      await waitForPing(port, child);
    } catch (error) {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
      if (attempt < 3 && options.port === undefined) continue;
      throw new Error(`redis-server did not start on port ${port}: ${(error as Error).message}\n${output}`, { cause: error });
    }
    if (options.aged ?? options.port === undefined) await waitForUptime(port, 1);
    return {
      port,
      url: `redis://127.0.0.1:${port}`,
      pid: child.pid!,
      stop: () => stopChild(child, dir),
    };
  }
}

/** Waits until the server on `port` has been up `seconds` (INFO uptime_in_seconds). */
async function waitForUptime(port: number, seconds: number): Promise<void> {
  const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 });
  client.on('error', () => {});
  try {
    for (;;) {
      const uptime = Number(/uptime_in_seconds:(\d+)/.exec(await client.info('server'))?.[1] ?? 0);
      if (uptime >= seconds) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    client.disconnect();
  }
}

async function waitForPing(port: number, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`exited with code ${child.exitCode}`);
    const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    try {
      await client.connect();
      if ((await client.ping()) === 'PONG') return;
    } catch {
      // not up yet
    } finally {
      client.disconnect();
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('no PONG within 5 s');
}

async function stopChild(child: ChildProcess, dir: string): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  }
  rmSync(dir, { recursive: true, force: true });
}
