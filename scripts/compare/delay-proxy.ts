/**
 * A TCP proxy that delays every chunk by a random time in [min, max] ms, each way, keeping the
 * order of the bytes: a Redis "in another zone" for the network-jitter scenario.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface DelayProxy {
  readonly port: number;
  close(): Promise<void>;
}

function delayedPipe(from: Socket, to: Socket, delay: () => number): void {
  const queue: Array<{ at: number; chunk: Buffer }> = [];
  let timer: NodeJS.Timeout | undefined;
  let last = 0;
  let ended = false;
  const drain = (): void => {
    timer = undefined;
    const now = performance.now();
    while (queue.length > 0 && queue[0]!.at <= now) to.write(queue.shift()!.chunk);
    if (queue.length > 0) timer = setTimeout(drain, Math.max(0, queue[0]!.at - now));
    else if (ended) to.end();
  };
  from.on('data', (chunk: Buffer) => {
    last = Math.max(last, performance.now() + delay());
    queue.push({ at: last, chunk });
    timer ??= setTimeout(drain, Math.max(0, queue[0]!.at - performance.now()));
  });
  from.on('end', () => {
    ended = true;
    if (queue.length === 0 && timer === undefined) to.end();
  });
  from.on('close', () => {
    if (timer !== undefined && !ended) {
      clearTimeout(timer);
      to.destroy();
    }
  });
}

export async function startDelayProxy(targetPort: number, delayMs: { min: number; max: number }): Promise<DelayProxy> {
  const sockets = new Set<Socket>();
  const delay = (): number => delayMs.min + Math.random() * (delayMs.max - delayMs.min);
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    delayedPipe(client, upstream, delay);
    delayedPipe(upstream, client, delay);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
