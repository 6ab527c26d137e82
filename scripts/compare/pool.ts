/** The worker processes of the side-by-side benchmark, started once and reused for every run. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { Command, Reply } from './protocol.js';

const WORKER_PATH = fileURLToPath(new URL('./worker.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

class Worker {
  readonly #child: ChildProcess;
  readonly #replies: Reply[] = [];
  readonly #stderr: string[] = [];
  #waiting: (() => void) | undefined;
  #exited = false;

  constructor() {
    this.#child = spawn(process.execPath, ['--import', 'tsx', WORKER_PATH], { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
    createInterface({ input: this.#child.stdout! }).on('line', (line) => {
      try {
        this.#replies.push(JSON.parse(line) as Reply);
      } catch {
        this.#stderr.push(`(stdout) ${line}`);
      }
      this.#wake();
    });
    createInterface({ input: this.#child.stderr! }).on('line', (line) => {
      this.#stderr.push(line);
      if (process.env.COMPARE_DEBUG) process.stderr.write(`${line}\n`);
      if (this.#stderr.length > 40) this.#stderr.shift();
    });
    this.#child.once('exit', () => {
      this.#exited = true;
      this.#wake();
    });
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  #wake(): void {
    const wake = this.#waiting;
    this.#waiting = undefined;
    wake?.();
  }

  send(command: Command): void {
    if (!this.#exited) this.#child.stdin!.write(`${JSON.stringify(command)}\n`);
  }

  /** The next reply of one of `types` (or `failed`); other replies (a late `torn`) are skipped. */
  async next(types: ReadonlyArray<Reply['type']>, deadline: number): Promise<Reply> {
    for (;;) {
      while (this.#replies.length > 0) {
        const reply = this.#replies.shift()!;
        if (reply.type === 'failed' || types.includes(reply.type)) return reply;
      }
      if (this.#exited) return { type: 'failed', message: `worker ${this.pid} exited${this.#describeStderr()}` };
      const left = deadline - Date.now();
      if (left <= 0) return { type: 'failed', message: `worker ${this.pid} gave no ${types.join('/')} in time${this.#describeStderr()}` };
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiting = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  #describeStderr(): string {
    return this.#stderr.length > 0 ? `:\n${this.#stderr.slice(-10).join('\n')}` : '';
  }

  async stop(): Promise<void> {
    if (this.#exited) return;
    const exited = new Promise<void>((resolve) => this.#child.once('exit', () => resolve()));
    this.send({ type: 'exit' });
    this.#child.stdin!.end();
    const timer = setTimeout(() => this.#child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }

  kill(): void {
    if (!this.#exited) this.#child.kill('SIGKILL');
  }
}

export class WorkerPool {
  #workers: Worker[];

  constructor(readonly size: number) {
    this.#workers = Array.from({ length: size }, () => new Worker());
  }

  get pids(): Array<number | undefined> {
    return this.#workers.map((worker) => worker.pid);
  }

  send(index: number, command: Command): void {
    this.#workers[index]!.send(command);
  }

  broadcast(command: Command): void {
    for (const worker of this.#workers) worker.send(command);
  }

  /** One reply of `types` (or `failed`) from every worker (or the workers `only` lists), in worker order. */
  collect(types: ReadonlyArray<Reply['type']>, timeoutMs: number, only?: readonly number[]): Promise<Reply[]> {
    const deadline = Date.now() + timeoutMs;
    const workers = only === undefined ? this.#workers : only.map((index) => this.#workers[index]!);
    return Promise.all(workers.map((worker) => worker.next(types, deadline)));
  }

  /** Kills every worker (this pool's own children, by pid) and starts fresh ones. */
  restart(): void {
    for (const worker of this.#workers) worker.kill();
    this.#workers = Array.from({ length: this.size }, () => new Worker());
  }

  async stop(): Promise<void> {
    await Promise.all(this.#workers.map((worker) => worker.stop()));
  }

  kill(): void {
    for (const worker of this.#workers) worker.kill();
  }
}
