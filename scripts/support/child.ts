import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

/**
 * Resolves at the first line on stdin (a parent's "go"), then lets go of stdin entirely: a paused
 * pipe would keep the event loop, and so the process, alive.
 */
export function waitForLine(): Promise<void> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: process.stdin });
    const closed = (): void => reject(new Error('stdin closed before the go signal'));
    lines.once('close', closed);
    lines.once('line', () => {
      lines.off('close', closed);
      lines.close();
      process.stdin.destroy();
      resolve();
    });
  });
}

/**
 * When the module at `moduleUrl` is the process's entry point (`node --import tsx <file> '<json>'`),
 * runs `run` with the JSON config from argv[2]: exit code 2 without one, 1 (with the stack on stderr)
 * when it throws. No top-level await: spec files import these modules, and mocha loads them through
 * require() when it can.
 */
export function runAsChild<C>(moduleUrl: string, what: string, run: (config: C) => Promise<void>): void {
  if (process.argv[1] === undefined || moduleUrl !== pathToFileURL(process.argv[1]).href) return;
  const configText = process.argv[2];
  if (configText === undefined) {
    process.stderr.write(`usage: node --import tsx ${process.argv[1]} '<json config>'\n`);
    process.exitCode = 2;
    return;
  }
  run(JSON.parse(configText) as C).catch((error: unknown) => {
    process.stderr.write(`${what} ${process.pid} failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  });
}
